#include "engine/launcher_agent.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace drover {
namespace {

// Each node's output to its end, then its exit, as the driver reads them.
struct Ended {
  std::string output;
  os::ExitStatus exit = os::ExitStatus::Exited(-1);
};

// The exit first (the driver asks as soon as the exit fd wakes it), then the
// output to its end.
Ended Finish(AgentProcess& process) {
  Ended ended;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    if (auto exit = process.Poll()) {
      ended.exit = *exit;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << process.executor_id() << " never ended";
      return ended;
    }
    pollfd fd{process.exit_fd(), POLLIN, 0};
    ::poll(&fd, 1, 100);
  }
  char buffer[256];
  while (process.output_fd() >= 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd fd{process.output_fd(), POLLIN, 0};
    if (::poll(&fd, 1, 1000) <= 0) continue;
    const ssize_t n = ::read(process.output_fd(), buffer, sizeof(buffer));
    if (n > 0) ended.output.append(buffer, static_cast<size_t>(n));
    if (n == 0) process.CloseOutput();
  }
  return ended;
}

// A launcher standing in for ssh: it takes the two credential lines, writes
// the whole relayed stream of a host agent whose nodes exited 0 and 3, and
// exits at once with `code`, before its last frames may have gone through
// the demux.
std::vector<std::string> Launcher(const std::string& stream, int code) {
  return {"sh", "-c",
          "read a; read b; [ \"$a $b\" = 'one two' ] || exit 9; printf '" + stream +
              "'; echo 'ssh: closing' >&2; exit " + std::to_string(code)};
}

TEST(StartHostThroughLauncherTest, EachNodeGetsItsOwnCodeThoughTheLauncherEndsAtOnce) {
  const std::string stream =
      "\\036o0 6\\nhello\\n\\036s0 4\\n0 0\\n\\036e0 0\\n"
      "\\036o1 4\\nbye\\n\\036s0 4\\n1 3\\n\\036e1 0\\n";
  for (int round = 0; round < 50; ++round) {
    auto nodes = StartHostThroughLauncher({"0", "1"}, Launcher(stream, 7), {"one", "two"}, nullptr);
    ASSERT_TRUE(nodes.ok()) << nodes.status().message();
    ASSERT_EQ(nodes->size(), 2u);
    Ended zero = Finish(*(*nodes)[0]);
    Ended one = Finish(*(*nodes)[1]);
    EXPECT_EQ(zero.exit, os::ExitStatus::Exited(0)) << round;
    EXPECT_EQ(one.exit, os::ExitStatus::Exited(3)) << round;
    // The launcher's own stderr comes with node 0's output.
    EXPECT_NE(zero.output.find("hello\n"), std::string::npos) << zero.output;
    EXPECT_NE(zero.output.find("ssh: closing\n"), std::string::npos) << zero.output;
    EXPECT_EQ(one.output, "bye\n");
  }
}

TEST(StartHostThroughLauncherTest, ANodeTheAgentNeverReportedEndsWithTheLauncher) {
  // The agent died after node 0 ended: node 1 takes the launcher's status,
  // explained by the engine's words.
  const std::string stream = "\\036s0 4\\n0 0\\n";
  auto nodes = StartHostThroughLauncher(
      {"0", "1"}, Launcher(stream, 255), {"one", "two"},
      [](const os::ExitStatus& status) { return "its ssh ended: " + status.ToString(); });
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  Ended zero = Finish(*(*nodes)[0]);
  Ended one = Finish(*(*nodes)[1]);
  EXPECT_EQ(zero.exit, os::ExitStatus::Exited(0));
  EXPECT_EQ(one.exit, os::ExitStatus::Exited(255));
  EXPECT_EQ((*nodes)[0]->DescribeExit(zero.exit), "exit code 0");
  EXPECT_EQ((*nodes)[1]->DescribeExit(one.exit), "its ssh ended: exit code 255");
}

}  // namespace
}  // namespace drover

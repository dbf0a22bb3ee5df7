#include "os/process_tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace drover::os {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Optional;

TEST(ParseProcStatTest, ReadsTheFieldsAfterACommandNameWithSpacesAndParentheses) {
  std::optional<ProcessEntry> entry =
      ParseProcStat("4242 (my (odd) prog) S 17 4242 99 34816 4242 4194560 120 0 0 0");
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->pid, 4242);
  EXPECT_EQ(entry->state, 'S');
  EXPECT_EQ(entry->ppid, 17);
  EXPECT_EQ(entry->pgid, 4242);
  EXPECT_EQ(entry->sid, 99);
}

TEST(ParseProcStatTest, RefusesWhatIsNotAStatLine) {
  EXPECT_EQ(ParseProcStat(""), std::nullopt);
  EXPECT_EQ(ParseProcStat("abc (x) S 1 2 3"), std::nullopt);
  EXPECT_EQ(ParseProcStat("12 (x)"), std::nullopt);
  EXPECT_EQ(ParseProcStat("12 x) S 1 2 3"), std::nullopt);
}

TEST(ListProcessesTest, FindsThisProcess) {
  bool found = false;
  for (const ProcessEntry& process : ListProcesses()) {
    if (process.pid == ::getpid()) {
      found = true;
      EXPECT_EQ(process.ppid, ::getppid());
      EXPECT_EQ(process.pgid, ::getpgrp());
    }
  }
  EXPECT_TRUE(found);
}

// Runs `script` with sh in a child of a forked subreaper, which waits for
// the file `ready` and then leaves the child's tree to the test. Returns the
// subreaper's pid.
class SubreaperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/drover-os-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (reaper_ > 0) {
      ::kill(reaper_, SIGKILL);
      ::waitpid(reaper_, nullptr, 0);
    }
    std::string command = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(command.c_str()), 0);
  }

  std::string dir_;
  pid_t reaper_ = -1;
};

bool WaitFor(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A forked child of this test that makes itself a subreaper and runs a
// program whose grandchildren escape its process group and session; it then
// kills its whole tree with KillOwnDescendants and exits 0 when nothing was
// left, 1 otherwise.
TEST_F(SubreaperTest, KillOwnDescendantsReachesEscapedAndReparentedProcesses) {
  const std::string ready = dir_ + "/ready";
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  reaper_ = ::fork();
  ASSERT_GE(reaper_, 0);
  if (reaper_ == 0) {
    ::close(report[0]);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    const std::string script =
        // A grandchild in the group, one in a new session, one whose parent
        // exits (reparented to us), each a sleep that outlives the test.
        "sleep 300 & setsid sleep 301 & (sleep 302 &) ; touch '" + ready + "'; wait";
    pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/sh", "sh", "-c", script.c_str(), nullptr);
      ::_exit(127);
    }
    while (::access(ready.c_str(), F_OK) != 0) ::usleep(1000);
    int found = static_cast<int>(Descendants(::getpid()).size());
    bool empty = KillOwnDescendants(std::chrono::seconds(10));
    int left = static_cast<int>(Descendants(::getpid()).size());
    int values[2] = {found, left};
    (void)!::write(report[1], values, sizeof(values));
    ::_exit(empty && left == 0 ? 0 : 1);
  }
  ::close(report[1]);
  int values[2] = {0, 0};
  ASSERT_EQ(::read(report[0], values, sizeof(values)), static_cast<ssize_t>(sizeof(values)));
  ::close(report[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(reaper_, &status, 0), reaper_);
  reaper_ = -1;
  // sh, the three sleeps (the subshell may still be there or gone).
  EXPECT_GE(values[0], 4);
  EXPECT_EQ(values[1], 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(SubreaperTest, DescendantsListsParentsBeforeChildren) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl("/bin/sh", "sh", "-c", "sleep 300 & wait", nullptr);
    ::_exit(127);
  }
  ASSERT_TRUE(WaitFor([&] { return Descendants(::getpid()).size() >= 2; }));
  std::vector<pid_t> found = Descendants(::getpid());
  EXPECT_EQ(found.front(), child);
  EXPECT_EQ(SignalDescendants(child, SIGKILL), 1);  // the sleep
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_THAT(Descendants(child), IsEmpty());
}

}  // namespace
}  // namespace drover::os

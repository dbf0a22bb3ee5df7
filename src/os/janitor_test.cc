#include "os/janitor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace drover::os {
namespace {

namespace fs = std::filesystem;

// RunJanitor in a forked child reading a pipe the test writes.
class JanitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/drover-janitor-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    int fds[2];
    // Close-on-exec: a program a test starts must not hold the pipe open.
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    janitor_ = ::fork();
    ASSERT_GE(janitor_, 0);
    if (janitor_ == 0) {
      ::close(fds[1]);
      ::_exit(RunJanitor(fds[0]));
    }
    ::close(fds[0]);
    pipe_ = fds[1];
  }
  void TearDown() override {
    if (pipe_ >= 0) ::close(pipe_);
    if (janitor_ > 0) ::waitpid(janitor_, nullptr, 0);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  void Say(const std::string& line) {
    std::string text = line + "\n";
    ASSERT_EQ(::write(pipe_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Closes the pipe (as the watched process's death would) and waits for
  // the janitor to finish.
  int EndAndWait() {
    ::close(pipe_);
    pipe_ = -1;
    int status = 0;
    EXPECT_EQ(::waitpid(janitor_, &status, 0), janitor_);
    janitor_ = -1;
    return status;
  }

  std::string dir_;
  pid_t janitor_ = -1;
  int pipe_ = -1;
};

TEST_F(JanitorTest, RemovesWatchedPathsWhenThePipeEnds) {
  const std::string watched = dir_ + "/watched";
  const std::string forgotten = dir_ + "/forgotten";
  const std::string file = dir_ + "/file";
  fs::create_directories(watched + "/inside");
  std::ofstream(watched + "/inside/x") << "x";
  fs::create_directories(forgotten);
  std::ofstream(file) << "secret";
  Say("+" + watched);
  Say("+" + forgotten);
  Say("+" + file);
  Say("-" + forgotten);
  Say("+relative/paths/are/refused");
  const int status = EndAndWait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(watched));
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(fs::exists(forgotten));
}

TEST_F(JanitorTest, StopsProcessesThatNameAWatchedDirectory) {
  const std::string watched = dir_ + "/control";
  fs::create_directories(watched);
  std::ofstream(watched + "/log") << "";
  pid_t user = ::fork();
  ASSERT_GE(user, 0);
  if (user == 0) {
    // Like an ssh ControlMaster: its command line names the directory.
    const std::string log = watched + "/log";
    ::execl("/usr/bin/tail", "tail", "-f", log.c_str(), nullptr);
    ::_exit(127);
  }
  // Until the exec shows the directory in its command line.
  for (int i = 0; i < 3000; ++i) {
    std::ifstream in("/proc/" + std::to_string(user) + "/cmdline");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("tail") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Say("+" + watched);
  EndAndWait();
  int status = 0;
  ASSERT_EQ(::waitpid(user, &status, 0), user);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_FALSE(fs::exists(watched));
}

}  // namespace
}  // namespace drover::os

#include "os/subprocess.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover::os {
namespace {

using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return options;
}

std::string ReadAll(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 10'000);
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      return out;
    }
  }
}

bool GroupGone(pid_t pgid) {
  return ::kill(-pgid, 0) != 0 && errno == ESRCH;
}

// Waits (bounded) for a group's last members to be reaped by whoever adopted them.
bool EventuallyGone(pid_t pgid) {
  for (int i = 0; i < 1000 && !GroupGone(pgid); ++i) std::this_thread::sleep_for(10ms);
  return GroupGone(pgid);
}

TEST(ExitStatusTest, Strings) {
  EXPECT_EQ(ExitStatus::Exited(3).ToString(), "exit code 3");
  EXPECT_EQ(ExitStatus::Signaled(SIGKILL).ToString(), "killed by SIGKILL");
  EXPECT_EQ(ExitStatus::Signaled(SIGTERM).ShellCode(), 143);
  EXPECT_EQ(ExitStatus::Exited(3).ShellCode(), 3);
  EXPECT_TRUE(ExitStatus::Exited(0).success());
  EXPECT_FALSE(ExitStatus::Signaled(SIGTERM).success());
}

TEST(SubprocessTest, ExitCodes) {
  for (int code : {0, 1, 3, 255}) {
    ASSERT_OK_AND_ASSIGN(Subprocess child,
                         Subprocess::Spawn(Shell("exit " + std::to_string(code))));
    EXPECT_EQ(child.Wait(), ExitStatus::Exited(code));
  }
}

TEST(SubprocessTest, KilledBySignal) {
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("kill -KILL $$")));
  ExitStatus status = child.Wait();
  EXPECT_EQ(status, ExitStatus::Signaled(SIGKILL));
  EXPECT_EQ(status.ToString(), "killed by SIGKILL");
}

// In a process that runs several nodes, a reaping of any child (a host
// agent's cleanup) may take this child's status; Wait must still end.
TEST(SubprocessTest, LeaderReapedElsewhereEndsTheWait) {
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("exit 4")));
  int status = 0;
  ASSERT_EQ(::waitpid(child.pid(), &status, 0), child.pid());
  ExitStatus lost = child.Wait();
  EXPECT_TRUE(lost.unknown());
  EXPECT_FALSE(lost.success());
  EXPECT_EQ(lost.ToString(), "ended (its status was reaped elsewhere)");
  EXPECT_FALSE(ExitStatus::Signaled(SIGKILL).unknown());
}

// Release is for a leader that outlives SIGKILL: the Subprocess forgets it,
// neither signalling nor waiting (here it is alive and well, and ours to end).
TEST(SubprocessTest, ReleaseForgetsTheProcessWithoutWaiting) {
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("exec sleep 60")));
  const pid_t pid = child.pid();
  EXPECT_EQ(child.Release(), pid);
  EXPECT_EQ(child.pid(), -1);
  EXPECT_FALSE(child.SignalGroup(SIGTERM));
  EXPECT_EQ(::kill(pid, 0), 0) << "released, not killed";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  SubprocessOptions options;
  options.argv = {"drover-no-such-program"};
  EXPECT_THAT(Subprocess::Spawn(options).status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("drover-no-such-program")));
  options.argv = {"/nonexistent/program"};
  EXPECT_THAT(Subprocess::Spawn(options).status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("/nonexistent/program")));
}

TEST(SubprocessTest, OwnProcessGroupAndStdinFromDevNull) {
  SubprocessOptions options =
      Shell("ps -o pgid= -p $$ | tr -d ' '; cat; echo end; readlink /proc/self/fd/0");
  options.pipe_output = true;
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(options));
  std::string out = ReadAll(child.stdout_fd());
  EXPECT_EQ(child.Wait(), ExitStatus::Exited(0));
  EXPECT_EQ(out, std::to_string(child.pid()) + "\nend\n/dev/null\n");
}

TEST(SubprocessTest, OnlyStdioIsInherited) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);  // deliberately without O_CLOEXEC
  SubprocessOptions options = Shell("ls /proc/self/fd");
  options.pipe_output = true;
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(options));
  std::string out = ReadAll(child.stdout_fd());
  child.Wait();
  ::close(fds[0]);
  ::close(fds[1]);
  // ls's own directory fd shows up as 3.
  EXPECT_THAT(out, ::testing::AnyOf("0\n1\n2\n3\n", "0\n1\n2\n"));
}

TEST(SubprocessTest, EnvironmentAndWorkingDirectory) {
  TempDir dir;
  SubprocessOptions options = Shell("echo \"$FOO\"; pwd");
  options.env = std::vector<std::string>{"FOO=bar baz", "PATH=/usr/bin:/bin"};
  options.working_dir = dir.path();
  options.pipe_output = true;
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(options));
  std::string out = ReadAll(child.stdout_fd());
  EXPECT_EQ(child.Wait(), ExitStatus::Exited(0));
  EXPECT_EQ(out, "bar baz\n" + std::filesystem::canonical(dir.path()).string() + "\n");
}

TEST(SubprocessTest, StdoutAndStderrArePipedSeparately) {
  SubprocessOptions options = Shell("echo out; echo err >&2");
  options.pipe_output = true;
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(options));
  EXPECT_EQ(ReadAll(child.stdout_fd()), "out\n");
  EXPECT_EQ(ReadAll(child.stderr_fd()), "err\n");
  EXPECT_EQ(child.Wait(), ExitStatus::Exited(0));
}

TEST(SubprocessTest, WaitTimesOut) {
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("exec sleep 30")));
  EXPECT_EQ(child.Wait(Subprocess::Clock::now() + 20ms), std::nullopt);
  EXPECT_EQ(child.Poll(), std::nullopt);
  EXPECT_TRUE(child.SignalGroup(SIGKILL));
  EXPECT_EQ(child.Wait(), ExitStatus::Signaled(SIGKILL));
}

TEST(SubprocessTest, TerminateStopsTheWholeGroup) {
  // A background grandchild in the same group, and a leader that waits.
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("sleep 30 & sleep 30 & wait")));
  pid_t pgid = child.pid();
  EXPECT_FALSE(GroupGone(pgid));
  ExitStatus status = child.Terminate(10s);
  EXPECT_EQ(status, ExitStatus::Signaled(SIGTERM));
  EXPECT_TRUE(EventuallyGone(pgid));
}

TEST(SubprocessTest, TerminateEscalatesToSigkill) {
  SubprocessOptions options = Shell("trap '' TERM; echo ready; while :; do sleep 0.05; done");
  options.pipe_output = true;
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(options));
  char buffer[6] = {};
  pollfd p{child.stdout_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1);
  ASSERT_GT(::read(child.stdout_fd(), buffer, sizeof(buffer)), 0);  // the trap is set
  pid_t pgid = child.pid();
  EXPECT_EQ(child.Terminate(50ms), ExitStatus::Signaled(SIGKILL));
  EXPECT_TRUE(EventuallyGone(pgid));
}

TEST(SubprocessTest, AsSubreaperReapsTheGroupsOrphans) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("sleep 30 &")));
  EXPECT_EQ(child.Wait(), ExitStatus::Exited(0));
  EXPECT_TRUE(child.GroupAlive());  // the orphaned sleep, now our child
  EXPECT_TRUE(child.SignalGroup(SIGKILL));
  // Reaped by GroupAlive() itself: no init involved.
  for (int i = 0; i < 10'000 && child.GroupAlive(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(GroupGone(child.pid()));
}

TEST(SubprocessTest, DestructorKillsARunningGroup) {
  pid_t pgid;
  {
    ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("sleep 30 & wait")));
    pgid = child.pid();
  }
  EXPECT_TRUE(EventuallyGone(pgid));
}

TEST(SubprocessTest, MovedFromIsEmpty) {
  ASSERT_OK_AND_ASSIGN(Subprocess child, Subprocess::Spawn(Shell("exit 4")));
  Subprocess other = std::move(child);
  EXPECT_EQ(child.pid(), -1);  // NOLINT: testing the moved-from state
  EXPECT_EQ(other.Wait(), ExitStatus::Exited(4));
}

}  // namespace
}  // namespace drover::os

#include "engine/local_engine.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace drover {
namespace {

os::ExitStatus WaitFor(AgentProcess& process) {
  for (int i = 0; i < 500; ++i) {
    if (auto exit = process.Poll()) return *exit;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "process did not exit";
  return os::ExitStatus::Exited(-1);
}

std::string ReadAll(AgentProcess& process) {
  std::string out;
  char buffer[256];
  while (process.output_fd() >= 0) {
    pollfd fd{process.output_fd(), POLLIN, 0};
    if (::poll(&fd, 1, 5000) <= 0) break;
    ssize_t n = ::read(process.output_fd(), buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      process.CloseOutput();
    }
  }
  return out;
}

TEST(ExitStatusTest, ShellCode) {
  EXPECT_EQ(os::ExitStatus::Exited(3).ToString(), "exit code 3");
  EXPECT_EQ(os::ExitStatus::Signaled(SIGKILL).ShellCode(), 137);
  EXPECT_TRUE(os::ExitStatus::Exited(0).success());
}

TEST(LocalEngineTest, CapturesStdoutAndStderrAndExitCode) {
  LocalEngine engine({});
  auto process = engine.Launch(
      {"0", {"/bin/sh", "-c", "echo out; echo err >&2; read x || echo stdin-closed; exit 3"}});
  ASSERT_TRUE(process.ok()) << process.status();
  std::string output = ReadAll(**process);
  EXPECT_NE(output.find("out\n"), std::string::npos);
  EXPECT_NE(output.find("err\n"), std::string::npos);
  EXPECT_NE(output.find("stdin-closed"), std::string::npos);
  os::ExitStatus exit = WaitFor(**process);
  EXPECT_EQ(exit.exit_code(), 3);
}

TEST(LocalEngineTest, OwnProcessGroupAndSignal) {
  LocalEngine engine({});
  auto process = engine.Launch({"0", {"/bin/sleep", "100"}});
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_EQ(::getpgid((*process)->pid()), (*process)->pid());
  (*process)->Signal(SIGTERM);
  os::ExitStatus exit = WaitFor(**process);
  EXPECT_EQ(exit.signal(), SIGTERM);
}

TEST(LocalEngineTest, MissingBinaryIsAnError) {
  LocalEngine engine({});
  auto process = engine.Launch({"0", {"/nonexistent/agent"}});
  ASSERT_FALSE(process.ok());
  EXPECT_EQ(process.status().code(), Status::Code::kIoError);
  EXPECT_NE(process.status().message().find("/nonexistent/agent"), std::string::npos);
}

TEST(LocalEngineTest, DestructorKillsTheGroup) {
  LocalEngine engine({});
  pid_t pid;
  {
    auto process = engine.Launch({"0", {"/bin/sleep", "100"}});
    ASSERT_TRUE(process.ok());
    pid = (*process)->pid();
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: no such process
}

TEST(LocalEngineTest, SkippedExecutorStartsNothing) {
  LocalEngineOptions options;
  options.skip_executors.insert("1");
  LocalEngine engine(options);
  auto process = engine.Launch({"1", {"/bin/sleep", "100"}});
  ASSERT_TRUE(process.ok());
  EXPECT_EQ((*process)->pid(), 0);
  EXPECT_EQ((*process)->output_fd(), -1);
  EXPECT_FALSE((*process)->Poll().has_value());
}

}  // namespace
}  // namespace drover

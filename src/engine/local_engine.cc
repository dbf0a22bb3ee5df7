#include "engine/local_engine.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "os/find_program.h"
#include "os/subprocess.h"

namespace drover {

namespace {

// An agent (or helper) started by Subprocess: its own process group, reaped
// through a pidfd; the destructor kills whatever is left of the group.
class ChildProcess : public AgentProcess {
 public:
  ChildProcess(std::string id, os::Subprocess process)
      : id_(std::move(id)), process_(std::move(process)) {}

  const std::string& executor_id() const override { return id_; }
  int pid() const override { return process_.pid(); }
  int output_fd() const override { return process_.stdout_fd(); }
  void CloseOutput() override { process_.CloseStdout(); }
  std::optional<os::ExitStatus> Poll() override { return process_.Poll(); }
  void Signal(int signal) override { process_.SignalGroup(signal); }

 private:
  std::string id_;
  os::Subprocess process_;
};

// TEST ONLY: stands for an agent the engine never started.
class NotStarted : public AgentProcess {
 public:
  explicit NotStarted(std::string id) : id_(std::move(id)) {}
  const std::string& executor_id() const override { return id_; }
  int pid() const override { return 0; }
  int output_fd() const override { return -1; }
  void CloseOutput() override {}
  std::optional<os::ExitStatus> Poll() override { return std::nullopt; }
  void Signal(int) override {}

 private:
  std::string id_;
};

}  // namespace

Result<std::string> SelfExecutable() {
  char buffer[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) {
    return Status::IoError(std::string("cannot read /proc/self/exe to find the drover binary: ") +
                           std::strerror(errno));
  }
  return std::string(buffer, static_cast<size_t>(n));
}

Result<std::unique_ptr<AgentProcess>> SpawnProcessGroup(const std::string& id,
                                                        const std::vector<std::string>& argv,
                                                        bool capture_output, int death_signal) {
  if (argv.empty()) return Status::InvalidArgument("cannot start " + id + ": empty command");
  os::SubprocessOptions options;
  options.argv = argv;
  options.pipe_output = capture_output;
  options.merge_stderr = true;
  options.parent_death_signal = death_signal;
  Result<os::Subprocess> process = os::Subprocess::Spawn(options);
  // Whatever the reason (missing binary, fork failing), the OS refused.
  if (!process.ok())
    return Status::IoError("cannot start " + id + ": " + process.status().message());
  return std::unique_ptr<AgentProcess>(
      std::make_unique<ChildProcess>(id, std::move(process).value()));
}

std::string DescribeAgentExit(const os::ExitStatus& status) {
  if (!status.signaled() && status.exit_code() > 128 && status.exit_code() < 128 + 65) {
    return "killed by " + os::SignalName(status.exit_code() - 128) + " (agent exit code " +
           std::to_string(status.exit_code()) + ")";
  }
  if (status.signaled()) return "its agent was " + status.ToString();
  return status.ToString();
}

LocalEngine::LocalEngine(LocalEngineOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<AgentProcess>> LocalEngine::Launch(const AgentLaunch& launch) {
  if (options_.skip_executors.count(launch.executor_id) != 0) {
    return std::unique_ptr<AgentProcess>(std::make_unique<NotStarted>(launch.executor_id));
  }
  // A local agent starts from drover-agent when it is beside drover: the
  // same argv, fewer libraries to load per node.
  std::vector<std::string> argv = launch.argv;
  if (argv.size() >= 2 && argv[1] == "agent") argv[0] = os::AgentBinaryBeside(argv[0]);
  // SIGTERM, not SIGKILL: an agent told its driver is gone stops its program's
  // whole process group, which SIGKILL would leave behind.
  return SpawnProcessGroup("executor " + launch.executor_id, argv, /*capture_output=*/true,
                           SIGTERM);
}

}  // namespace drover

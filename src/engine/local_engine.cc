#include "engine/local_engine.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>

#include "engine/host_agent.h"
#include "os/fd_io.h"
#include "os/find_program.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"

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
  int exit_fd() const override { return process_.exit_fd(); }
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

std::vector<std::vector<int>> GroupByHost(int count,
                                          const std::function<std::string(int)>& host_of) {
  std::vector<std::vector<int>> groups;
  std::map<std::string, size_t> group_of_host;
  for (int i = 0; i < count; ++i) {
    auto [at, added] = group_of_host.emplace(host_of(i), groups.size());
    if (added) groups.emplace_back();
    groups[at->second].push_back(i);
  }
  return groups;
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

Result<std::vector<std::unique_ptr<AgentProcess>>> LocalEngine::LaunchHost(
    const HostLaunch& launch) {
  auto separator = std::find(launch.argv.begin(), launch.argv.end(), std::string("--"));
  if (launch.nodes.empty() || launch.argv.size() < 2 || separator == launch.argv.end()) {
    return Status::InvalidArgument("a host's agent needs nodes and an agent argv with --");
  }
  DROVER_ASSIGN_OR_RETURN(os::Pipe status, os::MakePipe(O_CLOEXEC | O_NONBLOCK));
  std::vector<os::Pipe> outputs;  // nodes 1.. (node 0 writes to the agent's stdout)
  std::vector<std::string> node_flags = {"--status-fd", std::to_string(status.write.get())};
  os::SubprocessOptions spawn;
  spawn.keep_fds = {status.write.get()};
  for (size_t i = 0; i < launch.nodes.size(); ++i) {
    const HostLaunch::Node& node = launch.nodes[i];
    int output_fd = 1;
    if (i > 0) {
      DROVER_ASSIGN_OR_RETURN(os::Pipe pipe, os::MakePipe(O_CLOEXEC));
      os::SetNonBlocking(pipe.read.get());
      output_fd = pipe.write.get();
      spawn.keep_fds.push_back(output_fd);
      outputs.push_back(std::move(pipe));
    }
    node_flags.push_back("--node");
    node_flags.push_back(node.executor_id + ":" + std::to_string(output_fd) + ":" + node.gpus +
                         (node.token_file.empty() ? "" : ":" + node.token_file));
  }
  spawn.argv.assign(launch.argv.begin(), separator);
  spawn.argv.insert(spawn.argv.end(), node_flags.begin(), node_flags.end());
  spawn.argv.insert(spawn.argv.end(), separator, launch.argv.end());
  if (spawn.argv[1] == "agent") spawn.argv[0] = os::AgentBinaryBeside(spawn.argv[0]);
  spawn.pipe_output = true;
  spawn.merge_stderr = true;
  spawn.parent_death_signal = SIGTERM;  // as Launch's: the agent stops its programs
  Result<os::Subprocess> process = os::Subprocess::Spawn(spawn);
  if (!process.ok()) {
    return Status::IoError("cannot start the agent of " + std::to_string(launch.nodes.size()) +
                           " nodes: " + process.status().message());
  }
  // The agent's copies are the only writers left: their close is its end.
  status.write.Reset();
  for (os::Pipe& pipe : outputs) pipe.write.Reset();
  std::vector<os::UniqueFd> node_outputs(1);  // node 0: the agent's own
  std::vector<std::string> ids = {launch.nodes[0].executor_id};
  for (size_t i = 1; i < launch.nodes.size(); ++i) {
    node_outputs.push_back(std::move(outputs[i - 1].read));
    ids.push_back(launch.nodes[i].executor_id);
  }
  return HostNodeProcesses(std::move(process).value(), std::move(status.read),
                           std::move(node_outputs), ids, nullptr, nullptr);
}

}  // namespace drover

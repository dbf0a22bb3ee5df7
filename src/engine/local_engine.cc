#include "engine/local_engine.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

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

// A host's agent, shared by its nodes' AgentProcess objects: the process,
// and each node's exit code as the agent reports it ("ID CODE" lines on the
// status pipe).
class HostAgent {
 public:
  HostAgent(os::Subprocess process, os::UniqueFd status, size_t nodes)
      : process_(std::move(process)), status_(std::move(status)), nodes_(nodes) {}

  os::Subprocess& process() { return process_; }
  // Readable when a node's exit code comes or the agent ended: the status
  // pipe while it is open (the agent is its only writer), then the pidfd.
  int exit_fd() const { return status_.valid() ? status_.get() : process_.exit_fd(); }
  // The node's exit code once it ended, else the agent's own status once the
  // agent ended (a node it could not report). The last node's code waits
  // for the agent's own end, as a node's own agent's exit would: after its
  // nodes, the agent stops what their programs left behind (a child
  // subreaper's orphans) and removes their files.
  std::optional<os::ExitStatus> ExitOf(const std::string& id) {
    ReadStatus();
    if (!exit_) {
      exit_ = process_.Poll();
      if (exit_) ReadStatus();  // the lines written before it exited
    }
    auto reported = codes_.find(id);
    if (reported == codes_.end()) return exit_;
    if (!exit_ && codes_.size() == nodes_) return std::nullopt;
    return os::ExitStatus::Exited(reported->second);
  }
  // Signals reach the agent for a node still running; for one that ended,
  // only the last SIGKILL, once every node ended (the agent's cleanup is
  // then all that is left of it).
  void Signal(const std::string& id, int signal) {
    ReadStatus();
    if (codes_.count(id) != 0 && (signal != SIGKILL || codes_.size() < nodes_)) return;
    process_.SignalGroup(signal);
  }

 private:
  void ReadStatus() {
    if (!status_.valid()) return;
    char buffer[4096];
    for (;;) {
      ssize_t n = ::read(status_.get(), buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) status_.Reset();  // every writer gone
        break;
      }
      partial_.append(buffer, static_cast<size_t>(n));
    }
    for (size_t end; (end = partial_.find('\n')) != std::string::npos; partial_.erase(0, end + 1)) {
      const std::string line = partial_.substr(0, end);
      const size_t space = line.rfind(' ');
      if (space == std::string::npos) continue;
      codes_[line.substr(0, space)] = std::atoi(line.c_str() + space + 1);
    }
  }

  os::Subprocess process_;
  os::UniqueFd status_;
  const size_t nodes_;
  std::string partial_;
  std::map<std::string, int> codes_;
  std::optional<os::ExitStatus> exit_;
};

// One node of a host's agent: its own output pipe (node 0: the agent's
// stdout and stderr) and exit.
class HostNodeProcess : public AgentProcess {
 public:
  // `output` invalid: the node's output is the agent's own.
  HostNodeProcess(std::string id, std::shared_ptr<HostAgent> host, os::UniqueFd output)
      : id_(std::move(id)),
        host_(std::move(host)),
        own_output_(output.valid()),
        output_(std::move(output)) {}

  const std::string& executor_id() const override { return id_; }
  int pid() const override { return host_->process().pid(); }
  int output_fd() const override {
    return own_output_ ? output_.get() : host_->process().stdout_fd();
  }
  void CloseOutput() override {
    if (own_output_) {
      output_.Reset();
    } else {
      host_->process().CloseStdout();
    }
  }
  int exit_fd() const override { return host_->exit_fd(); }
  std::optional<os::ExitStatus> Poll() override { return host_->ExitOf(id_); }
  void Signal(int signal) override { host_->Signal(id_, signal); }

 private:
  std::string id_;
  std::shared_ptr<HostAgent> host_;
  const bool own_output_;
  os::UniqueFd output_;
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
      ::fcntl(pipe.read.get(), F_SETFL, ::fcntl(pipe.read.get(), F_GETFL) | O_NONBLOCK);
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
  auto host = std::make_shared<HostAgent>(std::move(process).value(), std::move(status.read),
                                          launch.nodes.size());
  std::vector<std::unique_ptr<AgentProcess>> processes;
  for (size_t i = 0; i < launch.nodes.size(); ++i) {
    os::UniqueFd output = i == 0 ? os::UniqueFd() : std::move(outputs[i - 1].read);
    processes.push_back(
        std::make_unique<HostNodeProcess>(launch.nodes[i].executor_id, host, std::move(output)));
  }
  return processes;
}

}  // namespace drover

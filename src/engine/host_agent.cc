#include "engine/host_agent.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>

namespace drover {
namespace {

// A host's agent, shared by its nodes' AgentProcess objects: the process,
// and each node's exit code as the agent reports it ("ID CODE" lines on the
// status pipe).
class HostAgent {
 public:
  HostAgent(os::Subprocess process, os::UniqueFd status, size_t nodes,
            std::unique_ptr<os::RelayDemux> demux,
            std::function<std::string(const os::ExitStatus&)> describe)
      : process_(std::move(process)),
        status_(std::move(status)),
        nodes_(nodes),
        describe_(std::move(describe)),
        demux_(std::move(demux)) {}

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
    // A relayed agent's last lines may still be on their way through the
    // demux when its launcher has exited: its end counts once they are in
    // (the demux closes the status pipe after the launcher's last byte, and
    // after every channel's pipe took all it had).
    if (!exit_ && (!demux_ || !status_.valid())) {
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
    if (signal == SIGTERM && process_.stdin_fd() >= 0) {
      process_.CloseStdin();  // a launcher's agent stops at the end of its stdin
      return;
    }
    process_.SignalGroup(signal);
  }
  // What a node's exit means: its own code, or the agent's (its launcher's) end.
  std::string DescribeExit(const std::string& id, const os::ExitStatus& status) const {
    if (codes_.count(id) != 0 || !describe_) return DescribeAgentExit(status);
    return describe_(status);
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
  std::function<std::string(const os::ExitStatus&)> describe_;
  // Last: it reads process_'s fds, so it stops first.
  std::unique_ptr<os::RelayDemux> demux_;
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
  std::string DescribeExit(const os::ExitStatus& status) const override {
    return host_->DescribeExit(id_, status);
  }

 private:
  std::string id_;
  std::shared_ptr<HostAgent> host_;
  const bool own_output_;
  os::UniqueFd output_;
};

}  // namespace

std::vector<std::unique_ptr<AgentProcess>> HostNodeProcesses(
    os::Subprocess process, os::UniqueFd status, std::vector<os::UniqueFd> outputs,
    const std::vector<std::string>& ids, std::unique_ptr<os::RelayDemux> demux,
    std::function<std::string(const os::ExitStatus&)> describe) {
  auto host = std::make_shared<HostAgent>(std::move(process), std::move(status), ids.size(),
                                          std::move(demux), std::move(describe));
  std::vector<std::unique_ptr<AgentProcess>> processes;
  for (size_t i = 0; i < ids.size(); ++i) {
    processes.push_back(std::make_unique<HostNodeProcess>(ids[i], host, std::move(outputs[i])));
  }
  return processes;
}

}  // namespace drover

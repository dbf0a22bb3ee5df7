#include "engine/launcher_agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "engine/host_agent.h"
#include "os/sigpipe_block.h"

namespace drover {
namespace {

class LauncherAgentProcess : public AgentProcess {
 public:
  LauncherAgentProcess(std::string id, os::Subprocess process,
                       std::function<std::string(const os::ExitStatus&)> describe)
      : id_(std::move(id)), process_(std::move(process)), describe_(std::move(describe)) {}

  const std::string& executor_id() const override { return id_; }
  int pid() const override { return process_.pid(); }
  int output_fd() const override { return process_.stdout_fd(); }
  void CloseOutput() override { process_.CloseStdout(); }
  int exit_fd() const override { return process_.exit_fd(); }
  std::optional<os::ExitStatus> Poll() override { return process_.Poll(); }
  void Signal(int signal) override {
    if (signal == SIGTERM && process_.stdin_fd() >= 0) {
      process_.CloseStdin();
      return;
    }
    process_.SignalGroup(signal);
  }
  std::string DescribeExit(const os::ExitStatus& status) const override {
    return describe_ ? describe_(status) : DescribeAgentExit(status);
  }

 private:
  std::string id_;
  os::Subprocess process_;
  std::function<std::string(const os::ExitStatus&)> describe_;
};

}  // namespace

Result<std::string> TokenToStdin(std::vector<std::string>* agent_argv) {
  auto flag = std::find(agent_argv->begin(), agent_argv->end(), "--token-file");
  if (flag == agent_argv->end() || flag + 1 == agent_argv->end()) {
    return Status::InvalidArgument("the agent's command has no --token-file to send");
  }
  std::ifstream in(*(flag + 1));
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Status::IoError("cannot read the node credential " + *(flag + 1));
  std::string token = text.str();
  token.erase(token.find_last_not_of(" \t\r\n") + 1);
  token.erase(0, token.find_first_not_of(" \t\r\n"));
  *(flag + 1) = "-";
  return token;
}

Result<std::unique_ptr<AgentProcess>> StartThroughLauncher(
    const std::string& executor_id, const std::vector<std::string>& launcher_argv,
    const std::string& token, std::function<std::string(const os::ExitStatus&)> describe) {
  os::SubprocessOptions spawn;
  spawn.argv = launcher_argv;
  spawn.pipe_output = true;
  spawn.merge_stderr = true;
  spawn.pipe_stdin = true;
  spawn.parent_death_signal = SIGKILL;  // its end is the remote agent's SIGTERM
  Result<os::Subprocess> started = os::Subprocess::Spawn(spawn);
  if (!started.ok()) {
    return Status::IoError("cannot start executor " + executor_id + ": " +
                           started.status().message());
  }
  os::Subprocess process = std::move(started).value();
  const std::string line = token + "\n";
  // A line into an empty pipe: never blocks.
  if (::write(process.stdin_fd(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return Status::IoError("cannot send its credential to executor " + executor_id);
  }
  return std::unique_ptr<AgentProcess>(
      std::make_unique<LauncherAgentProcess>(executor_id, std::move(process), std::move(describe)));
}

Result<RelayedHostAgent> RelayedHostAgentArgv(const HostLaunch& launch) {
  auto separator = std::find(launch.argv.begin(), launch.argv.end(), std::string("--"));
  if (launch.nodes.empty() || separator == launch.argv.end()) {
    return Status::InvalidArgument("a host's agent needs nodes and an agent argv with --");
  }
  RelayedHostAgent agent;
  agent.agent_argv.assign(launch.argv.begin(), separator);
  for (const HostLaunch::Node& node : launch.nodes) {
    // The node's credential goes on stdin as `--token-file -` sends it.
    std::vector<std::string> token_flag = {"--token-file", node.token_file};
    DROVER_ASSIGN_OR_RETURN(std::string credential, TokenToStdin(&token_flag));
    agent.credentials.push_back(std::move(credential));
    agent.ids.push_back(node.executor_id);
    agent.agent_argv.push_back("--node");
    agent.agent_argv.push_back(node.executor_id + ":-:" + node.gpus + ":-");
  }
  agent.agent_argv.insert(agent.agent_argv.end(), separator, launch.argv.end());
  return agent;
}

Result<std::vector<std::unique_ptr<AgentProcess>>> StartHostThroughLauncher(
    const std::vector<std::string>& ids, const std::vector<std::string>& launcher_argv,
    const std::vector<std::string>& credentials,
    std::function<std::string(const os::ExitStatus&)> describe) {
  const std::string what = "the agent of executors " + ids.front() + "-" + ids.back();
  os::SubprocessOptions spawn;
  spawn.argv = launcher_argv;
  spawn.pipe_output = true;  // stdout: the frames; stderr: apart, the launcher's own
  spawn.pipe_stdin = true;
  spawn.parent_death_signal = SIGKILL;  // its end is the remote agent's SIGTERM
  Result<os::Subprocess> started = os::Subprocess::Spawn(spawn);
  if (!started.ok()) {
    return Status::IoError("cannot start " + what + ": " + started.status().message());
  }
  os::Subprocess process = std::move(started).value();
  std::string lines;
  for (const std::string& credential : credentials) lines += credential + "\n";
  {
    // Under a hundred bytes a node: the pipe takes a host's 256 before the
    // launcher reads them; a launcher that exits first is an EPIPE.
    os::SigpipeBlock no_sigpipe;
    size_t done = 0;
    while (done < lines.size()) {
      const ssize_t wrote = ::write(process.stdin_fd(), lines.data() + done, lines.size() - done);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) return Status::IoError("cannot send their credentials to " + what);
      done += static_cast<size_t>(wrote);
    }
  }
  DROVER_ASSIGN_OR_RETURN(
      std::unique_ptr<os::RelayDemux> demux,
      os::RelayDemux::Start(process.stdout_fd(), process.stderr_fd(), ids.size()));
  std::vector<os::UniqueFd> outputs;
  for (size_t i = 0; i < ids.size(); ++i) outputs.push_back(demux->TakeChannelReader(i));
  os::UniqueFd status = demux->TakeStatusReader();
  return HostNodeProcesses(std::move(process), std::move(status), std::move(outputs), ids,
                           std::move(demux), std::move(describe));
}

}  // namespace drover

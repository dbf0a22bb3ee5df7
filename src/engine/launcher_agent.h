// Agents started through a launcher that forwards stdin to them (ssh, srun).
//
// The agent gets its node credential (docs/security.md: it joins as that
// node only; the cluster token stays with the driver) as the first line of
// its stdin (never in argv, where `ps` shows it, nor in a file on the remote
// host) and keeps that stdin open for as long as the launcher lives: its end
// of file stops the node (`drover agent --token-file -`). So a driver that dies, even by
// SIGKILL, takes the local launcher with it (PR_SET_PDEATHSIG) and every
// remote agent stops its program. Signal(SIGTERM) closes that stdin, so the
// agent stops with its grace and its last lines still arrive; any other
// signal goes to the launcher's process group.

#ifndef DROVER_ENGINE_LAUNCHER_AGENT_H_
#define DROVER_ENGINE_LAUNCHER_AGENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace drover {

// Replaces the path after --token-file in an agent's argv with "-" and
// returns the line read from that file (the node's credential).
// kInvalidArgument without the flag, kIoError when the file cannot be read.
Result<std::string> TokenToStdin(std::vector<std::string>* agent_argv);

// Starts `launcher_argv` (ssh ... drover agent ..., srun ... drover agent ...)
// with its output on one pipe and `token` (the credential line) + "\n" on
// its stdin. `describe`
// explains the launcher's exit status in failure reports.
Result<std::unique_ptr<AgentProcess>> StartThroughLauncher(
    const std::string& executor_id, const std::vector<std::string>& launcher_argv,
    const std::string& token, std::function<std::string(const os::ExitStatus&)> describe);

// A host's agent to start through a launcher: `launch.argv` with a
// `--node ID:-:GPUS:-` for each node (its output relayed on stdout, its
// credential a line of stdin), and each node's id and credential line (read
// from its token_file). kInvalidArgument for an argv without "--".
struct RelayedHostAgent {
  std::vector<std::string> agent_argv;
  std::vector<std::string> ids;
  std::vector<std::string> credentials;
};
Result<RelayedHostAgent> RelayedHostAgentArgv(const HostLaunch& launch);

// Starts `launcher_argv` (ssh ... drover agent --node ID:-:GPUS:- ...) for a
// host's nodes `ids`: their credentials one line each on its stdin, in
// order; its stdout a stream of relayed frames (os/output_relay.h) split
// into each node's output and exit; its own stderr (ssh's messages) with the
// first node's output. The AgentProcess of each node, as LaunchHost's.
Result<std::vector<std::unique_ptr<AgentProcess>>> StartHostThroughLauncher(
    const std::vector<std::string>& ids, const std::vector<std::string>& launcher_argv,
    const std::vector<std::string>& credentials,
    std::function<std::string(const os::ExitStatus&)> describe);

}  // namespace drover

#endif  // DROVER_ENGINE_LAUNCHER_AGENT_H_

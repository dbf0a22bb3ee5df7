// The AgentProcess objects of one agent that runs several nodes of a host
// (Engine::LaunchHost): the local engine's agent, or the ssh engine's agent
// behind its ssh client, whose nodes' output and exit codes come relayed
// over ssh's one stdout (os/output_relay.h).
//
// Each node's AgentProcess has its own output fd and its own exit: the
// node's exit code once the agent reported it ("ID CODE" lines on the
// status pipe), else the agent's own status once it ended. Signals reach the
// agent's process group while a node runs; SIGTERM to a launcher (ssh, with
// the agent's stdin) closes that stdin instead, which stops every node of
// the host with its grace. Not thread-safe, as every AgentProcess.

#ifndef DROVER_ENGINE_HOST_AGENT_H_
#define DROVER_ENGINE_HOST_AGENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "os/output_relay.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"

namespace drover {

// `process`: the agent or its launcher; `status`: the read end of the status
// lines; `outputs[i]`: node `ids[i]`'s output, or invalid where it is the
// process's own stdout (a local agent's node 0); `demux`: the relay that
// fills `status` and `outputs` from the process's stdout, if any (it reads
// fds `process` owns: it stops before `process` is killed). `describe`
// explains the process's own exit (nullptr: DescribeAgentExit).
std::vector<std::unique_ptr<AgentProcess>> HostNodeProcesses(
    os::Subprocess process, os::UniqueFd status, std::vector<os::UniqueFd> outputs,
    const std::vector<std::string>& ids, std::unique_ptr<os::RelayDemux> demux,
    std::function<std::string(const os::ExitStatus&)> describe);

}  // namespace drover

#endif  // DROVER_ENGINE_HOST_AGENT_H_

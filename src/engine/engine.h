// Engine: how the driver starts one `drover agent` per node: the local engine
// as child processes of this host, the ssh engine through ssh, the slurm
// engine as srun steps, the Python module's Dask engine as tasks, and
// testing/fake_engine.h as threads; the driver never touches fork/exec itself.
//
// An Engine launches AgentProcess objects. An AgentProcess owns everything it
// started (a process group, the read end of the agent's merged stdout+stderr
// pipe); destroying it kills the group with SIGKILL and reaps it, so no exit
// path leaves an agent behind. Neither type is thread-safe: the driver uses
// them from its one supervision thread.

#ifndef DROVER_ENGINE_ENGINE_H_
#define DROVER_ENGINE_ENGINE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"
#include "os/subprocess.h"  // os::ExitStatus: one type for every process drover reaps

namespace drover {

// One agent to start.
struct AgentLaunch {
  std::string executor_id;
  std::vector<std::string> argv;  // argv[0]: the agent binary
};

// One agent for several nodes of one host (torchrun's shape): `argv` is an
// agent's argv without a node's own flags (--executor-id, --gpus); the
// engine adds each node's `--node` and the `--status-fd` (`drover agent
// --help`) before its "--". The agent carries its nodes on one rendezvous
// connection, with each node's credential (token_file), or with the
// cluster token when `argv` has `--token-file` (a driver's own tests).
struct HostLaunch {
  // The most nodes one agent takes (`drover agent --node`).
  static constexpr size_t kMaxNodes = 256;
  struct Node {
    std::string executor_id;
    std::string token_file;  // the node's credential; "" : --token-file in argv
    std::string gpus;        // "" : inherited
  };
  std::vector<std::string> argv;
  std::vector<Node> nodes;
};

// Nodes [0, count) grouped by the host `host_of(i)` names, the groups in
// the order of their first node: what Engine::NodesByHost returns.
std::vector<std::vector<int>> GroupByHost(int count,
                                          const std::function<std::string(int)>& host_of);

// Describes an agent's exit; the agent exits with the program's code, 128 +
// signal when a signal killed the program.
std::string DescribeAgentExit(const os::ExitStatus& status);

class AgentProcess {
 public:
  virtual ~AgentProcess() = default;

  virtual const std::string& executor_id() const = 0;
  // The agent's pid (0 when the engine started nothing for it).
  virtual int pid() const = 0;
  // A non-blocking fd with the agent's stdout and stderr, or -1 once closed
  // (or when there is none). The driver reads it until EOF, then CloseOutput().
  virtual int output_fd() const = 0;
  virtual void CloseOutput() = 0;
  // Readable once Poll() may have news (the agent's process ended: a pidfd;
  // a host agent's node ended), so the driver sleeps until then; -1: none
  // (the driver polls every 100 ms).
  virtual int exit_fd() const { return -1; }
  // Reaps the agent without blocking; its exit status once it has ended.
  virtual std::optional<os::ExitStatus> Poll() = 0;
  // Sends `signal` to the agent's process group (nothing after it was reaped
  // and its group is empty).
  virtual void Signal(int signal) = 0;
  // Why it ended, for failure reports ("exit code 3"); engines whose process
  // stands in for a remote agent (ssh) say what its status means.
  virtual std::string DescribeExit(const os::ExitStatus& status) const {
    return DescribeAgentExit(status);
  }
};

class Engine {
 public:
  virtual ~Engine() = default;
  // "local", "ssh", ...
  virtual std::string name() const = 0;
  // The host address agents register with and the rendezvous binds to.
  virtual std::string rendezvous_host() const = 0;
  // The address each agent advertises (--host).
  virtual std::string agent_host(int executor_index) const = 0;
  // Where an agent runs, as failure reports name it ("h2", "n2 (10.0.0.2)").
  virtual std::string agent_location(int executor_index) const {
    return agent_host(executor_index);
  }
  // Starts one agent. kIoError when the OS refuses.
  // Files and directories the engine made that must not outlive the driver
  // even if it is SIGKILLed (the driver's janitor removes them then); the
  // engine removes them itself at its normal end.
  virtual std::vector<std::string> TemporaryPaths() const { return {}; }
  virtual Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) = 0;
  // Whether LaunchHost works: else the driver Launches each node.
  virtual bool StartsHostAgents() const { return false; }
  // Whether the nodes' programs run on the driver's host, where the driver
  // can see their processes.
  virtual bool RunsProgramsHere() const { return false; }
  // The first `count` nodes (by index) grouped by the host they run on, for
  // LaunchHost: by default all on one host.
  virtual std::vector<std::vector<int>> NodesByHost(int count) const {
    std::vector<int> all;
    for (int i = 0; i < count; ++i) all.push_back(i);
    return {all};
  }
  // Starts one agent for all of `launch`'s nodes (one host's); the AgentProcess of each
  // node, in order: its own output, its own exit (when its node ended, or
  // when the shared agent did), and signals that reach the shared agent
  // while the node runs.
  virtual Result<std::vector<std::unique_ptr<AgentProcess>>> LaunchHost(const HostLaunch&) {
    return Status::FailedPrecondition("the " + name() + " engine starts an agent per node");
  }
};

}  // namespace drover

#endif  // DROVER_ENGINE_ENGINE_H_

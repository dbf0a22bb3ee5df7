// LocalEngine: runs every agent as a child process of the driver on this host.
//
// Each agent (one a node, or one for every node: LaunchHost) gets its own process group (so the
// driver can signal the agent and everything it left behind in one call), stdin from /dev/null, its
// stdout and stderr on one close-on-exec pipe to the driver, and PR_SET_PDEATHSIG = SIGTERM, so an
// agent stops its program when the driver dies, even by SIGKILL. The agents inherit the driver's
// environment.
//
// Not thread-safe. PR_SET_PDEATHSIG fires when the *thread* that launched the
// agent exits: launch from the thread that outlives the agents (main).

#ifndef DROVER_ENGINE_LOCAL_ENGINE_H_
#define DROVER_ENGINE_LOCAL_ENGINE_H_

#include <set>
#include <string>

#include "engine/engine.h"

namespace drover {

struct LocalEngineOptions {
  std::string host = "127.0.0.1";
  // TEST ONLY: executor ids for which Launch starts nothing (an agent that
  // never registers), so tests can exercise the reservation timeout. Wired
  // from DROVER_TEST_SKIP_AGENT by `drover run`; never set it in real use.
  std::set<std::string> skip_executors;
};

class LocalEngine : public Engine {
 public:
  explicit LocalEngine(LocalEngineOptions options);

  std::string name() const override { return "local"; }
  std::string rendezvous_host() const override { return options_.host; }
  std::string agent_host(int) const override { return options_.host; }
  Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) override;
  // One `drover-agent agent --node ...` for every node: one exec where each
  // node took one. Node 0's output is the agent's own stdout and stderr (its
  // lines before the nodes start go there); each other node gets a pipe.
  // Not while a test skips an executor: its agent must be missing alone.
  bool StartsHostAgents() const override { return options_.skip_executors.empty(); }
  bool RunsProgramsHere() const override { return true; }
  Result<std::vector<std::unique_ptr<AgentProcess>>> LaunchHost(const HostLaunch& launch) override;

 private:
  LocalEngineOptions options_;
};

// Starts `argv` as a child the same way (own process group, stdin /dev/null,
// stdout+stderr on a pipe when `capture_output`, else inherited, PDEATHSIG).
// Used for agents and for helpers such as tensorboard.
Result<std::unique_ptr<AgentProcess>> SpawnProcessGroup(const std::string& id,
                                                        const std::vector<std::string>& argv,
                                                        bool capture_output, int death_signal);

// The path of the running executable (/proc/self/exe resolved).
Result<std::string> SelfExecutable();

}  // namespace drover

#endif  // DROVER_ENGINE_LOCAL_ENGINE_H_

// FakeEngine: an Engine for driver tests whose agents are threads of the
// test process, not processes (Ninja's FakeCommandRunner). Each fake agent
// reads the argv the driver built (--rendezvous, --token-file,
// --executor-id, --host, --restart-count), speaks the real rendezvous
// protocol with its node credential, and acts out a script: print lines,
// exit with a code (reporting a failure as the real agent does), run until
// the driver's STOP, never register, or drop its connection and hang.
//
// So the driver's logic (formation, tagging, stopping the others, restarts,
// timeouts, lost nodes) is tested without fork, exec or a program. The real
// agent's behaviour is the reference (src/agent/agent.cc): success or STOP
// -> Leave, exit 0; failure -> ReportError with the last lines, exit with
// the program's code; SIGTERM -> exit 128 + 15; SIGKILL -> killed.
//
// Thread-safe: the driver calls Launch and the AgentProcess methods from its
// thread while the fake agents run on theirs; launches() and nodes() may be
// read from the test's thread.

#ifndef DROVER_TESTING_FAKE_ENGINE_H_
#define DROVER_TESTING_FAKE_ENGINE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace drover::testing {

// What one fake agent does in one round.
struct FakeNodeScript {
  bool registers = true;           // false: never connects (a node that never came)
  std::vector<std::string> lines;  // printed once the cluster formed
  int exit_code = 0;               // the program's exit code
  bool runs_until_stop = false;    // keeps running until STOP (a ps, an evaluator)
  bool drops_connection = false;   // closes its connection, then hangs until signalled
  // Runs on the driver's thread when it first sees this node's exit: what
  // reaches the driver just after (the same scancel's SIGTERM).
  std::function<void()> once_exit_seen;
};

// The script of executor `index` in round `round` (0 first).
using FakeScriptFunction = std::function<FakeNodeScript(int index, int round)>;

// What a fake agent saw, for the test to check.
struct FakeNodeRecord {
  std::string executor_id;
  int round = 0;
  std::vector<std::string> argv;
  std::string job_name;  // "" until formed
  int task_index = -1;
  std::chrono::milliseconds heartbeat_interval{0};  // what the cluster told it; 0 until formed
  bool stopped = false;                             // got the driver's STOP
  std::optional<int> signal;
  std::string error;  // a rendezvous call that failed
};

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(FakeScriptFunction script);
  ~FakeEngine() override;

  std::string name() const override { return "fake"; }
  std::string rendezvous_host() const override { return "127.0.0.1"; }
  std::string agent_host(int) const override { return "127.0.0.1"; }
  Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) override;

  // Every node launched so far, in launch order (copies).
  std::vector<FakeNodeRecord> nodes() const;

  struct Shared;

 private:
  FakeScriptFunction script_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace drover::testing

#endif  // DROVER_TESTING_FAKE_ENGINE_H_

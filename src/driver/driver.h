// Driver: `drover run`'s work. Forms a cluster of N agents through an
// in-process RendezvousServer, relays and logs their output, supervises them
// with TensorFlowOnSpark's roles, and stops every node on every exit path
// (docs/run.md).
//
// One round (each node's credential written once, before the first): start
// the server (ephemeral port), launch one agent per slot through the Engine,
// wait for the barrier, then supervise:
//  - every line an agent prints goes to `out` as "[job:index] line" (before
//    the barrier "[executor i] line") and to <log_dir>/<job>-<index>.log;
//  - when every chief/master/worker node has exited 0, the ps and evaluator
//    nodes are stopped (STOP, then SIGTERM, SIGKILL after the grace) and the
//    run succeeds;
//  - the first node that fails (its agent exits non-zero, reports an error,
//    or is declared dead) is reported on `err` with its last lines, the others
//    are stopped, and the round fails; with max_restarts the whole group is
//    re-formed (DROVER_RESTART_COUNT = round).
// A stop signal (read from `signal_fd`, a signalfd for SIGINT/SIGTERM) stops
// every node within the grace period and exits 128 + signal.
//
// Driver is used from one thread (the one that will outlive the agents: see
// LocalEngine); the server calls back on its own thread through a queue.

#ifndef DROVER_DRIVER_DRIVER_H_
#define DROVER_DRIVER_DRIVER_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "driver/progress_line.h"
#include "driver/run_status.h"
#include "driver/status_server.h"
#include "driver/straggler_watch.h"
#include "drover/rendezvous.h"
#include "drover/status.h"
#include "engine/engine.h"
#include "feed/feed_plan.h"
#include "os/janitor.h"

namespace drover {

// The failure that ended a round, as reported on `err`.
struct NodeFailure {
  std::string executor_id;
  std::string task;                     // "worker:1"; "" when the cluster had not formed
  std::string host;                     // the host the engine put the node on
  std::string reason;                   // "exited with code 1", "connection closed ..."
  std::vector<std::string> last_lines;  // the node's last lines of output
};

struct DriverOptions {
  ClusterTemplate cluster;           // num_nodes, num_ps, chief, evaluator
  std::vector<std::string> command;  // the user's program and its arguments
  std::string agent_binary;          // the `drover` executable
  std::string log_dir;               // "" : ./drover-logs/<cluster-id>
  std::string cluster_id;            // "" : the log directory's name
  bool tee = false;                  // also write every tagged line to <log_dir>/drover.log
  int max_restarts = 0;
  // Elastic membership (`--nodes MIN:MAX`; docs/run.md, "Elastic runs"):
  // > 0 makes the run elastic, cluster.num_nodes being MAX. The agents stay
  // up across rounds; the cluster forms once MAX registered, or MIN and
  // join_wait passed; a lost node leaves and the survivors form again
  // without it while at least min_nodes remain; a program that fails with
  // its agent alive is restarted in place (counted by max_restarts); an
  // agent that registers later joins at the next round, up to MAX.
  int min_nodes = 0;
  Milliseconds join_wait{30'000};
  Milliseconds reservation_timeout{300'000};
  // Between the agents' heartbeats; 5 missed ones declare a node lost.
  Milliseconds heartbeat_interval{1'000};
  // How long an agent with nothing new to report may go between heartbeats
  // (RendezvousServerOptions::quiet_heartbeat_interval); 0: never quiet.
  Milliseconds quiet_heartbeat_interval{5'000};
  Milliseconds shutdown_timeout{0};      // 0: the workers may run forever
  Milliseconds grace{5'000};             // SIGTERM -> SIGKILL
  NodeList node_list = NodeList::kAuto;  // each agent's --node-list
  // One agent for every node, where the engine can (the local engine) and
  // the run is not elastic: one exec for the agents where each node took one
  // (torchrun's shape; `drover run --agents host`, and drover.Cluster's local
  // engine).
  bool host_agent = false;
  // Per executor index: the GPUs given to that node; empty: no --gpus flag.
  std::vector<std::string> gpus;  // "0,1" or "none"
  int signal_fd = -1;             // signalfd for SIGINT/SIGTERM; -1: none
  int last_lines = 20;            // lines kept per node for failure reports
  // How long a launcher (ssh, srun) may outlive an agent that said it
  // finished before it is stopped: a step stuck on its way out must not hold
  // the run forever.
  Milliseconds launcher_exit_wait{30'000};
  // `--input`: what every fed node (chief, master, worker) gets a share of;
  // written to the private directory and handed to each agent.
  // An external plan (drover.Cluster.train) goes to the agents inline
  // (--feed-plan-json), so their hosts need not share a filesystem.
  std::optional<feed::FeedPlan> feed;
  // After every chief/master/worker node is done, how long the ps and
  // evaluator nodes keep running before they are stopped (TensorFlowOnSpark's
  // shutdown grace_secs).
  Milliseconds others_grace{0};
  // An eventfd (or any fd) that turns readable when the caller wants every
  // node stopped (drover.Cluster.shutdown past its timeout): handled like a
  // stop signal, reported as "stop requested"; -1: none.
  int stop_fd = -1;
  // Called on the driver's thread once the cluster has formed, and once for
  // the node failure that ends a round (callers: the Python driver API).
  std::function<void(const FormedCluster&)> on_formed;
  std::function<void(const NodeFailure&)> on_failure;

  // The cluster token; nullopt: a new one for this run.
  std::optional<ClusterToken> token;
  // The status server (docs/status.md): off unless status_port >= 0.
  int status_port = -1;  // 0: any free port
  std::string status_address = "127.0.0.1";
  // Names requests may give the status server in their Host header besides
  // loopback names, IP literals and status_address (--status-host).
  std::vector<std::string> status_hosts;
  // How long the status server keeps serving the final state after the
  // run ended (a stop signal cuts it short).
  Milliseconds status_linger{0};
  // Where the run with a status server announces itself to `drover status`
  // (driver/live_runs.h, LiveRunsDir); "" : nowhere.
  std::string live_runs_dir;
  ProgressOptions progress;
  // A node slower than kStragglerRatio of the median step (else feed) rate
  // for this long is named a straggler; 0: never.
  Milliseconds straggler_after{30'000};
  // At the end, print the summary (per node: role, runtime, exit, records)
  // on `err`. <log_dir>/run.json records the run either way.
  bool summary = false;
};

// A straggler's rate is below this fraction of the median (StragglerWatch).
inline constexpr double kStragglerRatio = 0.7;

// Exit codes: 0 success, 1 failure, 2 bad input, 128 + signal interrupted.
class Driver {
 public:
  Driver(DriverOptions options, Engine& engine, std::ostream& out, std::ostream& err);
  ~Driver();

  // Runs every round; returns the process exit code.
  int Run();
  // Prints what Run would start, starts nothing.
  void PrintPlan(std::ostream& out) const;
  // Changes DriverOptions::others_grace while Run is running (thread-safe).
  void SetOthersGrace(Milliseconds grace) { others_grace_ms_ = grace.count(); }
  // What the run looks like now (thread-safe).
  const RunStatus& status() const { return status_; }
  // The status page's address; "" without a status server. Driver thread
  // only (on_formed may call it).
  std::string status_url() const { return status_server_ ? status_server_->url() : ""; }

 private:
  struct Node;
  struct Round;
  struct Carry;
  // kReform: an elastic round ended and the next one is under way with the
  // agents in carry_.
  enum class Outcome { kSuccess, kFailure, kInterrupted, kNoRestart, kReform };

  bool elastic() const { return options_.min_nodes > 0; }

  Status Prepare();
  // The janitor that cleans up after a driver that dies; without
  // agent_binary, none.
  void StartJanitor();
  void StopJanitor();
  // The run's id: DriverOptions::cluster_id, else the log directory's name.
  std::string ClusterId() const;
  Status StartStatusServer();
  void StopStatusServer();
  // Builds the snapshot of `round` in `phase` and hands it to the status
  // server and the progress line; at most every kPublishInterval unless
  // `force`. False when it did not publish: the last was too recent.
  bool PublishStatus(Round& round, const std::string& phase, bool force = false);
  // The final snapshot, the summary and <log_dir>/run.json.
  void Finish(int code);
  Outcome RunRound(int round);
  // Starts round's server (an ephemeral port) and its event queue.
  Status StartRendezvous(Round& round);
  // Elastic, before the round formed: forms it once every agent still up
  // registered (a round after the first: its feed plan is written first), or
  // the first round once MIN registered and join_wait passed. An outcome
  // when the round ends here (fewer than MIN agents left).
  std::optional<Outcome> FormElastic(Round& round, bool held,
                                     std::optional<Clock::time_point>& enough_since);
  // Elastic: ends the round by forming the group again with the agents
  // still up and the round's joiners while there is room (REFORM), which
  // carry_ holds for the next RunRound; kNoRestart when fewer than MIN are
  // left.
  Outcome HandOver(Round& round, const std::string& reason);
  std::vector<std::string> AgentArgv(int index, int round, uint16_t port) const;
  // What every node's agent is given: AgentArgv without the node's own flags.
  std::vector<std::string> SharedAgentArgv(int round, uint16_t port) const;
  // Starts one agent for `group`'s nodes, which share a host (LaunchHost).
  Status LaunchHostAgent(Round& round, uint16_t port, const std::vector<int>& group);
  // Starts the round's agents, one a node or one a host (host_agent); false
  // (said on err_) when the engine could not.
  bool LaunchAgents(Round& round, uint16_t port);
  // Where WriteCredentialFile writes executor `index`'s node credential (mode 0600).
  std::string NodeCredentialFile(int index) const;
  // Writes node `index`'s credential file once a run, when an agent needs it.
  Status WriteCredentialFile(int index);

  DriverOptions options_;
  Engine& engine_;
  ProgressLine progress_;  // before out_ and err_: they write through it
  std::ostream& out_;
  std::ostream& err_;
  RunStatus status_;
  std::unique_ptr<StatusServer> status_server_;
  std::string status_token_file_;  // the status key, written for a server beyond loopback
  Clock::time_point started_at_;
  double started_at_unix_ = 0;
  Clock::time_point last_publish_{};
  double last_history_t_ = -1;
  std::deque<RateSample> history_;
  std::map<std::string, RateMeter> rates_;       // by executor id
  std::map<std::string, RateMeter> step_rates_;  // by executor id
  StragglerWatch stragglers_;
  // The nodes' reports: their steps, step rates, the chart's points, the
  // lead node's metrics and the stragglers, into `snapshot`.
  void ObserveTraining(RunSnapshot& snapshot);
  // Reads the feed commits (DataFeed::Commit) the round's nodes recorded in
  // its rendezvous store into feed_starts_.
  void CollectFeedCommits(RendezvousServer& server);
  // A dynamic feed: the next round's queue, from the round's claims and
  // commits (feed::QueueAfterRound), into options_.feed.
  void CollectDynamicQueue(RendezvousServer& server);
  // A dynamic feed's queue this round, for the estimates; nullopt otherwise.
  std::optional<QueueSize> DynamicQueueSize() const;
  // Writes feed_plan_file_ with feed_starts_ when they changed and says
  // where each share resumes.
  Status WriteFeedPlanForRound();

  // What an elastic round hands to the next: the server, its event queue and
  // the agents that stay (nullptr otherwise).
  std::unique_ptr<Carry> carry_;
  int failed_rounds_ = 0;  // rounds ended by a failed program (max_restarts)

  std::string feed_plan_file_;
  // Where each share's feeding starts next round (its last commit).
  std::vector<std::optional<feed::FeedPosition>> feed_starts_;
  bool feed_starts_changed_ = false;
  std::string feed_queue_note_;  // said when the next round's plan is written
  // The first node failure of the round running now ("worker:1 on h2:
  // killed by SIGKILL"), and that of the last failed round: why this round
  // began (agents' --restart-reason, the status).
  std::string round_failure_;
  std::string restart_reason_;
  std::string private_dir_;         // removed at the end
  std::set<int> credential_files_;  // written in private_dir_ (WriteCredentialFile)
  // Removes private_dir_, the live-run record and the engine's temporary
  // paths if this process dies before it does (os/janitor.h).
  std::unique_ptr<os::Janitor> janitor_;
  int interrupt_signal_ = 0;
  bool stop_requested_ = false;
  std::atomic<int64_t> others_grace_ms_;  // stop_fd fired (interrupt_signal_ is SIGTERM)
};

}  // namespace drover

#endif  // DROVER_DRIVER_DRIVER_H_

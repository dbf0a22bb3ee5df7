// `drover run --rendezvous etcd://HOST:PORT[,...]/RUN`: a driver that can die
// (docs/run.md, "A driver that can die"). The nodes form through etcd
// (docs/protocol.md, "The etcd backend"), so the driver is on no path the
// run needs: it starts the agents detached (their own sessions, output to
// per-node log files), then only watches: it prints the nodes' output and
// the rounds, and exits with the run's result. Killed, it leaves the run
// going; the same command again, or `drover run --attach etcd://.../RUN`,
// takes the watch up again. SIGINT or SIGTERM stops the run, as it does a
// driver of the built-in rendezvous.

#ifndef DROVER_DRIVER_ETCD_RUN_H_
#define DROVER_DRIVER_ETCD_RUN_H_

#include <atomic>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "driver/driver.h"
#include "driver/run_status.h"
#include "drover/rendezvous.h"
#include "feed/feed_plan.h"

namespace drover {

struct EtcdDriverOptions {
  std::string address;  // etcd://HOST:PORT[,...]/RUN
  EtcdRunOptions etcd;  // etcd's TLS and user, the run's shape
  bool attach = false;  // only attach: never start agents
  std::vector<std::string> command;
  // --input: stored in etcd before the agents start (a dynamic plan); the
  // agents claim and commit there (feed/etcd_feed_ledger.h). An external
  // plan (drover.Cluster.train: writers push into each node's feed socket)
  // is given to each agent instead, and nothing of it goes to etcd.
  std::optional<feed::FeedPlan> feed;
  std::string log_dir;             // the nodes' logs go to LOG_DIR/etcd-RUN/node-N.log
  std::string run_dir;             // instead of LOG_DIR/etcd-RUN (drover.Cluster's drover_log_dir)
  std::string drover_binary;       // runs `drover agent`
  std::string host = "127.0.0.1";  // the address each local node advertises
  Milliseconds grace{5'000};
  // --driver-timeout: how long the run goes on with no driver watching it
  // (this one killed and none attached); then the nodes stop it. nullopt:
  // as long as it takes (or as an earlier driver of the run said).
  std::optional<Milliseconds> driver_timeout;
  // The status page, /metrics and run.json (docs/status.md), as for any
  // drover run: status_port -1 serves none, 0 any free port.
  int status_port = -1;
  std::string status_address = "127.0.0.1";
  std::vector<std::string> status_hosts;
  std::string live_runs_dir;  // where `drover status` finds running drivers
  // Set by a signal handler: stop the run (the signal's number).
  const std::atomic<int>* stop_signal = nullptr;
  // drover.Cluster's (python/driver_bindings.cc), called on the watching
  // thread: each round's cluster once it formed, its placements laid out;
  // the node whose failure ended the run, once.
  std::function<void(const FormedCluster&)> on_formed;
  std::function<void(const NodeFailure&)> on_failure;
  // The status page's URL, once it serves (status_port >= 0).
  std::function<void(const std::string&)> on_status_page;
  // Where the run's status goes (drover.Cluster.status() reads it); nullptr:
  // the watch's own.
  RunStatus* status = nullptr;
};

// Runs (or attaches to) the run and returns the process exit code: 0 when
// every node's program finished, 1 when the run failed (after saying why),
// 2 for bad input, 128 + signal when a signal stopped it.
int RunThroughEtcd(const EtcdDriverOptions& options, std::ostream& out, std::ostream& err);

// What run.json, the page and `drover status --json etcd://` call a node of
// an etcd run in `phase` (ClusterState::phase): stopped, finished, failed,
// lost, running or registered.
std::string EtcdNodeState(const NodeStatus& node, const std::string& phase);

// Whether an etcd node's agent stopped its program at the run's end (a ps):
// a node leaves once its program exited 0, or once it was stopped so, or
// when the run ended before it started its program.
bool StoppedAtRunEnd(const NodeStatus& node);

}  // namespace drover

#endif  // DROVER_DRIVER_ETCD_RUN_H_

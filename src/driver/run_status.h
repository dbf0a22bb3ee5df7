// RunStatus: what the driver knows of its run, in one place, for everyone who
// shows it: the status server (/api/cluster, /metrics and the page,
// docs/status.md), the progress line, `drover status`, and the summary and
// run record written at the end.
//
// The driver's thread builds a RunSnapshot (a plain copyable value) and
// publishes it; readers take a copy. Log lines are appended as they are
// relayed. Every method is thread-safe.

#ifndef DROVER_DRIVER_RUN_STATUS_H_
#define DROVER_DRIVER_RUN_STATUS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "driver/metric_history.h"
#include "drover/rendezvous.h"
#include "drover/report.h"

namespace drover {

struct NodeSnapshot {
  std::string executor_id;
  std::string job;  // "" before the barrier
  int task_index = -1;
  bool chief = false;
  std::optional<int> rank;  // training tasks, once formed
  std::string host;
  std::vector<uint32_t> ports;
  int32_t pid = 0;          // the agent's
  int32_t program_pid = 0;  // the program's, from heartbeats
  std::vector<int32_t> gpus;
  // starting, registered, running, finished, failed, lost, stopped
  std::string state = "starting";
  int restarts = 0;  // the round this node belongs to
  std::optional<double> heartbeat_age_s;
  double runtime_s = 0;
  bool exited = false;
  int exit_code = -1;  // -1 when killed by a signal
  int exit_signal = 0;
  std::string exit_text;  // "exited with code 1", "killed by SIGKILL"
  std::string error;      // why it failed
  std::optional<FeedProgress> feed;
  double records_per_s = 0;
  double bytes_per_s = 0;
  // What its program reported (drover::Report): each name's last value.
  std::vector<MetricValue> metrics;
  std::optional<int64_t> step;      // the highest step reported
  std::optional<double> step_rate;  // steps per second over the last seconds
  std::string straggler;            // "worker:3 on h2 at 41% of the median step rate"

  // "worker:1", or "executor 3" before the barrier.
  std::string Task() const;
};

// One point of the feed-rate chart.
struct RateSample {
  double t = 0;  // seconds since the run started
  double records_per_s = 0;
  double bytes_per_s = 0;
};

// The whole cluster's feeding, summed over the fed nodes.
struct FeedTotals {
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t partitions_done = 0;
  uint64_t partitions_total = 0;  // 0: unknown (external feeds)
  uint64_t total_bytes = 0;       // every epoch of every share; 0: unknown
  uint32_t epoch = 0;             // the slowest node's, 0-based
  uint32_t epochs = 0;
  uint64_t epoch_bytes = 0;  // one epoch of every share
  double records_per_s = 0;
  double bytes_per_s = 0;
  std::optional<double> eta_s;        // to the end of the feed
  std::optional<double> epoch_eta_s;  // to the end of the current epoch
  double epoch_fraction = 0;          // of the current epoch, [0, 1]
};

struct RunSnapshot {
  std::string cluster_id;
  // reserving, running, stopping, succeeded, failed, interrupted
  std::string phase = "reserving";
  std::string engine;
  std::vector<std::string> command;
  std::string log_dir;
  double started_at_unix = 0;
  double elapsed_s = 0;
  int round = 0;
  std::string round_reason;  // why this round began; "" in round 0
  int max_restarts = 0;
  // The agents' heartbeat intervals (drover run --heartbeat,
  // --quiet-heartbeat); unset through etcd, where leases stand for them.
  std::optional<double> heartbeat_interval_s;
  std::optional<double> quiet_heartbeat_interval_s;
  int registered = 0;
  int expected = 0;
  std::optional<double> rendezvous_s;                      // how long the barrier took
  std::vector<std::string> waiting_for;                    // "worker:3 (executor 4) on host-b"
  nlohmann::json cluster_spec = nlohmann::json::object();  // as_dict(); {} until formed
  std::vector<NodeSnapshot> nodes;
  std::optional<FeedTotals> feed;
  std::vector<RateSample> history;
  std::optional<int> exit_code;  // the run's, once it ended
  // The lead node's reports (the chief, else rank 0, else the first that
  // reported): the run's metrics on the progress line, in run.json.
  std::string metrics_task;
  std::vector<MetricValue> metrics;
  std::vector<std::string> stragglers;  // NodeSnapshot::straggler of each
};

class RunStatus {
 public:
  explicit RunStatus(size_t log_lines_kept = 200) : log_lines_kept_(log_lines_kept) {}

  void Publish(RunSnapshot snapshot);
  RunSnapshot Snapshot() const;

  // Every line relayed from a node gets that node's next sequence number:
  // from 0, one more per line, over the whole run (a new round goes on
  // counting), so that a follower can ask for the lines after those it saw.
  void AppendLog(const std::string& executor_id, const std::vector<std::string>& lines);
  // A node's task ("worker:1", "executor 3" before the barrier) and lines.
  struct NodeLog {
    std::string task;
    std::vector<std::string> lines;
    uint64_t first = 0;  // the sequence number of lines[0] (of `next` when none)
    uint64_t next = 0;   // the one after the last of `lines`: since= for what follows
  };
  // The last `count` lines relayed from the node; nullopt for an unknown id.
  std::optional<NodeLog> LogTail(const std::string& executor_id, size_t count) const;
  // The first `count` lines numbered `since` or later, oldest first; nullopt
  // for an unknown id. first > since: the lines in between are no longer kept.
  std::optional<NodeLog> LogSince(const std::string& executor_id, uint64_t since,
                                  size_t count) const;
  // A new round: the lines of the last one are dropped; the numbering goes on.
  void ClearLogs();

  // The charts' points (driver/metric_history.h); `t` in seconds since the
  // run started.
  void AddMetrics(const std::string& task, double t, const std::vector<MetricValue>& metrics);
  // A new round: the charts' lines break (MetricHistory::Break).
  void BreakMetrics();
  // /api/metrics, and run.json's "metric_history".
  nlohmann::json MetricHistoryJson() const;

 private:
  // The lines kept of the node numbered [first, next) from `since` on (at
  // most `count`); nullopt for a node neither in the snapshot nor logging.
  std::optional<NodeLog> Lines(const std::string& executor_id, uint64_t since, size_t count) const
      REQUIRES(mu_);

  const size_t log_lines_kept_;
  mutable Mutex mu_;
  RunSnapshot snapshot_ GUARDED_BY(mu_);
  std::map<std::string, std::deque<std::string>> logs_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> next_line_ GUARDED_BY(mu_);  // survives ClearLogs
  MetricHistory metric_history_ GUARDED_BY(mu_);
};

// Per-node feed rates from the counters of successive heartbeats, over a
// sliding window (heartbeats come once a second, so one step is noisy).
// Driver thread only.
class RateMeter {
 public:
  explicit RateMeter(double window_s = 5.0) : window_s_(window_s) {}
  // Adds a sample at `t` seconds; returns {records/s, bytes/s}.
  std::pair<double, double> Add(double t, uint64_t records, uint64_t bytes);
  void Reset() { samples_.clear(); }

 private:
  struct Sample {
    double t;
    uint64_t records;
    uint64_t bytes;
  };
  double window_s_;
  std::deque<Sample> samples_;
};

// The highest step among `metrics`; nullopt when none has one.
std::optional<int64_t> HighestStep(const std::vector<MetricValue>& metrics);

// A dynamic feed's size (--balance dynamic): no node knows its share, the
// driver knows the round's queue.
struct QueueSize {
  uint64_t feeds = 0;        // entries (partitions x epochs) this round
  uint64_t bytes = 0;        // their input bytes
  uint64_t epoch_bytes = 0;  // every partition once
};

// Sums the fed nodes' progress and estimates what is left, from the nodes'
// shares, or from `queue` for a dynamic feed.
FeedTotals SumFeeds(const std::vector<NodeSnapshot>& nodes,
                    const std::optional<QueueSize>& queue = std::nullopt);

// /api/cluster (docs/status.md).
nlohmann::json SnapshotToJson(const RunSnapshot& snapshot);
// /metrics: the Prometheus text format, version 0.0.4, every name drover_...
std::string SnapshotToPrometheus(const RunSnapshot& snapshot);

}  // namespace drover

#endif  // DROVER_DRIVER_RUN_STATUS_H_

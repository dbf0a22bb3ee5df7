#include "driver/run_status.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace drover {
namespace {

using nlohmann::json;

json Optional(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

json FeedToJson(const FeedProgress& feed, double records_per_s, double bytes_per_s) {
  return json{{"records", feed.records},
              {"bytes", feed.bytes},
              {"partitions_done", feed.partitions_done},
              {"partitions_total", feed.partitions_total},
              {"epoch", feed.epoch},
              {"epochs", feed.epochs},
              {"rate_records_per_s", records_per_s},
              {"rate_bytes_per_s", bytes_per_s},
              {"queue_bytes", feed.queue_bytes},
              {"queue_capacity", feed.queue_capacity},
              {"feeder_restarts", feed.feeder_restarts},
              {"results", feed.results},
              {"ingest", feed.ingest}};
}

// NaN and infinities have no JSON form: null.
json Number(double value) {
  return std::isfinite(value) ? json(value) : json(nullptr);
}

json MetricsToJson(const std::vector<MetricValue>& metrics, bool with_steps) {
  json out = json::object();
  for (const MetricValue& metric : metrics) {
    if (!with_steps) {
      out[metric.name] = Number(metric.value);
      continue;
    }
    out[metric.name] = json{{"value", Number(metric.value)},
                            {"step", metric.step ? json(*metric.step) : json(nullptr)}};
  }
  return out;
}

json NodeToJson(const NodeSnapshot& node) {
  json exit = nullptr;
  if (node.exited) {
    exit = json{{"code", node.exit_code >= 0 ? json(node.exit_code) : json(nullptr)},
                {"signal", node.exit_signal > 0 ? json(node.exit_signal) : json(nullptr)},
                {"text", node.exit_text}};
  }
  return json{
      {"executor_id", node.executor_id},
      {"task", node.job.empty() ? "" : node.Task()},
      {"job", node.job},
      {"task_index", node.task_index},
      {"chief", node.chief},
      {"rank", node.rank ? json(*node.rank) : json(nullptr)},
      {"host", node.host},
      {"ports", node.ports},
      {"pid", node.pid},
      {"program_pid", node.program_pid},
      {"state", node.state},
      {"restarts", node.restarts},
      {"last_heartbeat_age_s", Optional(node.heartbeat_age_s)},
      {"runtime_s", node.runtime_s},
      {"exit", exit},
      {"error", node.error},
      {"gpus", node.gpus},
      {"feed",
       node.feed ? FeedToJson(*node.feed, node.records_per_s, node.bytes_per_s) : json(nullptr)},
      {"metrics", MetricsToJson(node.metrics, /*with_steps=*/true)},
      {"step", node.step ? json(*node.step) : json(nullptr)},
      {"step_rate", Optional(node.step_rate)},
      {"straggler", node.straggler.empty() ? json(nullptr) : json(node.straggler)},
  };
}

json TotalsToJson(const FeedTotals& feed, const std::vector<RateSample>& history) {
  json points = json::array();
  for (const RateSample& sample : history) {
    points.push_back(json{{"t", sample.t},
                          {"records_per_s", sample.records_per_s},
                          {"bytes_per_s", sample.bytes_per_s}});
  }
  return json{{"records", feed.records},
              {"bytes", feed.bytes},
              {"rate_records_per_s", feed.records_per_s},
              {"rate_bytes_per_s", feed.bytes_per_s},
              {"partitions_done", feed.partitions_done},
              {"partitions_total", feed.partitions_total},
              {"epoch", feed.epoch},
              {"epochs", feed.epochs},
              {"epoch_fraction", feed.epoch_fraction},
              {"eta_s", Optional(feed.eta_s)},
              {"epoch_eta_s", Optional(feed.epoch_eta_s)},
              {"history", std::move(points)}};
}

// The Prometheus text format (exposition format 0.0.4).
class MetricsWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void Family(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const Labels& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) out_ += ",";
        out_ += labels[i].first + "=\"" + Escape(labels[i].second) + "\"";
      }
      out_ += "}";
    }
    out_ += " ";
    if (std::isnan(value)) {
      out_ += "NaN\n";
      return;
    }
    if (std::isinf(value)) {
      out_ += value > 0 ? "+Inf\n" : "-Inf\n";
      return;
    }
    // The shortest text that reads back as the same double.
    char number[32];
    auto [end, error] = std::to_chars(number, number + sizeof(number), value);
    out_.append(number, error == std::errc() ? end : number);
    out_ += "\n";
  }
  std::string Take() { return std::move(out_); }

 private:
  static std::string Escape(const std::string& value) {
    std::string escaped;
    for (char c : value) {
      if (c == '\\' || c == '"') {
        escaped += '\\';
        escaped += c;
      } else if (c == '\n') {
        escaped += "\\n";
      } else {
        escaped += c;
      }
    }
    return escaped;
  }
  std::string out_;
};

const char* const kNodeStates[] = {"starting", "registered", "running", "finished",
                                   "failed",   "lost",       "stopped"};

// The agents' heartbeat intervals, and when a node's heartbeat counts as
// late (the page and `drover status` mark it): the quiet interval (or the
// interval, when longer) and two intervals more. Null through etcd.
json HeartbeatJson(const RunSnapshot& snapshot) {
  if (!snapshot.heartbeat_interval_s) return nullptr;
  const double every = *snapshot.heartbeat_interval_s;
  const double quiet = snapshot.quiet_heartbeat_interval_s.value_or(0);
  return json{{"interval_s", every},
              {"quiet_s", quiet},
              {"late_after_s", std::max(quiet, every) + 2 * every}};
}

}  // namespace

std::string NodeSnapshot::Task() const {
  if (job.empty()) return "executor " + executor_id;
  return job + ":" + std::to_string(task_index);
}

void RunStatus::Publish(RunSnapshot snapshot) {
  MutexLock lock(mu_);
  snapshot_ = std::move(snapshot);
}

RunSnapshot RunStatus::Snapshot() const {
  MutexLock lock(mu_);
  return snapshot_;
}

void RunStatus::AppendLog(const std::string& executor_id, const std::vector<std::string>& lines) {
  MutexLock lock(mu_);
  std::deque<std::string>& log = logs_[executor_id];
  for (const std::string& line : lines) {
    log.push_back(line);
    if (log.size() > log_lines_kept_) log.pop_front();
  }
  next_line_[executor_id] += lines.size();
}

std::optional<RunStatus::NodeLog> RunStatus::Lines(const std::string& executor_id, uint64_t since,
                                                   size_t count) const {
  std::optional<NodeLog> log;
  for (const NodeSnapshot& node : snapshot_.nodes) {
    if (node.executor_id == executor_id) log = NodeLog{node.Task(), {}};
  }
  auto it = logs_.find(executor_id);
  if (it == logs_.end()) {
    if (!log) return log;
    auto next = next_line_.find(executor_id);
    log->first = log->next = next == next_line_.end() ? 0 : next->second;
    return log;
  }
  if (!log) log = NodeLog{"executor " + executor_id, {}};
  const std::deque<std::string>& lines = it->second;
  const uint64_t end = next_line_.at(executor_id);
  const uint64_t kept_from = end - lines.size();
  log->first = std::clamp(since, kept_from, end);
  const size_t skip = static_cast<size_t>(log->first - kept_from);
  const size_t take = std::min(count, lines.size() - skip);
  log->lines.assign(lines.begin() + static_cast<ptrdiff_t>(skip),
                    lines.begin() + static_cast<ptrdiff_t>(skip + take));
  log->next = log->first + take;
  return log;
}

std::optional<RunStatus::NodeLog> RunStatus::LogTail(const std::string& executor_id,
                                                     size_t count) const {
  MutexLock lock(mu_);
  auto it = next_line_.find(executor_id);
  const uint64_t end = it == next_line_.end() ? 0 : it->second;
  return Lines(executor_id, end > count ? end - count : 0, count);
}

std::optional<RunStatus::NodeLog> RunStatus::LogSince(const std::string& executor_id,
                                                      uint64_t since, size_t count) const {
  MutexLock lock(mu_);
  return Lines(executor_id, since, count);
}

void RunStatus::ClearLogs() {
  MutexLock lock(mu_);
  logs_.clear();
}

void RunStatus::AddMetrics(const std::string& task, double t,
                           const std::vector<MetricValue>& metrics) {
  MutexLock lock(mu_);
  metric_history_.Add(task, t, metrics);
}

void RunStatus::BreakMetrics() {
  MutexLock lock(mu_);
  metric_history_.Break();
}

nlohmann::json RunStatus::MetricHistoryJson() const {
  MutexLock lock(mu_);
  return metric_history_.ToJson();
}

std::pair<double, double> RateMeter::Add(double t, uint64_t records, uint64_t bytes) {
  if (!samples_.empty() && records < samples_.back().records) samples_.clear();  // a new round
  samples_.push_back({t, records, bytes});
  while (samples_.size() > 2 && t - samples_[1].t >= window_s_) samples_.pop_front();
  const Sample& first = samples_.front();
  const Sample& last = samples_.back();
  const double span = last.t - first.t;
  if (span < 0.5) return {0, 0};
  return {static_cast<double>(last.records - first.records) / span,
          static_cast<double>(last.bytes - first.bytes) / span};
}

std::optional<int64_t> HighestStep(const std::vector<MetricValue>& metrics) {
  std::optional<int64_t> step;
  for (const MetricValue& metric : metrics) {
    if (metric.step && (!step || *metric.step > *step)) step = metric.step;
  }
  return step;
}

FeedTotals SumFeeds(const std::vector<NodeSnapshot>& nodes, const std::optional<QueueSize>& queue) {
  FeedTotals totals;
  bool first = true;
  bool sizes_known = true;
  for (const NodeSnapshot& node : nodes) {
    if (!node.feed) continue;
    const FeedProgress& feed = *node.feed;
    totals.records += feed.records;
    totals.bytes += feed.bytes;
    totals.partitions_done += feed.partitions_done;
    totals.partitions_total += feed.partitions_total;
    totals.records_per_s += node.records_per_s;
    totals.bytes_per_s += node.bytes_per_s;
    totals.epochs = std::max(totals.epochs, feed.epochs);
    totals.epoch = first ? feed.epoch : std::min(totals.epoch, feed.epoch);
    totals.epoch_bytes += feed.share_bytes;
    totals.total_bytes += feed.share_bytes * feed.epochs;
    sizes_known = sizes_known && feed.partitions_total > 0;
    first = false;
  }
  if (queue) {
    totals.partitions_total = queue->feeds;
    totals.epoch_bytes = queue->epoch_bytes;
    totals.total_bytes = queue->bytes;
    sizes_known = true;
  }
  if (!sizes_known || totals.total_bytes == 0) {
    totals.total_bytes = totals.epoch_bytes = 0;
    return totals;
  }
  // Record bytes leave out separators (a CSV line's newline), so they trail
  // the input bytes a little: an estimate never says done before it is.
  const double epoch_start = static_cast<double>(totals.epoch) * totals.epoch_bytes;
  const double into_epoch = std::max(0.0, static_cast<double>(totals.bytes) - epoch_start);
  totals.epoch_fraction = std::min(0.999, into_epoch / static_cast<double>(totals.epoch_bytes));
  if (totals.partitions_done >= totals.partitions_total) totals.epoch_fraction = 1.0;
  if (totals.bytes_per_s > 0) {
    const double left = std::max(0.0, static_cast<double>(totals.total_bytes) - totals.bytes);
    totals.eta_s = left / totals.bytes_per_s;
    totals.epoch_eta_s = (1.0 - totals.epoch_fraction) * totals.epoch_bytes / totals.bytes_per_s;
  }
  if (totals.partitions_done >= totals.partitions_total) totals.eta_s = totals.epoch_eta_s = 0.0;
  return totals;
}

nlohmann::json SnapshotToJson(const RunSnapshot& snapshot) {
  json nodes = json::array();
  for (const NodeSnapshot& node : snapshot.nodes) nodes.push_back(NodeToJson(node));
  return json{
      {"cluster_id", snapshot.cluster_id},
      {"phase", snapshot.phase},
      {"engine", snapshot.engine},
      {"command", snapshot.command},
      {"log_dir", snapshot.log_dir},
      {"started_at", snapshot.started_at_unix},
      {"elapsed_s", snapshot.elapsed_s},
      {"round", snapshot.round},
      {"round_reason", snapshot.round_reason},
      {"max_restarts", snapshot.max_restarts},
      {"heartbeat", HeartbeatJson(snapshot)},
      {"rendezvous", json{{"registered", snapshot.registered},
                          {"expected", snapshot.expected},
                          {"duration_s", Optional(snapshot.rendezvous_s)},
                          {"waiting_for", snapshot.waiting_for}}},
      {"cluster_spec", snapshot.cluster_spec},
      {"nodes", std::move(nodes)},
      {"feed", snapshot.feed ? TotalsToJson(*snapshot.feed, snapshot.history) : json(nullptr)},
      {"exit_code", snapshot.exit_code ? json(*snapshot.exit_code) : json(nullptr)},
      {"metrics", MetricsToJson(snapshot.metrics, /*with_steps=*/false)},
      {"metrics_task", snapshot.metrics_task},
      {"stragglers", snapshot.stragglers},
  };
}

std::string SnapshotToPrometheus(const RunSnapshot& snapshot) {
  MetricsWriter out;
  out.Family("drover_run_info", "gauge", "The run this driver supervises (always 1).");
  out.Sample(
      "drover_run_info",
      {{"cluster_id", snapshot.cluster_id}, {"engine", snapshot.engine}, {"phase", snapshot.phase}},
      1);
  out.Family("drover_run_elapsed_seconds", "gauge", "Seconds since drover run started.");
  out.Sample("drover_run_elapsed_seconds", {}, snapshot.elapsed_s);
  out.Family("drover_restarts_total", "counter", "Times the group was re-formed (--max-restarts).");
  out.Sample("drover_restarts_total", {}, snapshot.round);
  out.Family("drover_nodes_expected", "gauge", "Nodes the cluster is made of.");
  out.Sample("drover_nodes_expected", {}, snapshot.expected);
  out.Family("drover_nodes_registered", "gauge", "Nodes registered with the rendezvous.");
  out.Sample("drover_nodes_registered", {}, snapshot.registered);
  out.Family("drover_nodes", "gauge", "Nodes by state.");
  for (const char* state : kNodeStates) {
    double count = static_cast<double>(
        std::count_if(snapshot.nodes.begin(), snapshot.nodes.end(),
                      [state](const NodeSnapshot& node) { return node.state == state; }));
    out.Sample("drover_nodes", {{"state", state}}, count);
  }
  if (snapshot.rendezvous_s) {
    out.Family("drover_rendezvous_duration_seconds", "gauge",
               "How long the rendezvous barrier took in this round.");
    out.Sample("drover_rendezvous_duration_seconds", {}, *snapshot.rendezvous_s);
  }
  out.Family("drover_node_heartbeat_age_seconds", "gauge",
             "Seconds since the node's last heartbeat.");
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.heartbeat_age_s) {
      out.Sample("drover_node_heartbeat_age_seconds",
                 {{"executor", node.executor_id}, {"task", node.Task()}}, *node.heartbeat_age_s);
    }
  }
  struct FeedMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const NodeSnapshot&);
  };
  static const FeedMetric kFeedMetrics[] = {
      {"drover_feed_records_total", "counter", "Records handed to the node's program.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->records); }},
      {"drover_feed_bytes_total", "counter", "Bytes of the records handed to the program.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->bytes); }},
      {"drover_feed_partitions_done_total", "counter",
       "Partitions (x epochs) the program read to their end.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->partitions_done); }},
      {"drover_feed_partitions_planned", "gauge",
       "Partitions (x epochs) in the node's share; 0 when fed from outside.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->partitions_total); }},
      {"drover_feed_rate_records_per_second", "gauge", "Records per second over the last seconds.",
       [](const NodeSnapshot& n) { return n.records_per_s; }},
      {"drover_feed_rate_bytes_per_second", "gauge", "Bytes per second over the last seconds.",
       [](const NodeSnapshot& n) { return n.bytes_per_s; }},
      {"drover_feed_queue_bytes", "gauge",
       "How far the node's feeder is ahead: queued bytes, or bytes of records queued as file "
       "extents.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->queue_bytes); }},
      {"drover_feed_queue_capacity_bytes", "gauge", "The node's queue size.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->queue_capacity); }},
      {"drover_feed_results_total", "counter", "Inference results the program handed back.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->results); }},
      {"drover_feeder_restarts_total", "counter", "Killed feeders started again.",
       [](const NodeSnapshot& n) { return static_cast<double>(n.feed->feeder_restarts); }},
  };
  for (const FeedMetric& metric : kFeedMetrics) {
    out.Family(metric.name, metric.type, metric.help);
    for (const NodeSnapshot& node : snapshot.nodes) {
      if (node.feed) {
        out.Sample(metric.name, {{"executor", node.executor_id}, {"task", node.Task()}},
                   metric.value(node));
      }
    }
  }
  out.Family("drover_feed_ingest", "gauge",
             "1 for the way the node's feeder takes raw records in (--feed-ingest; measure "
             "while it measures).");
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.feed && !node.feed->ingest.empty()) {
      out.Sample(
          "drover_feed_ingest",
          {{"executor", node.executor_id}, {"task", node.Task()}, {"way", node.feed->ingest}}, 1);
    }
  }
  out.Family("drover_metric", "gauge",
             "The last value of each metric the node's program reported (drover.report).");
  for (const NodeSnapshot& node : snapshot.nodes) {
    for (const MetricValue& metric : node.metrics) {
      out.Sample("drover_metric",
                 {{"name", metric.name}, {"executor", node.executor_id}, {"task", node.Task()}},
                 metric.value);
    }
  }
  out.Family("drover_node_step", "gauge", "The highest step the node's program reported.");
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.step) {
      out.Sample("drover_node_step", {{"executor", node.executor_id}, {"task", node.Task()}},
                 static_cast<double>(*node.step));
    }
  }
  out.Family("drover_node_step_rate", "gauge", "Steps per second over the last seconds.");
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.step_rate) {
      out.Sample("drover_node_step_rate", {{"executor", node.executor_id}, {"task", node.Task()}},
                 *node.step_rate);
    }
  }
  out.Family("drover_straggler", "gauge",
             "1 for a node below 70% of the median step (else feed) rate for the straggler time.");
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.state == "running" && (node.step_rate || node.feed)) {
      out.Sample("drover_straggler",
                 {{"executor", node.executor_id}, {"task", node.Task()}, {"host", node.host}},
                 node.straggler.empty() ? 0 : 1);
    }
  }
  if (snapshot.feed && snapshot.feed->eta_s) {
    out.Family("drover_feed_eta_seconds", "gauge", "Estimated seconds until the feed ends.");
    out.Sample("drover_feed_eta_seconds", {}, *snapshot.feed->eta_s);
  }
  return out.Take();
}

}  // namespace drover

#include "driver/status_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace drover {
namespace {

using nlohmann::json;

// The array member `key` of `object`; empty when it is anything else.
const json& Items(const json& object, const char* key) {
  static const json kEmpty = json::array();
  const json& items = JsonField(object, key);
  return items.is_array() ? items : kEmpty;
}

// Lays out rows in columns two spaces apart.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string Text(const json& value, const std::string& fallback = "-") {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  return fallback;
}

double Number(const json& object, const char* key, double fallback = 0) {
  const json& value = JsonField(object, key);
  return value.is_number() ? value.get<double>() : fallback;
}

// A count for display: negative, fractional or absurd numbers clamp into
// range (converting them as they are would be undefined).
uint64_t Count(const json& object, const char* key) {
  const double value = Number(object, key);
  if (!(value > 0)) return 0;
  if (value >= 1.8e19) return UINT64_MAX;
  return static_cast<uint64_t>(value);
}

int SmallInt(const json& object, const char* key) {
  const double value = Number(object, key);
  if (!(value > -1e9 && value < 1e9)) return 0;
  return static_cast<int>(value);
}

std::string Join(const json& array) {
  if (!array.is_array() || array.empty()) return "-";
  std::string out;
  for (const json& item : array) {
    if (!out.empty()) out += ",";
    out += Text(item);
  }
  return out;
}

std::string Task(const json& node) {
  std::string task = Text(JsonField(node, "task"), "");
  return task.empty() ? "executor " + Text(JsonField(node, "executor_id")) : task;
}

std::string Percent(double fraction) {
  return std::to_string(static_cast<int>(std::floor(fraction * 100))) + "%";
}

std::string ExitText(const json& node) {
  const json& exit = JsonField(node, "exit");
  return exit.is_object() ? Text(JsonField(exit, "text")) : "-";
}

std::string FeedLine(const json& feed) {
  std::string line = FormatCount(Count(feed, "records")) + " records (" +
                     FormatBytes(Number(feed, "bytes")) + "), " +
                     FormatCount(Count(feed, "rate_records_per_s")) + " records/s";
  const uint64_t total = Count(feed, "partitions_total");
  if (total > 0) {
    line += ", partitions " + FormatCount(Count(feed, "partitions_done")) + "/" +
            FormatCount(total) + ", epoch " + std::to_string(SmallInt(feed, "epoch") + 1) + "/" +
            std::to_string(SmallInt(feed, "epochs"));
  }
  const json& eta = JsonField(feed, "eta_s");
  if (eta.is_number()) line += ", ETA " + FormatDuration(eta.get<double>());
  return line;
}

}  // namespace

std::string FormatDuration(double seconds) {
  char text[48];
  if (!(seconds > 0)) seconds = 0;  // NaN too
  if (seconds > 1e9) seconds = 1e9;
  if (seconds < 1) {
    std::snprintf(text, sizeof(text), "%d ms", static_cast<int>(std::lround(seconds * 1000)));
  } else if (seconds < 60) {
    std::snprintf(text, sizeof(text), "%.1f s", seconds);
  } else if (seconds < 3600) {
    const long total = std::lround(seconds);
    std::snprintf(text, sizeof(text), "%ld m %ld s", total / 60, total % 60);
  } else {
    const long minutes = std::lround(seconds / 60);
    std::snprintf(text, sizeof(text), "%ld h %ld m", minutes / 60, minutes % 60);
  }
  return text;
}

std::string FormatCount(uint64_t count) {
  std::string digits = std::to_string(count);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  size_t unit = 0;
  while (bytes >= 1000 && unit + 1 < std::size(kUnits)) {
    bytes /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return text;
}

namespace {

// Counts whole, the rest to 4 significant digits.
std::string MetricNumber(double value) {
  char text[32];
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.4g", value);
  }
  return text;
}

// "loss 0.041  acc 0.97"
std::string MetricsText(const std::vector<MetricValue>& metrics) {
  std::string text;
  for (const MetricValue& metric : metrics) {
    if (!text.empty()) text += "  ";
    text += metric.name + " " + MetricNumber(metric.value);
  }
  return text;
}

// The same from JSON ({"loss": 0.041} or {"loss": {"value": 0.041, ...}}).
std::string MetricsText(const json& metrics) {
  if (!metrics.is_object()) return "";
  std::string text;
  for (const auto& [name, entry] : metrics.items()) {
    const json& value = entry.is_object() ? JsonField(entry, "value") : entry;
    if (!text.empty()) text += "  ";
    text += name + " " + (value.is_number() ? MetricNumber(value.get<double>()) : "nan");
  }
  return text;
}

// How the fed nodes' raw records come in (--feed-ingest), the nodes grouped
// by way: "ingest: extent (worker:0, worker:1), read (worker:2)\n"; "" when
// no node says.
std::string IngestLine(const json& cluster) {
  std::vector<std::pair<std::string, std::vector<std::string>>> ways;
  for (const json& node : Items(cluster, "nodes")) {
    const std::string way = Text(JsonField(JsonField(node, "feed"), "ingest"), "");
    if (way.empty()) continue;
    auto it = std::find_if(ways.begin(), ways.end(), [&](const auto& w) { return w.first == way; });
    if (it == ways.end()) it = ways.insert(ways.end(), {way, {}});
    it->second.push_back(Task(node));
  }
  if (ways.empty()) return "";
  std::string line = "ingest:";
  for (size_t i = 0; i < ways.size(); ++i) {
    line += (i == 0 ? " " : ", ") + ways[i].first + " (";
    for (size_t j = 0; j < ways[i].second.size(); ++j) {
      line += (j == 0 ? "" : ", ") + ways[i].second[j];
    }
    line += ")";
  }
  return line + "\n";
}

// "metrics (worker:0): loss 0.041  acc 0.97\n"; "" without reports.
std::string LeadMetricsLine(const json& cluster) {
  const std::string metrics = MetricsText(JsonField(cluster, "metrics"));
  if (metrics.empty()) return "";
  return "metrics (" + Text(JsonField(cluster, "metrics_task")) + "): " + metrics + "\n";
}

// "step 120  loss 0.041  acc 0.97"; "" when the programs report nothing.
std::string TrainingText(const RunSnapshot& snapshot) {
  std::string text = MetricsText(snapshot.metrics);
  const std::optional<int64_t> step = HighestStep(snapshot.metrics);
  if (step && !text.empty()) text = "step " + std::to_string(*step) + "  " + text;
  for (const std::string& straggler : snapshot.stragglers) {
    text += (text.empty() ? "straggler: " : "; straggler: ") + straggler;
  }
  return text;
}

}  // namespace

const json& JsonField(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  return Table(rows);
}

std::string ProgressText(const RunSnapshot& snapshot) {
  if (snapshot.phase == "reserving") {
    std::string text = std::to_string(snapshot.registered) + "/" +
                       std::to_string(snapshot.expected) + " nodes registered";
    if (!snapshot.waiting_for.empty()) {
      text += ", waiting for " + snapshot.waiting_for.front();
      if (snapshot.waiting_for.size() > 1) {
        text += " and " + std::to_string(snapshot.waiting_for.size() - 1) + " more";
      }
    }
    return "drover run: " + text + " (" + FormatDuration(snapshot.elapsed_s) + ")";
  }
  if (snapshot.phase != "running") return "";
  const std::string training = TrainingText(snapshot);
  const bool fed = snapshot.feed && (snapshot.feed->records > 0 || snapshot.feed->partitions_done);
  if (!fed) return training.empty() ? "" : "drover run: " + training;
  const FeedTotals& feed = *snapshot.feed;
  std::string text = "drover run: feeding";
  if (feed.partitions_total > 0) {
    text += " epoch " + std::to_string(feed.epoch + 1) + "/" + std::to_string(feed.epochs) + " (" +
            Percent(feed.epoch_fraction) + ")";
  }
  text += ": " + FormatCount(feed.records) + " records, " +
          FormatCount(static_cast<uint64_t>(feed.records_per_s)) + " records/s, " +
          FormatBytes(feed.bytes_per_s) + "/s";
  if (feed.epoch_eta_s && feed.epochs > 1)
    text += ", epoch ETA " + FormatDuration(*feed.epoch_eta_s);
  if (feed.eta_s) text += ", ETA " + FormatDuration(*feed.eta_s);
  if (!training.empty()) text += "; " + training;
  return text;
}

namespace {

// Seconds after which a running node's heartbeat is late, as the driver
// says (run_status.h) and the status page reads it; 10 s when the run does
// not say (an older driver, etcd).
double HeartbeatLateAfter(const json& cluster) {
  const json& late_after = JsonField(JsonField(cluster, "heartbeat"), "late_after_s");
  return late_after.is_number() ? late_after.get<double>() : 10;
}

// "1.5 s ago", "12.0 s ago (late)" for a node that should be heartbeating.
std::string HeartbeatText(const json& node, double late_after) {
  const json& age = JsonField(node, "last_heartbeat_age_s");
  if (!age.is_number()) return "-";
  std::string text = FormatDuration(age.get<double>()) + " ago";
  const std::string state = Text(JsonField(node, "state"), "");
  if (age.get<double>() > late_after && (state == "running" || state == "registered")) {
    text += " (late)";
  }
  return text;
}

}  // namespace

std::string RenderStatus(const json& cluster) {
  std::string out;
  out += "cluster " + Text(JsonField(cluster, "cluster_id")) + ": " +
         Text(JsonField(cluster, "phase")) + " on the " + Text(JsonField(cluster, "engine")) +
         " engine for " + FormatDuration(Number(cluster, "elapsed_s"));
  const int round = SmallInt(cluster, "round");
  if (round > 0) {
    out += " (restart " + std::to_string(round);
    const std::string reason = Text(JsonField(cluster, "round_reason"), "");
    if (!reason.empty()) out += " after " + reason;
    out += ")";
  }
  out += "\n";
  const json& rendezvous = JsonField(cluster, "rendezvous");
  out += "rendezvous: " + Text(JsonField(rendezvous, "registered")) + "/" +
         Text(JsonField(rendezvous, "expected")) + " nodes registered";
  const json& duration = JsonField(rendezvous, "duration_s");
  if (duration.is_number()) out += ", formed in " + FormatDuration(duration.get<double>());
  for (const json& waiting : Items(rendezvous, "waiting_for")) {
    out += "\n  waiting for " + Text(waiting);
  }
  out += "\n";
  const json& feed = JsonField(cluster, "feed");
  if (feed.is_object()) out += "feed: " + FeedLine(feed) + "\n";
  out += IngestLine(cluster);
  out += LeadMetricsLine(cluster);
  for (const json& straggler : Items(cluster, "stragglers")) {
    out += "straggler: " + Text(straggler) + "\n";
  }
  out += "logs: " + Text(JsonField(cluster, "log_dir")) + "\n\n";
  std::vector<std::vector<std::string>> rows = {{"TASK", "EXECUTOR", "HOST", "PID", "STATE",
                                                 "RESTARTS", "HEARTBEAT", "EXIT", "RECORDS",
                                                 "RECORDS/S", "GPUS", "STEP", "METRICS"}};
  std::vector<std::string> errors;
  const double late_after = HeartbeatLateAfter(cluster);
  for (const json& node : Items(cluster, "nodes")) {
    const json& node_feed = JsonField(node, "feed");
    rows.push_back(
        {Task(node), Text(JsonField(node, "executor_id")), Text(JsonField(node, "host")),
         Text(JsonField(node, "pid")), Text(JsonField(node, "state")),
         Text(JsonField(node, "restarts")), HeartbeatText(node, late_after), ExitText(node),
         node_feed.is_object() ? FormatCount(Count(node_feed, "records")) : "-",
         node_feed.is_object() ? FormatCount(Count(node_feed, "rate_records_per_s")) : "-",
         Join(Items(node, "gpus")), Text(JsonField(node, "step")),
         MetricsText(JsonField(node, "metrics")).empty()
             ? "-"
             : MetricsText(JsonField(node, "metrics"))});
    std::string error = Text(JsonField(node, "error"), "");
    if (!error.empty()) errors.push_back(Task(node) + ": " + error);
  }
  out += Table(rows);
  for (const std::string& error : errors) out += "\n" + error;
  if (!errors.empty()) out += "\n";
  return out;
}

std::string RenderSummary(const json& cluster) {
  std::vector<std::vector<std::string>> rows = {
      {"TASK", "EXECUTOR", "HOST", "RUNTIME", "EXIT", "RECORDS"}};
  for (const json& node : Items(cluster, "nodes")) {
    const json& feed = JsonField(node, "feed");
    rows.push_back({Task(node), Text(JsonField(node, "executor_id")), Text(JsonField(node, "host")),
                    FormatDuration(Number(node, "runtime_s")),
                    ExitText(node) == "-" ? Text(JsonField(node, "state")) : ExitText(node),
                    feed.is_object() ? FormatCount(Count(feed, "records")) : "-"});
  }
  std::string out = "cluster " + Text(JsonField(cluster, "cluster_id")) + " " +
                    Text(JsonField(cluster, "phase")) + " after " +
                    FormatDuration(Number(cluster, "elapsed_s"));
  const json& duration = JsonField(JsonField(cluster, "rendezvous"), "duration_s");
  if (duration.is_number()) out += " (rendezvous " + FormatDuration(duration.get<double>()) + ")";
  out += "\n" + Table(rows);
  const json& feed = JsonField(cluster, "feed");
  if (feed.is_object()) {
    out += "fed " + FormatCount(Count(feed, "records")) + " records (" +
           FormatBytes(Number(feed, "bytes")) + ")";
    if (Number(feed, "partitions_total") > 0) {
      out += ", " + FormatCount(Count(feed, "partitions_done")) + " of " +
             FormatCount(Count(feed, "partitions_total")) + " partitions (x epochs)";
    }
    out += "\n";
  }
  out += LeadMetricsLine(cluster);
  return out;
}

}  // namespace drover

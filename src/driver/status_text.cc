#include "driver/status_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace drover {
namespace {

using nlohmann::json;

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
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : fallback;
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
  std::string task = Text(node.value("task", json()), "");
  return task.empty() ? "executor " + Text(node.value("executor_id", json())) : task;
}

std::string Percent(double fraction) {
  return std::to_string(static_cast<int>(std::floor(fraction * 100))) + "%";
}

std::string ExitText(const json& node) {
  const json& exit = node.value("exit", json());
  return exit.is_object() ? Text(exit.value("text", json())) : "-";
}

std::string FeedLine(const json& feed) {
  std::string line = FormatCount(static_cast<uint64_t>(Number(feed, "records"))) + " records (" +
                     FormatBytes(Number(feed, "bytes")) + "), " +
                     FormatCount(static_cast<uint64_t>(Number(feed, "rate_records_per_s"))) +
                     " records/s";
  const double total = Number(feed, "partitions_total");
  if (total > 0) {
    line += ", partitions " + FormatCount(static_cast<uint64_t>(Number(feed, "partitions_done"))) +
            "/" + FormatCount(static_cast<uint64_t>(total)) + ", epoch " +
            std::to_string(static_cast<int>(Number(feed, "epoch")) + 1) + "/" +
            std::to_string(static_cast<int>(Number(feed, "epochs")));
  }
  const json& eta = feed.value("eta_s", json());
  if (eta.is_number()) line += ", ETA " + FormatDuration(eta.get<double>());
  return line;
}

}  // namespace

std::string FormatDuration(double seconds) {
  char text[48];
  if (seconds < 0) seconds = 0;
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
  if (snapshot.phase != "running" || !snapshot.feed) return "";
  const FeedTotals& feed = *snapshot.feed;
  if (feed.records == 0 && feed.partitions_done == 0) return "";
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
  return text;
}

std::string RenderStatus(const json& cluster) {
  std::string out;
  out += "cluster " + Text(cluster.value("cluster_id", json())) + ": " +
         Text(cluster.value("phase", json())) + " on the " + Text(cluster.value("engine", json())) +
         " engine for " + FormatDuration(Number(cluster, "elapsed_s"));
  const int round = static_cast<int>(Number(cluster, "round"));
  if (round > 0) out += " (restart " + std::to_string(round) + ")";
  out += "\n";
  const json& rendezvous = cluster.value("rendezvous", json::object());
  out += "rendezvous: " + Text(rendezvous.value("registered", json())) + "/" +
         Text(rendezvous.value("expected", json())) + " nodes registered";
  const json& duration = rendezvous.value("duration_s", json());
  if (duration.is_number()) out += ", formed in " + FormatDuration(duration.get<double>());
  for (const json& waiting : rendezvous.value("waiting_for", json::array())) {
    out += "\n  waiting for " + Text(waiting);
  }
  out += "\n";
  const json& feed = cluster.value("feed", json());
  if (feed.is_object()) out += "feed: " + FeedLine(feed) + "\n";
  out += "logs: " + Text(cluster.value("log_dir", json())) + "\n\n";
  std::vector<std::vector<std::string>> rows = {{"TASK", "EXECUTOR", "HOST", "PID", "STATE",
                                                 "RESTARTS", "HEARTBEAT", "EXIT", "RECORDS",
                                                 "RECORDS/S", "GPUS"}};
  std::vector<std::string> errors;
  for (const json& node : cluster.value("nodes", json::array())) {
    const json& age = node.value("last_heartbeat_age_s", json());
    const json& node_feed = node.value("feed", json());
    rows.push_back(
        {Task(node), Text(node.value("executor_id", json())), Text(node.value("host", json())),
         Text(node.value("pid", json())), Text(node.value("state", json())),
         Text(node.value("restarts", json())),
         age.is_number() ? FormatDuration(age.get<double>()) + " ago" : "-", ExitText(node),
         node_feed.is_object() ? FormatCount(static_cast<uint64_t>(Number(node_feed, "records")))
                               : "-",
         node_feed.is_object()
             ? FormatCount(static_cast<uint64_t>(Number(node_feed, "rate_records_per_s")))
             : "-",
         Join(node.value("gpus", json::array()))});
    std::string error = Text(node.value("error", json()), "");
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
  for (const json& node : cluster.value("nodes", json::array())) {
    const json& feed = node.value("feed", json());
    rows.push_back(
        {Task(node), Text(node.value("executor_id", json())), Text(node.value("host", json())),
         FormatDuration(Number(node, "runtime_s")),
         ExitText(node) == "-" ? Text(node.value("state", json())) : ExitText(node),
         feed.is_object() ? FormatCount(static_cast<uint64_t>(Number(feed, "records"))) : "-"});
  }
  std::string out = "cluster " + Text(cluster.value("cluster_id", json())) + " " +
                    Text(cluster.value("phase", json())) + " after " +
                    FormatDuration(Number(cluster, "elapsed_s"));
  const json& duration = cluster.value("rendezvous", json::object()).value("duration_s", json());
  if (duration.is_number()) out += " (rendezvous " + FormatDuration(duration.get<double>()) + ")";
  out += "\n" + Table(rows);
  const json& feed = cluster.value("feed", json());
  if (feed.is_object()) {
    out += "fed " + FormatCount(static_cast<uint64_t>(Number(feed, "records"))) + " records (" +
           FormatBytes(Number(feed, "bytes")) + ")";
    if (Number(feed, "partitions_total") > 0) {
      out += ", " + FormatCount(static_cast<uint64_t>(Number(feed, "partitions_done"))) + " of " +
             FormatCount(static_cast<uint64_t>(Number(feed, "partitions_total"))) +
             " partitions (x epochs)";
    }
    out += "\n";
  }
  return out;
}

}  // namespace drover

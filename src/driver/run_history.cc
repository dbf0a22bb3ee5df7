#include "driver/run_history.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "driver/status_text.h"

namespace drover {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kListedCommandBytes = 60;

// The record in `path`, or in *why a few words on why not.
std::optional<json> ParseRecordFile(const fs::path& path, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = std::string("cannot read: ") + std::strerror(errno);
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  json record = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    *why = record.is_discarded() ? "not JSON" : "not a JSON object";
    return std::nullopt;
  }
  return record;
}

// Records may come from older drivers or be damaged: every field is
// optional and of any type (JsonField).
std::optional<double> NumberField(const json& object, const char* key) {
  const json& value = JsonField(object, key);
  return value.is_number() ? std::optional<double>(value.get<double>()) : std::nullopt;
}

std::string Started(const json& record) {
  std::optional<double> at = NumberField(record, "started_at");
  if (!at || !(*at > 0 && *at < 1e11)) return "-";
  const time_t seconds = static_cast<time_t>(*at);
  std::tm local{};
  if (::localtime_r(&seconds, &local) == nullptr) return "-";
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string Duration(const json& record) {
  std::optional<double> elapsed = NumberField(record, "elapsed_s");
  return elapsed ? FormatDuration(*elapsed) : "-";
}

// "succeeded", "failed (exit 1)", "interrupted (exit 130)".
std::string Outcome(const json& record) {
  const json& phase = JsonField(record, "phase");
  std::string text = phase.is_string() ? phase.get<std::string>() : "-";
  std::optional<double> code = NumberField(record, "exit_code");
  if (code && *code != 0) text += " (exit " + std::to_string(static_cast<int64_t>(*code)) + ")";
  return text;
}

std::string Nodes(const json& record) {
  const json& nodes = JsonField(record, "nodes");
  return nodes.is_array() ? std::to_string(nodes.size()) : "-";
}

std::optional<double> Records(const json& record) {
  std::optional<double> records = NumberField(JsonField(record, "feed"), "records");
  if (records && !(*records >= 0 && *records < 1.8e19)) return std::nullopt;
  return records;
}

std::string RecordsText(const json& record) {
  std::optional<double> records = Records(record);
  return records ? FormatCount(static_cast<uint64_t>(*records)) : "-";
}

// Records over the whole run, rendezvous and start included.
std::string RecordsPerSecond(const json& record) {
  std::optional<double> records = Records(record);
  std::optional<double> elapsed = NumberField(record, "elapsed_s");
  if (!records || !elapsed || !(*elapsed > 0)) return "-";
  return FormatCount(static_cast<uint64_t>(*records / *elapsed));
}

std::string Rendezvous(const json& record) {
  std::optional<double> duration = NumberField(JsonField(record, "rendezvous"), "duration_s");
  return duration ? FormatDuration(*duration) : "-";
}

std::string Command(const json& record) {
  std::string text;
  for (const json& word : JsonField(record, "command")) {
    if (!word.is_string()) continue;
    if (!text.empty()) text += ' ';
    text += word.get<std::string>();
  }
  return text.empty() ? "-" : text;
}

// Cut to at most `bytes`, never inside a UTF-8 character.
std::string Shortened(std::string text, size_t bytes) {
  if (text.size() <= bytes) return text;
  size_t cut = bytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

std::string MetricText(const json& value) {
  if (!value.is_number()) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value.get<double>());
  return text;
}

// "acc=0.97 loss=0.041", by name.
std::string Metrics(const json& record) {
  const json& metrics = JsonField(record, "metrics");
  if (!metrics.is_object() || metrics.empty()) return "-";
  std::string text;
  for (auto it = metrics.begin(); it != metrics.end(); ++it) {
    if (!text.empty()) text += ' ';
    text += it.key() + "=" + MetricText(it.value());
  }
  return text;
}

double ModifiedAt(const fs::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return static_cast<double>(info.st_mtim.tv_sec) + info.st_mtim.tv_nsec / 1e9;
}

}  // namespace

std::optional<std::string> RunDirectory(const std::string& run) {
  std::error_code ec;
  if (run.empty()) return std::nullopt;
  if (fs::is_directory(run, ec)) return run;
  if (run.find('/') != std::string::npos || run == "." || run == "..") return std::nullopt;
  const fs::path under = fs::path(kDefaultLogsDir) / run;
  if (fs::is_directory(under, ec)) return under.string();
  return std::nullopt;
}

std::string RunId(const std::string& dir) {
  std::error_code ec;
  fs::path path = fs::absolute(dir, ec).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  return path.filename().string();
}

Result<json> ReadRunRecord(const std::string& dir) {
  const fs::path path = fs::path(dir) / "run.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(dir + " holds no run.json");
  std::string why;
  std::optional<json> record = ParseRecordFile(path, &why);
  if (!record) return Status::InvalidArgument(path.string() + " is not a run record (" + why + ")");
  return std::move(*record);
}

Result<std::vector<PastRun>> ListPastRuns(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound("no directory " + dir + " (runs are listed from DIR/*/run.json)");
  }
  std::vector<PastRun> runs;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const fs::path path = entry.path() / "run.json";
    if (!entry.is_directory(ec) || !fs::exists(path, ec)) continue;
    PastRun run;
    run.id = entry.path().filename().string();
    run.record = ParseRecordFile(path, &run.unreadable);
    std::optional<double> started =
        run.record ? NumberField(*run.record, "started_at") : std::nullopt;
    run.started_at = started ? *started : ModifiedAt(path);
    runs.push_back(std::move(run));
  }
  if (ec) return Status::IoError("cannot list " + dir + ": " + ec.message());
  std::sort(runs.begin(), runs.end(), [](const PastRun& a, const PastRun& b) {
    return a.started_at != b.started_at ? a.started_at > b.started_at : a.id > b.id;
  });
  return runs;
}

std::string RenderRunList(const std::vector<PastRun>& runs) {
  std::vector<std::vector<std::string>> rows = {
      {"RUN", "STARTED", "DURATION", "RESULT", "NODES", "RECORDS", "METRICS", "COMMAND"}};
  for (const PastRun& run : runs) {
    if (!run.record) {
      rows.push_back(
          {run.id, "-", "-", "unreadable", "-", "-", "-", "run.json: " + run.unreadable});
      continue;
    }
    const json& record = *run.record;
    rows.push_back({run.id, Started(record), Duration(record), Outcome(record), Nodes(record),
                    RecordsText(record), Metrics(record),
                    Shortened(Command(record), kListedCommandBytes)});
  }
  return FormatTable(rows);
}

std::string RenderComparison(const std::string& name_a, const json& a, const std::string& name_b,
                             const json& b) {
  std::vector<std::vector<std::string>> rows = {{"RUN", name_a, name_b}};
  auto row = [&rows, &a, &b](const char* label, std::string (*show)(const json&)) {
    rows.push_back({label, show(a), show(b)});
  };
  row("command", Command);
  row("started", Started);
  row("duration", Duration);
  row("result", Outcome);
  row("nodes", Nodes);
  row("records", RecordsText);
  row("records/s", RecordsPerSecond);
  row("rendezvous", Rendezvous);
  std::set<std::string> names;
  for (const json* record : {&a, &b}) {
    const json& metrics = JsonField(*record, "metrics");
    if (!metrics.is_object()) continue;
    for (auto it = metrics.begin(); it != metrics.end(); ++it) names.insert(it.key());
  }
  if (names.empty()) rows.push_back({"metrics", "-", "-"});
  for (const std::string& name : names) {
    auto value = [&name](const json& record) {
      const json& metrics = JsonField(record, "metrics");
      return MetricText(metrics.is_object() && metrics.contains(name) ? metrics[name] : json());
    };
    rows.push_back({"metric " + name, value(a), value(b)});
  }
  return FormatTable(rows);
}

}  // namespace drover

// Past runs, from the run.json each `drover run` leaves in its log directory
// (docs/status.md, "History and comparing runs"): finding a run's
// directory, reading its record, the rows of `drover status --list` and two
// runs side by side. A record is the /api/cluster JSON (run_status.h) with a
// top-level "metrics" object (name -> number, the chief's last values) when
// the program reported any; a live run's /api/cluster compares the same way.
// Reads files; otherwise pure functions. Thread-safe.

#ifndef DROVER_DRIVER_RUN_HISTORY_H_
#define DROVER_DRIVER_RUN_HISTORY_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"

namespace drover {

// Where `drover run` puts a run's logs unless told otherwise.
inline constexpr const char* kDefaultLogsDir = "drover-logs";

// The log directory `run` names: `run` itself when it is a directory, else
// ./drover-logs/<run> when `run` is a bare run id with such a directory;
// nullopt otherwise (an address, or nothing there).
std::optional<std::string> RunDirectory(const std::string& run);

// A run's id: the name of its log directory `dir`.
std::string RunId(const std::string& dir);

// <dir>/run.json as JSON. kNotFound when there is none, kInvalidArgument
// when it is not a JSON object.
Result<nlohmann::json> ReadRunRecord(const std::string& dir);

struct PastRun {
  std::string id;  // the log directory's name
  std::optional<nlohmann::json> record;
  std::string unreadable;  // why `record` is missing
  double started_at = 0;   // the record's, else run.json's modification time (Unix seconds)
};

// The runs in `dir`: every subdirectory with a run.json, newest first.
// kNotFound when `dir` is not a directory.
Result<std::vector<PastRun>> ListPastRuns(const std::string& dir);

// `drover status --list`: a row per run (id, start, duration, result,
// nodes, records, last metrics, command).
std::string RenderRunList(const std::vector<PastRun>& runs);

// Two runs side by side: command, start, duration, result, nodes, records,
// records/s, rendezvous, and every metric of either.
std::string RenderComparison(const std::string& name_a, const nlohmann::json& a,
                             const std::string& name_b, const nlohmann::json& b);

}  // namespace drover

#endif  // DROVER_DRIVER_RUN_HISTORY_H_

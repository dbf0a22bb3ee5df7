// The run in words, for terminals: the progress line while it runs, the
// `drover status` table, and the summary printed when it ends. The table
// and the summary read the /api/cluster JSON (run_status.h), so they show a
// remote driver's run, or a finished run's record, the same way.
// Pure functions; thread-safe.

#ifndef DROVER_DRIVER_STATUS_TEXT_H_
#define DROVER_DRIVER_STATUS_TEXT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver/run_status.h"

namespace drover {

// "4/8 nodes registered, waiting for worker:3 (executor 4) on host-b";
// "feeding epoch 2/40 (45%): 12,345 records, 2,100 records/s, 1.2 MB/s, epoch
// ETA 5 s, ETA 3 m 10 s"; "" when there is nothing to say.
std::string ProgressText(const RunSnapshot& snapshot);

// `drover status`: the run's header, its feed, and a table of its nodes.
std::string RenderStatus(const nlohmann::json& cluster);
// The end of a run: per node its role, runtime, exit and records consumed.
std::string RenderSummary(const nlohmann::json& cluster);

// "850 ms", "12.5 s", "3 m 10 s", "2 h 5 m".
std::string FormatDuration(double seconds);
// "12,345".
std::string FormatCount(uint64_t count);
// "980 B", "1.2 MB", "3.4 GB" (powers of 1000).
std::string FormatBytes(double bytes);
// The member `key` of `object`; null when `object` is no object or lacks it
// (the JSON may come from another driver, an older one, or a damaged
// run.json).
const nlohmann::json& JsonField(const nlohmann::json& object, const char* key);
// Rows laid out in columns two spaces apart, one line each.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace drover

#endif  // DROVER_DRIVER_STATUS_TEXT_H_

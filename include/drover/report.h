// Report: a node's program tells the run how its training goes (a loss, an
// accuracy, its step), for the status page's charts, the progress line,
// /metrics, run.json and the straggler check (docs/status.md, "Metrics").
//
//   drover::Report(step, {{"loss", loss}, {"lr", lr}});
//   drover::Report(std::nullopt, {{"accuracy", accuracy}});
//
// Cheap enough for every step: a call stores the values in this process (the
// last value of each name wins) and a thread sends what changed to the
// node's agent every 250 ms, one datagram, never blocking the caller on I/O.
// The agent passes each name's last value to the driver with its heartbeats.
// Outside drover (no DROVER_REPORT_SOCKET in the environment) a call does
// nothing, so the same program runs alone. Thread-safe; a forked child (a
// data loader's worker) reports on its own, through the same agent.

#ifndef DROVER_REPORT_H_
#define DROVER_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/status.h"

namespace drover {

// One metric's last value, and the step it was reported at.
struct MetricValue {
  std::string name;
  double value = 0;
  std::optional<int64_t> step;
  friend bool operator==(const MetricValue&, const MetricValue&) = default;
};

// At most this many names per program; more are refused.
inline constexpr size_t kMaxMetrics = 64;
// Names: 1 to 64 characters of [A-Za-z0-9_.:/-].
inline constexpr size_t kMaxMetricNameLength = 64;
bool ValidMetricName(const std::string& name);

// Records `metrics` at `step` (nullopt: no step; the chart then uses time).
// InvalidArgument for a bad name or one past kMaxMetrics (nothing of this
// call is recorded then). Values may be NaN or infinite (a diverged loss
// is worth seeing).
Status Report(std::optional<int64_t> step,
              const std::vector<std::pair<std::string, double>>& metrics);
// Sends what is held now, without waiting for the next 250 ms tick (before a
// long pause; exit flushes by itself).
void FlushReports();
// Whether reports go anywhere: the program runs under a drover agent.
bool ReportsEnabled();

}  // namespace drover

#endif  // DROVER_REPORT_H_

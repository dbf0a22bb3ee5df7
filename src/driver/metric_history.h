// MetricHistory: the points of every reported metric, per task, for the
// status page's charts (/api/metrics) and run.json. The driver adds each
// node's latest values as its heartbeats bring them; a point is kept only
// when its value or step changed. Each series holds at most 2 x max_points:
// when full, every other point goes (the curve's shape over the whole run
// stays, at half the resolution; breaks between rounds stay). Thread-compatible;
// RunStatus guards it.

#ifndef DROVER_DRIVER_METRIC_HISTORY_H_
#define DROVER_DRIVER_METRIC_HISTORY_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "drover/report.h"

namespace drover {

class MetricHistory {
 public:
  explicit MetricHistory(size_t max_points = 300) : max_points_(max_points) {}

  // `t`: seconds since the run started.
  void Add(const std::string& task, double t, const std::vector<MetricValue>& metrics);
  // A new round: every series breaks here (its steps start again), so a
  // chart does not join the rounds' lines.
  void Break();
  // {"loss": {"worker:0": [[t, step or null, value or null], ..., null, ...]}}:
  // a null entry is a break.
  nlohmann::json ToJson() const;
  bool empty() const { return series_.empty(); }

 private:
  struct Point {
    double t;
    std::optional<int64_t> step;
    double value;
    bool gap = false;  // a break, not a point
  };
  const size_t max_points_;
  // metric -> task -> points, oldest first
  std::map<std::string, std::map<std::string, std::vector<Point>>> series_;
};

}  // namespace drover

#endif  // DROVER_DRIVER_METRIC_HISTORY_H_

#include "driver/metric_history.h"

#include <cmath>

namespace drover {
namespace {

bool SameValue(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

}  // namespace

void MetricHistory::Add(const std::string& task, double t,
                        const std::vector<MetricValue>& metrics) {
  for (const MetricValue& metric : metrics) {
    std::vector<Point>& points = series_[metric.name][task];
    if (!points.empty() && !points.back().gap && points.back().step == metric.step &&
        SameValue(points.back().value, metric.value)) {
      continue;
    }
    points.push_back({t, metric.step, metric.value});
    if (points.size() < 2 * max_points_) continue;
    std::vector<Point> halved;
    halved.reserve(max_points_ + 1);
    for (size_t i = 0; i < points.size(); ++i) {
      // Every other point, every break, and the latest point stay.
      if (i % 2 == 0 || points[i].gap || i + 1 == points.size()) halved.push_back(points[i]);
    }
    points = std::move(halved);
  }
}

void MetricHistory::Break() {
  for (auto& [name, tasks] : series_) {
    for (auto& [task, points] : tasks) {
      if (!points.empty() && !points.back().gap) points.push_back({points.back().t, {}, 0, true});
    }
  }
}

nlohmann::json MetricHistory::ToJson() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, tasks] : series_) {
    nlohmann::json by_task = nlohmann::json::object();
    for (const auto& [task, points] : tasks) {
      nlohmann::json list = nlohmann::json::array();
      for (const Point& point : points) {
        if (point.gap) {
          list.push_back(nullptr);
          continue;
        }
        list.push_back(
            {point.t, point.step ? nlohmann::json(*point.step) : nlohmann::json(),
             std::isfinite(point.value) ? nlohmann::json(point.value) : nlohmann::json()});
      }
      by_task[task] = std::move(list);
    }
    out[name] = std::move(by_task);
  }
  return out;
}

}  // namespace drover

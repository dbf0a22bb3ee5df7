#include "driver/straggler_watch.h"

#include <algorithm>
#include <cmath>

namespace drover {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

}  // namespace

std::vector<Straggler> StragglerWatch::Update(double t, const std::vector<NodeRate>& rates,
                                              const std::string& unit) {
  std::vector<Straggler> stragglers;
  std::vector<double> values;
  for (const NodeRate& node : rates) values.push_back(node.rate);
  const double median = values.size() >= 2 ? Median(values) : 0;
  std::map<std::string, double> still_slow;
  for (const NodeRate& node : rates) {
    if (median <= 0 || after_s_ <= 0 || node.rate >= ratio_ * median) continue;
    auto since = slow_since_.find(node.executor_id);
    const double first = since == slow_since_.end() ? t : since->second;
    still_slow[node.executor_id] = first;
    if (t - first < after_s_) continue;
    const double fraction = node.rate / median;
    Straggler straggler{node.executor_id, fraction, ""};
    straggler.text = node.task + (node.host.empty() ? "" : " on " + node.host) + " at " +
                     std::to_string(static_cast<int>(std::lround(fraction * 100))) +
                     "% of the median " + unit + " rate";
    stragglers.push_back(std::move(straggler));
  }
  slow_since_ = std::move(still_slow);
  return stragglers;
}

}  // namespace drover

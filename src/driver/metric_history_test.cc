#include "driver/metric_history.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace drover {
namespace {

TEST(MetricHistoryTest, KeepsAPointPerChangeForEachTask) {
  MetricHistory history;
  history.Add("worker:0", 1.0, {{"loss", 0.9, 10}, {"acc", 0.5, std::nullopt}});
  history.Add("worker:0", 2.0, {{"loss", 0.9, 10}, {"acc", 0.6, std::nullopt}});  // loss unchanged
  history.Add("worker:1", 2.0, {{"loss", 0.8, 10}});
  history.Add("worker:0", 3.0, {{"loss", 0.7, 20}});
  nlohmann::json json = history.ToJson();
  EXPECT_EQ(json["loss"]["worker:0"], nlohmann::json::parse("[[1.0, 10, 0.9], [3.0, 20, 0.7]]"));
  EXPECT_EQ(json["loss"]["worker:1"], nlohmann::json::parse("[[2.0, 10, 0.8]]"));
  EXPECT_EQ(json["acc"]["worker:0"], nlohmann::json::parse("[[1.0, null, 0.5], [2.0, null, 0.6]]"));
}

TEST(MetricHistoryTest, AFullSeriesKeepsItsWholeSpanAtHalfTheResolution) {
  MetricHistory history(10);
  for (int step = 0; step < 1000; ++step) {
    history.Add("worker:0", step, {{"loss", 1.0 / (step + 1), step}});
  }
  nlohmann::json points = history.ToJson()["loss"]["worker:0"];
  EXPECT_LT(points.size(), 20u);
  EXPECT_GE(points.size(), 10u);
  EXPECT_EQ(points.front()[1], 0);
  EXPECT_EQ(points.back()[1], 999);  // the latest point is never dropped
  for (size_t i = 1; i < points.size(); ++i) EXPECT_LT(points[i - 1][1], points[i][1]);
}

TEST(MetricHistoryTest, ANewRoundBreaksEverySeriesOnce) {
  MetricHistory history;
  history.Break();  // nothing yet: nothing to break
  history.Add("worker:0", 1.0, {{"loss", 0.9, 10}});
  history.Add("worker:0", 2.0, {{"loss", 0.5, 20}});
  history.Break();
  history.Break();
  history.Add("worker:0", 3.0, {{"loss", 0.5, 20}});  // the same point, after a break: kept
  history.Add("worker:0", 4.0, {{"loss", 0.4, 5}});
  EXPECT_EQ(history.ToJson()["loss"]["worker:0"],
            nlohmann::json::parse(
                "[[1.0, 10, 0.9], [2.0, 20, 0.5], null, [3.0, 20, 0.5], [4.0, 5, 0.4]]"));
}

TEST(MetricHistoryTest, HalvingKeepsTheBreaks) {
  MetricHistory history(4);
  for (int round = 0; round < 3; ++round) {
    for (int step = 0; step < 5; ++step)
      history.Add("w", round * 10 + step, {{"m", 1.0 * step, step}});
    history.Break();
  }
  nlohmann::json points = history.ToJson()["m"]["w"];
  EXPECT_EQ(std::count(points.begin(), points.end(), nullptr), 3);
}

TEST(MetricHistoryTest, ANonFiniteValueIsNullInJson) {
  MetricHistory history;
  history.Add("worker:0", 1.0, {{"loss", std::numeric_limits<double>::quiet_NaN(), 1}});
  history.Add("worker:0", 2.0, {{"loss", std::numeric_limits<double>::quiet_NaN(), 1}});
  nlohmann::json points = history.ToJson()["loss"]["worker:0"];
  ASSERT_EQ(points.size(), 1u);  // NaN twice is no change
  EXPECT_TRUE(points[0][2].is_null());
}

}  // namespace
}  // namespace drover

#include "driver/straggler_watch.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

std::vector<NodeRate> Rates(double a, double b, double c) {
  return {{"0", "worker:0", "h1", a}, {"1", "worker:1", "h1", b}, {"2", "worker:2", "h2", c}};
}

TEST(StragglerWatchTest, ASlowNodeIsNamedOnceItStayedSlowLongEnough) {
  StragglerWatch watch(0.7, 30);
  EXPECT_TRUE(watch.Update(0, Rates(10, 10, 4.1), "step").empty());
  EXPECT_TRUE(watch.Update(29, Rates(10, 10, 4.1), "step").empty());
  std::vector<Straggler> slow = watch.Update(30, Rates(10, 10, 4.1), "step");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].executor_id, "2");
  EXPECT_EQ(slow[0].text, "worker:2 on h2 at 41% of the median step rate");
  EXPECT_NEAR(slow[0].fraction, 0.41, 1e-9);
}

TEST(StragglerWatchTest, CatchingUpClearsTheClock) {
  StragglerWatch watch(0.7, 30);
  watch.Update(0, Rates(10, 10, 4), "feed");
  watch.Update(20, Rates(10, 10, 9), "feed");  // caught up
  EXPECT_TRUE(watch.Update(40, Rates(10, 10, 4), "feed").empty());
  EXPECT_EQ(watch.Update(70, Rates(10, 10, 4), "feed").size(), 1u);
}

TEST(StragglerWatchTest, AStalledNodeIsAStraggler) {
  StragglerWatch watch(0.7, 1);
  watch.Update(0, Rates(10, 10, 0), "step");
  std::vector<Straggler> slow = watch.Update(1, Rates(10, 10, 0), "step");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].text, "worker:2 on h2 at 0% of the median step rate");
}

TEST(StragglerWatchTest, NoMedianNoStragglers) {
  StragglerWatch watch(0.7, 0.001);
  std::vector<NodeRate> one = {{"0", "worker:0", "h1", 1}};
  watch.Update(0, one, "step");
  EXPECT_TRUE(watch.Update(10, one, "step").empty());
  watch.Update(0, Rates(0, 0, 0), "step");  // nobody moves: nobody is behind
  EXPECT_TRUE(watch.Update(10, Rates(0, 0, 0), "step").empty());
  StragglerWatch off(0.7, 0);  // after 0: never flag
  off.Update(0, Rates(10, 10, 1), "step");
  EXPECT_TRUE(off.Update(100, Rates(10, 10, 1), "step").empty());
}

}  // namespace
}  // namespace drover

#include "os/duration_text.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>

namespace drover::os {
namespace {

using std::chrono::milliseconds;

TEST(SecondsValueTest, WholeSecondsHaveNoDecimals) {
  EXPECT_EQ(SecondsValue(milliseconds(0)), "0");
  EXPECT_EQ(SecondsValue(milliseconds(600'000)), "600");
  EXPECT_EQ(SecondsValue(std::chrono::hours(2)), "7200");
}

TEST(SecondsValueTest, FractionsAreExactWithoutTrailingZeros) {
  EXPECT_EQ(SecondsValue(milliseconds(250)), "0.25");
  EXPECT_EQ(SecondsValue(milliseconds(1'500)), "1.5");
  EXPECT_EQ(SecondsValue(milliseconds(7)), "0.007");
  // Seven significant digits: a flag must carry them all.
  EXPECT_EQ(SecondsValue(milliseconds(1'234'567)), "1234.567");
}

TEST(SecondsValueTest, NegativeDurationsKeepTheirSign) {
  EXPECT_EQ(SecondsValue(milliseconds(-1'500)), "-1.5");
  EXPECT_EQ(SecondsValue(milliseconds(-250)), "-0.25");
  EXPECT_EQ(SecondsValue(milliseconds(std::numeric_limits<int64_t>::min())),
            "-9223372036854775.808");
}

TEST(SecondsTextTest, AddsTheUnit) {
  EXPECT_EQ(SecondsText(milliseconds(500)), "0.5 s");
  EXPECT_EQ(SecondsText(milliseconds(600'000)), "600 s");
}

}  // namespace
}  // namespace drover::os

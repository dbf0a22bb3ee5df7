#include "report/report_datagram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "testing/status_matchers.h"

namespace drover::report {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ReportDatagramTest, MetricsSurviveARoundTrip) {
  std::vector<MetricValue> metrics = {
      {"loss", 0.041234567890123, 1200}, {"val/acc", 0.97, std::nullopt}, {"lr", 1e-300, -3}};
  ASSERT_OK_AND_ASSIGN(std::vector<MetricValue> decoded, DecodeMetrics(EncodeMetrics(metrics)));
  EXPECT_EQ(decoded, metrics);
}

TEST(ReportDatagramTest, NanAndInfinityArePassedOn) {
  std::vector<MetricValue> metrics = {{"loss", std::numeric_limits<double>::quiet_NaN(), 7},
                                      {"grad", -std::numeric_limits<double>::infinity(), 7}};
  ASSERT_OK_AND_ASSIGN(std::vector<MetricValue> decoded, DecodeMetrics(EncodeMetrics(metrics)));
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_TRUE(std::isnan(decoded[0].value));
  EXPECT_TRUE(std::isinf(decoded[1].value) && decoded[1].value < 0);
}

TEST(ReportDatagramTest, BadLinesAreNamed) {
  EXPECT_THAT(DecodeMetrics("loss 1\nacc\n"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("line 2: no value")));
  EXPECT_THAT(DecodeMetrics("lo ss 1\n"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("line 1: bad value")));
  EXPECT_THAT(DecodeMetrics("loss 1x\n"), StatusIs(Status::Code::kInvalidArgument, ::testing::_));
  EXPECT_THAT(DecodeMetrics("loss 1 2.5\n"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bad step")));
  EXPECT_THAT(DecodeMetrics("loss 1 \n"), StatusIs(Status::Code::kInvalidArgument, ::testing::_));
  EXPECT_THAT(DecodeMetrics("loss 1"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("no newline")));
  EXPECT_THAT(DecodeMetrics("l\xc3\xa4 1\n"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bad metric name")));
  EXPECT_THAT(DecodeMetrics(std::string(kMaxDatagramBytes + 1, 'a')),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bytes")));
}

TEST(ReportDatagramTest, AtMostMaxMetrics) {
  std::vector<MetricValue> metrics;
  for (size_t i = 0; i <= kMaxMetrics; ++i) metrics.push_back({"m" + std::to_string(i), 1.0, {}});
  EXPECT_THAT(DecodeMetrics(EncodeMetrics(metrics)),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("more than 64")));
  metrics.pop_back();
  EXPECT_OK(DecodeMetrics(EncodeMetrics(metrics)));
}

TEST(ReportDatagramTest, NamesAreChecked) {
  EXPECT_TRUE(ValidMetricName("train/loss:ema-0.9_x"));
  EXPECT_FALSE(ValidMetricName(""));
  EXPECT_FALSE(ValidMetricName("a b"));
  EXPECT_FALSE(ValidMetricName("a\"b"));
  EXPECT_FALSE(ValidMetricName(std::string(kMaxMetricNameLength + 1, 'a')));
  EXPECT_TRUE(ValidMetricName(std::string(kMaxMetricNameLength, 'a')));
}

TEST(ReportTest, OutsideDroverAReportDoesNothingButChecksItsNames) {
  EXPECT_FALSE(ReportsEnabled());
  EXPECT_OK(Report(3, {{"loss", 0.5}}));
  EXPECT_THAT(Report(3, {{"bad name", 0.5}}),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("metric name 'bad name'")));
  FlushReports();
}

}  // namespace
}  // namespace drover::report

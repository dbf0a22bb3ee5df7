// GoogleTest helpers for Status and Result<T>.
//
//   EXPECT_OK(spec.AddJob("worker", {"a:1"}));
//   ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromJson(text));
//   EXPECT_THAT(result.status(), StatusIs(Status::Code::kNotFound, HasSubstr("worker")));

#ifndef DROVER_TESTING_STATUS_MATCHERS_H_
#define DROVER_TESTING_STATUS_MATCHERS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "drover/status.h"

namespace drover::testing {

inline const Status& GetStatus(const Status& status) {
  return status;
}
template <typename T>
const Status& GetStatus(const Result<T>& result) {
  return result.status();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const Status& status = ::drover::testing::GetStatus(arg);
  if (status.code() != code) {
    *result_listener << "status is " << status.ToString();
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher, status.message(), result_listener);
}

}  // namespace drover::testing

#define EXPECT_OK(expr) EXPECT_EQ(::drover::testing::GetStatus(expr).ToString(), "OK")
#define ASSERT_OK(expr) ASSERT_EQ(::drover::testing::GetStatus(expr).ToString(), "OK")

#define DROVER_TESTING_CONCAT_INNER_(a, b) a##b
#define DROVER_TESTING_CONCAT_(a, b) DROVER_TESTING_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(DROVER_TESTING_CONCAT_(drover_result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_OK(tmp);                                  \
  lhs = std::move(tmp).value()

#endif  // DROVER_TESTING_STATUS_MATCHERS_H_

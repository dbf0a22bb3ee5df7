#include "drover/status.h"

#include <gtest/gtest.h>

#include <memory>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

TEST(StatusTest, DefaultIsOk) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_EQ(status, Status::Ok());
}

TEST(StatusTest, OkCodeDropsMessage) {
  Status status(Status::Code::kOk, "ignored");
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.message(), "");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status status = Status::NotFound("No such job in cluster: 'ps'");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Status::Code::kNotFound);
  EXPECT_EQ(status.ToString(), "NotFound: No such job in cluster: 'ps'");
}

TEST(StatusTest, WithContextPrefixesMessage) {
  Status status = Status::InvalidArgument("bad port").WithContext("TF_CONFIG");
  EXPECT_THAT(status, StatusIs(Status::Code::kInvalidArgument, "TF_CONFIG: bad port"));
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(StatusTest, EveryCodeHasAName) {
  for (auto code :
       {Status::Code::kInvalidArgument, Status::Code::kNotFound, Status::Code::kWrongType,
        Status::Code::kDeadlineExceeded, Status::Code::kUnavailable, Status::Code::kAlreadyExists,
        Status::Code::kPermissionDenied, Status::Code::kIoError, Status::Code::kInternal}) {
    EXPECT_NE(CodeName(code), "Unknown");
    EXPECT_NE(CodeName(code), "OK");
  }
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  DROVER_ASSIGN_OR_RETURN(int half, Half(x));
  DROVER_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int x) {
  DROVER_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> good = Half(8);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 4);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad = Half(3);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad, StatusIs(Status::Code::kInvalidArgument, HasSubstr("3 is odd")));
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(ResultTest, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_THAT(Quarter(6), StatusIs(Status::Code::kInvalidArgument, HasSubstr("3 is odd")));
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(ResultTest, MovesOutMoveOnlyValues) {
  Result<std::unique_ptr<int>> result = std::make_unique<int>(7);
  std::unique_ptr<int> owned = std::move(result).value();
  EXPECT_EQ(*owned, 7);
}

}  // namespace
}  // namespace drover

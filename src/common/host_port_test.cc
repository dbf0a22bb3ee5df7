#include "drover/host_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SplitHostPortTest, AcceptsNamesIpv4AndBracketedIpv6) {
  ASSERT_OK_AND_ASSIGN(auto a, SplitHostPort("worker0.example.com:2222"));
  EXPECT_EQ(a, std::make_pair(std::string("worker0.example.com"), 2222));
  ASSERT_OK_AND_ASSIGN(auto b, SplitHostPort("[fe80::1]:80"));
  EXPECT_EQ(b, std::make_pair(std::string("fe80::1"), 80));
}

TEST(SplitHostPortTest, RejectsMissingOrBadPorts) {
  for (const char* bad :
       {"host", "host:", ":80", "host:0", "host:65536", "host:8x", "[::1]80", "[::1"}) {
    EXPECT_THAT(SplitHostPort(bad), StatusIs(Status::Code::kInvalidArgument, HasSubstr(bad)))
        << bad;
  }
}

TEST(JoinHostPortTest, BracketsBareIpv6Only) {
  EXPECT_EQ(JoinHostPort("worker0", 2222), "worker0:2222");
  EXPECT_EQ(JoinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(JoinHostPort("::1", 80), "[::1]:80");
  EXPECT_EQ(JoinHostPort("[::1]", 80), "[::1]:80");
}

TEST(JoinHostPortTest, RoundTripsThroughSplit) {
  for (const char* host : {"a", "1.2.3.4", "fe80::1"}) {
    ASSERT_OK_AND_ASSIGN(auto split, SplitHostPort(JoinHostPort(host, 65535)));
    EXPECT_EQ(split, std::make_pair(std::string(host), 65535));
  }
}

}  // namespace
}  // namespace drover

#include "wire/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace drover::wire {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

TEST(AuthTest, MacsAreHmacSha256OfLabelAndNonces) {
  Token token{};
  for (size_t i = 0; i < token.size(); ++i) token[i] = static_cast<unsigned char>(i);
  std::string client = ClientMac(token, "server-nonce", "client-nonce");
  EXPECT_EQ(client.size(), kMacBytes);
  EXPECT_EQ(client, ClientMac(token, "server-nonce", "client-nonce"));
  // The two directions use different labels: a reflected client mac is no server proof.
  EXPECT_NE(client, ServerMac(token, "server-nonce", "client-nonce"));
  EXPECT_NE(client, ClientMac(token, "server-nonce", "other-nonce"));
  Token other = token;
  other[0] ^= 1;
  EXPECT_NE(client, ClientMac(other, "server-nonce", "client-nonce"));
}

TEST(AuthTest, KnownAnswer) {
  // HMAC-SHA256(key = 32 zero bytes, "drover-auth-v1" "s" "c"), computed with
  // Python's hmac module, pins the byte layout of the handshake.
  Token zero{};
  std::string mac = ClientMac(zero, "s", "c");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : mac) {
    hex += kHex[c >> 4];
    hex += kHex[c & 0xf];
  }
  EXPECT_EQ(hex, "2b70b292fc513dda2d500a98b1b6d5f70a42f58659b2dc81eba9450ce2950428");
}

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
}

TEST(AuthTest, NoncesAreFresh) {
  ASSERT_OK_AND_ASSIGN(std::string a, RandomNonce());
  ASSERT_OK_AND_ASSIGN(std::string b, RandomNonce());
  EXPECT_EQ(a.size(), kNonceBytes);
  EXPECT_NE(a, b);
}

TEST(AuthTest, TokenHexRoundTripAndErrors) {
  ASSERT_OK_AND_ASSIGN(Token token, GenerateToken());
  ASSERT_OK_AND_ASSIGN(Token parsed, ParseToken(TokenToHex(token) + "\n"));
  EXPECT_EQ(parsed, token);
  EXPECT_THAT(ParseToken("00"), StatusIs(Status::Code::kInvalidArgument, HasSubstr("64 hex")));
}

}  // namespace
}  // namespace drover::wire

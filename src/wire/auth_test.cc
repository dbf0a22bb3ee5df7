#include "wire/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

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

TEST(AuthTest, ACredentialProofIsNoHandshakeMacAndIsBoundToItsNonces) {
  Token key{};
  key[0] = 1;
  std::string proof = ClaimMac(key, "server-nonce", "client-nonce");
  EXPECT_EQ(proof.size(), kMacBytes);
  // Its own label: no handshake proof (either way) doubles as a claim.
  EXPECT_NE(proof, ClientMac(key, "server-nonce", "client-nonce"));
  EXPECT_NE(proof, ServerMac(key, "server-nonce", "client-nonce"));
  EXPECT_NE(proof, ClaimMac(key, "other-nonce", "client-nonce"));
  EXPECT_NE(proof, ClaimMac(key, "server-nonce", "other-nonce"));
  // HMAC-SHA256(32 zero bytes, "drover-claim-v1" "s" "c"), from Python's hmac.
  EXPECT_EQ(HexEncode(ClaimMac(Token{}, "s", "c")),
            "cc90155d2fc4622d005912a510469affc27bda6f01178a0e6cd47255be1ebc7d");
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

std::string Bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(AuthTest, HkdfMatchesRfc5869TestCase1) {
  std::string ikm(22, '\x0b');
  std::string salt = Bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  std::string info = Bytes({0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9});
  ASSERT_OK_AND_ASSIGN(std::string okm, Hkdf(ikm, salt, info, 42));
  EXPECT_EQ(HexEncode(okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
}

TEST(AuthTest, PurposeKeysDifferFromTheTokenAndFromEachOther) {
  ASSERT_OK_AND_ASSIGN(Token token, GenerateToken());
  ASSERT_OK_AND_ASSIGN(Token node0, DeriveNodeKey(token, "0"));
  ASSERT_OK_AND_ASSIGN(Token node1, DeriveNodeKey(token, "1"));
  ASSERT_OK_AND_ASSIGN(Token status, DeriveStatusKey(token));
  std::string nonce_a(kNonceBytes, 'a');
  std::string nonce_b(kNonceBytes, 'b');
  ASSERT_OK_AND_ASSIGN(Token session, DeriveSessionKey(node0, nonce_a, nonce_b));
  ASSERT_OK_AND_ASSIGN(Token swapped, DeriveSessionKey(node0, nonce_b, nonce_a));
  std::set<Token> keys = {token, node0, node1, status, session, swapped};
  EXPECT_EQ(keys.size(), 6u);
  // Deterministic: the agent derives the same node key the server does.
  ASSERT_OK_AND_ASSIGN(Token again, DeriveNodeKey(token, "0"));
  EXPECT_EQ(again, node0);
  // The label and the id are separated: "drover-node-v1" 0 "1" is not a
  // prefix game with another id.
  ASSERT_OK_AND_ASSIGN(Token ten, DeriveNodeKey(token, "10"));
  EXPECT_NE(ten, node1);
}

TEST(AuthTest, NodeKeyKnownAnswer) {
  // HKDF-SHA256(ikm = 32 zero bytes, no salt, info = "drover-node-v1" 0x00 "3"),
  // computed with Python's hmac module, pins the derivation for other
  // implementations.
  Token zero{};
  ASSERT_OK_AND_ASSIGN(Token key, DeriveNodeKey(zero, "3"));
  EXPECT_EQ(TokenToHex(key), "e4941e4b615f9d82f5418f1a09a22f53af11d47f56e7f3d2474ec73de48b290b");
}

TEST(AuthTest, CredentialTextRoundTrips) {
  ASSERT_OK_AND_ASSIGN(Token token, GenerateToken());
  CredentialText cluster{CredentialKind::kCluster, "", token};
  EXPECT_EQ(FormatCredential(cluster), TokenToHex(token));
  ASSERT_OK_AND_ASSIGN(Token node_key, DeriveNodeKey(token, "7"));
  CredentialText node{CredentialKind::kNode, "7", node_key};
  EXPECT_EQ(FormatCredential(node), "drover-node-v1 7 " + TokenToHex(node_key));
  CredentialText status{CredentialKind::kStatus, "", token};
  EXPECT_EQ(FormatCredential(status), "drover-status-v1-" + TokenToHex(token));
  for (const CredentialText& original : {cluster, node, status}) {
    ASSERT_OK_AND_ASSIGN(CredentialText parsed, ParseCredential(FormatCredential(original) + "\n"));
    EXPECT_EQ(parsed.kind, original.kind);
    EXPECT_EQ(parsed.executor_id, original.executor_id);
    EXPECT_EQ(parsed.key, original.key);
  }
}

TEST(AuthTest, BadCredentialTextSaysWhatWasExpected) {
  EXPECT_THAT(ParseCredential("drover-node-v1 7 00"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("drover-node-v1 ID KEY")));
  EXPECT_THAT(ParseCredential("drover-status-v1-zz"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("drover-status-v1-KEY")));
  EXPECT_THAT(ParseCredential("hello"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("a cluster token")));
  EXPECT_THAT(ValidateCredentialId(""),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("got 0")));
  EXPECT_THAT(ValidateCredentialId(std::string(kMaxCredentialIdBytes + 1, 'x')),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("1 to 256 bytes")));
  EXPECT_THAT(ValidateCredentialId("a\x1b[31m"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("a\\x1b[31m")));
  EXPECT_OK(ValidateCredentialId("executor-12"));
}

TEST(AuthTest, TokenFileRefusesOtherCredentials) {
  std::string dir = ::testing::TempDir();
  std::string path = dir + "/auth_test_node.cred";
  ASSERT_OK_AND_ASSIGN(Token token, GenerateToken());
  ASSERT_OK(WriteSecretFile(path, FormatCredential({CredentialKind::kNode, "4", token})));
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_THAT(ReadTokenFile(path),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("node credential of executor 4")));
  ASSERT_OK_AND_ASSIGN(CredentialText read, ReadCredentialFile(path));
  EXPECT_EQ(read.kind, CredentialKind::kNode);
  EXPECT_EQ(read.executor_id, "4");
  ASSERT_OK(WriteTokenFile(path, token));
  ASSERT_OK_AND_ASSIGN(Token back, ReadTokenFile(path));
  EXPECT_EQ(back, token);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace drover::wire

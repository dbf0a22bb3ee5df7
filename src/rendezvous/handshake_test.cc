// Handshake: HELLO and AUTH with the cluster token and with a node
// credential, wrong MACs, bad HELLOs. A fake peer (server_fakes.h) plays
// the connection; the keys are checked against wire/auth.h.

#include "rendezvous/handshake.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rendezvous/server_fakes.h"
#include "testing/status_matchers.h"
#include "wire/auth.h"

namespace drover::rendezvous_internal {
namespace {

using ::testing::StartsWith;

wire::Token TestToken() {
  wire::Token token;
  for (size_t i = 0; i < token.size(); ++i) token[i] = static_cast<unsigned char>(7 + i * 13);
  return token;
}

class HandshakeTest : public ::testing::Test {
 protected:
  HandshakeTest() {
    peer_.set_state(Peer::State::kAwaitHello);
    peer_.admin = false;
  }

  wire::Hello Hello(const std::string& executor_id = "") {
    wire::Hello hello;
    hello.set_client_nonce(client_nonce_);
    hello.set_name("raw peer");
    hello.set_executor_id(executor_id);
    return hello;
  }

  // AUTH with the MAC `key` gives for the challenge the peer got.
  bool Auth(const wire::Token& key) {
    std::optional<wire::Challenge> challenge = peer_.Last<wire::Challenge>(wire::CHALLENGE);
    EXPECT_TRUE(challenge.has_value());
    wire::Auth auth;
    auth.set_mac(wire::ClientMac(key, challenge->server_nonce(), client_nonce_));
    return handshake_.HandleAuth(peer_, auth);
  }

  const std::string client_nonce_ = std::string(wire::kNonceBytes, 'c');
  FakeContext context_;
  Handshake handshake_{TestToken(), context_};
  FakePeer peer_{1};
};

TEST_F(HandshakeTest, TheClusterTokenAuthenticatesForEverything) {
  wire::Hello hello = Hello();
  hello.set_name("raw\x01peer");
  handshake_.HandleHello(peer_, hello);
  EXPECT_EQ(peer_.state(), Peer::State::kAwaitAuth);
  EXPECT_EQ(peer_.name, "raw\\x01peer");  // escaped before any log line
  std::optional<wire::Challenge> challenge = peer_.Last<wire::Challenge>(wire::CHALLENGE);
  ASSERT_TRUE(challenge.has_value());
  EXPECT_EQ(challenge->server_nonce().size(), wire::kNonceBytes);

  ASSERT_TRUE(Auth(TestToken()));
  EXPECT_EQ(peer_.state(), Peer::State::kReady);
  EXPECT_TRUE(peer_.admin);
  std::optional<wire::AuthOk> ok = peer_.Last<wire::AuthOk>(wire::AUTH_OK);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->mac(), wire::ServerMac(TestToken(), client_nonce_, challenge->server_nonce()));
  ASSERT_OK_AND_ASSIGN(wire::Token session, wire::DeriveSessionKey(TestToken(), client_nonce_,
                                                                   challenge->server_nonce()));
  EXPECT_EQ(peer_.session_key, session);
}

TEST_F(HandshakeTest, ANodeCredentialAuthenticatesAsItsExecutorOnly) {
  handshake_.HandleHello(peer_, Hello("3"));
  ASSERT_OK_AND_ASSIGN(wire::Token key, wire::DeriveNodeKey(TestToken(), "3"));
  ASSERT_TRUE(Auth(key));
  EXPECT_FALSE(peer_.admin);
  EXPECT_EQ(peer_.credential_id, "3");
}

TEST_F(HandshakeTest, AWrongTokenFailsAndSaysNothingOfTheKey) {
  handshake_.HandleHello(peer_, Hello());
  wire::Token wrong = TestToken();
  wrong[0] ^= 1;
  EXPECT_FALSE(Auth(wrong));
  ASSERT_TRUE(peer_.rejection.has_value());
  EXPECT_EQ(peer_.rejection->code, wire::AUTH_FAILED);
  EXPECT_EQ(peer_.rejection->message, "authentication failed: wrong token");
  EXPECT_EQ(peer_.rejection->reason, "authentication failed: wrong token (raw peer)");
  EXPECT_FALSE(peer_.session_key.has_value());
  EXPECT_EQ(peer_.Count(wire::AUTH_OK), 0u);
}

TEST_F(HandshakeTest, AnotherExecutorsCredentialFails) {
  handshake_.HandleHello(peer_, Hello("3"));
  ASSERT_OK_AND_ASSIGN(wire::Token other, wire::DeriveNodeKey(TestToken(), "4"));
  EXPECT_FALSE(Auth(other));
  ASSERT_TRUE(peer_.rejection.has_value());
  EXPECT_EQ(peer_.rejection->message,
            "authentication failed: wrong node credential for executor 3");
}

TEST_F(HandshakeTest, ABadHelloIsMalformed) {
  wire::Hello short_nonce = Hello();
  short_nonce.set_client_nonce(std::string(31, 'c'));
  handshake_.HandleHello(peer_, short_nonce);
  ASSERT_TRUE(peer_.rejection.has_value());
  EXPECT_EQ(peer_.rejection->code, wire::MALFORMED);
  EXPECT_EQ(peer_.rejection->message, "HELLO client_nonce must be 32 bytes, got 31");

  FakePeer& long_name = context_.AddPeer(2);
  wire::Hello hello = Hello();
  hello.set_name(std::string(wire::kMaxHelloNameBytes + 1, 'n'));
  handshake_.HandleHello(long_name, hello);
  ASSERT_TRUE(long_name.rejection.has_value());
  EXPECT_EQ(long_name.rejection->message, "HELLO name of 257 bytes is over the limit of 256");

  FakePeer& bad_id = context_.AddPeer(3);
  handshake_.HandleHello(bad_id, Hello("a b"));
  ASSERT_TRUE(bad_id.rejection.has_value());
  EXPECT_THAT(bad_id.rejection->message, StartsWith("HELLO executor_id: "));
  EXPECT_EQ(bad_id.Count(wire::CHALLENGE), 0u);
}

}  // namespace
}  // namespace drover::rendezvous_internal

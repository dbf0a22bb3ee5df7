#include "rendezvous/handshake.h"

#include <string>

#include "wire/frame.h"

namespace drover::rendezvous_internal {

void Handshake::HandleHello(Peer& peer, const wire::Hello& hello) {
  if (hello.client_nonce().size() != wire::kNonceBytes) {
    std::string message = "HELLO client_nonce must be " + std::to_string(wire::kNonceBytes) +
                          " bytes, got " + std::to_string(hello.client_nonce().size());
    return peer.Reject(wire::MALFORMED, message, message);
  }
  if (hello.name().size() > wire::kMaxHelloNameBytes) {
    std::string message = "HELLO name of " + std::to_string(hello.name().size()) +
                          " bytes is over the limit of " + std::to_string(wire::kMaxHelloNameBytes);
    return peer.Reject(wire::MALFORMED, message, message);
  }
  if (!hello.executor_id().empty()) {
    Status valid = wire::ValidateCredentialId(hello.executor_id());
    if (!valid.ok()) {
      std::string message = "HELLO executor_id: " + valid.message();
      return peer.Reject(wire::MALFORMED, message, message);
    }
  }
  Result<std::string> nonce = wire::RandomNonce();
  if (!nonce.ok()) {
    context_.Log("cannot make a nonce: " + nonce.status().ToString());
    return peer.Close("server could not make a nonce");
  }
  peer.client_nonce = hello.client_nonce();
  peer.server_nonce = *nonce;
  // From an unauthenticated peer, on its way to logs and terminals.
  peer.name = wire::PrintableBytes(hello.name(), 64);
  peer.credential_id = hello.executor_id();  // validated: printable, no spaces
  peer.set_state(Peer::State::kAwaitAuth);
  wire::Challenge challenge;
  challenge.set_server_nonce(peer.server_nonce);
  peer.Send(wire::CHALLENGE, challenge);
}

bool Handshake::HandleAuth(Peer& peer, const wire::Auth& auth) {
  // The key HELLO named: the cluster token, or the node credential the
  // driver derived for that executor id (docs/security.md).
  Result<wire::Token> key = peer.credential_id.empty()
                                ? Result<wire::Token>(token_)
                                : wire::DeriveNodeKey(token_, peer.credential_id);
  Result<wire::Token> session =
      key.ok() ? wire::DeriveSessionKey(*key, peer.client_nonce, peer.server_nonce) : key;
  if (!session.ok()) {
    context_.Log("cannot derive keys: " + session.status().ToString());
    peer.Close("server could not derive the session key");
    return false;
  }
  std::string expected = wire::ClientMac(*key, peer.server_nonce, peer.client_nonce);
  if (!wire::ConstantTimeEquals(auth.mac(), expected)) {
    std::string who = peer.name.empty() ? "" : " (" + peer.name + ")";
    std::string message =
        peer.credential_id.empty()
            ? "authentication failed: wrong token"
            : "authentication failed: wrong node credential for executor " + peer.credential_id;
    peer.Reject(wire::AUTH_FAILED, message, message + who);
    return false;
  }
  peer.set_state(Peer::State::kReady);
  peer.admin = peer.credential_id.empty();
  wire::AuthOk ok;
  ok.set_mac(wire::ServerMac(*key, peer.client_nonce, peer.server_nonce));
  peer.Send(wire::AUTH_OK, ok);
  peer.StartSession(*session);
  // A connection lives as long as the run; its nonces serve only a node
  // credential's connection after AUTH, whose host's REGISTERs prove other
  // credentials with them.
  if (peer.admin) {
    std::string().swap(peer.client_nonce);
    std::string().swap(peer.server_nonce);
  }
  return true;
}

bool Handshake::CheckProof(Peer& peer, const wire::Register& request) {
  const std::string& proof = request.credential_mac();
  if (proof.empty()) return true;
  const std::string& id = request.node().executor_id();
  std::string malformed;
  if (!request.host()) {
    malformed = "a credential proof goes with a host's REGISTER only";
  } else if (peer.admin) {
    malformed = "a credential proof on the cluster token's connection, which needs none";
  } else if (Status valid = wire::ValidateCredentialId(id); !valid.ok()) {
    malformed = "REGISTER with a credential proof: " + valid.message();
  }
  if (!malformed.empty()) {
    peer.Reject(wire::MALFORMED, malformed, peer.Why(malformed));
    return false;
  }
  if (peer.Holds(id)) return true;
  Result<wire::Token> key = wire::DeriveNodeKey(token_, id);
  if (!key.ok()) {
    context_.Log("cannot derive keys: " + key.status().ToString());
    peer.Close("server could not derive a node credential");
    return false;
  }
  if (!wire::ConstantTimeEquals(proof,
                                wire::ClaimMac(*key, peer.server_nonce, peer.client_nonce))) {
    std::string message = "wrong credential proof for executor " + id;
    peer.Reject(wire::AUTH_FAILED, message, peer.Why(message));
    return false;
  }
  peer.proven_ids.push_back(id);
  return true;
}

}  // namespace drover::rendezvous_internal

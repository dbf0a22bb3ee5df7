// Handshake: the server's side of authentication (docs/protocol.md,
// "Handshake and authentication"). HELLO is checked and answered with a
// CHALLENGE; AUTH's MAC is checked, in constant time, under the key HELLO
// named (the cluster token, or the node credential derived from it for an
// executor id), and answered with AUTH_OK, after which the peer's frames are
// sealed under the session key. A host's REGISTERs on a node credential's
// connection may prove the host's other credentials (CheckProof). Holds a
// copy of the cluster token; the per-connection state (nonces, name,
// credential) is the Peer's.
//
// Called only on the server's event loop.

#ifndef DROVER_SRC_RENDEZVOUS_HANDSHAKE_H_
#define DROVER_SRC_RENDEZVOUS_HANDSHAKE_H_

#include "drover.pb.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"
#include "wire/auth.h"

namespace drover::rendezvous_internal {

class Handshake {
 public:
  // `context` must outlive the Handshake.
  Handshake(const wire::Token& token, ServerContext& context) : token_(token), context_(context) {}

  // REQUIRES: `peer` is in kAwaitHello. Moves it to kAwaitAuth.
  void HandleHello(Peer& peer, const wire::Hello& hello);
  // REQUIRES: `peer` is in kAwaitAuth. Returns true when it authenticated:
  // it is kReady, AUTH_OK is queued and its session has started.
  bool HandleAuth(Peer& peer, const wire::Auth& auth);
  // A REGISTER's proof of a node credential (docs/protocol.md, "Host
  // connections"): none to check is true (Permitted decides then). A proof
  // on a host's REGISTER, by a node credential's connection, that holds the
  // node's credential is true and the connection holds it from then on
  // (Peer::proven_ids); any other proof rejects `peer` and is false.
  // REQUIRES: `peer` is kReady.
  bool CheckProof(Peer& peer, const wire::Register& request);

 private:
  const wire::Token token_;
  ServerContext& context_;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_HANDSHAKE_H_

// Peer: one client connection as the server's handlers see it: who it
// authenticated as, which executor it registered, and what a handler may do
// to it (send a frame, refuse it with one ERROR frame, close it). Connection
// (connection.h) is the real one, over a socket; the parts' tests use a fake.
// OutFrame is a frame on its way out, whose body may start with bytes many
// frames share (SharedBody: the formed cluster).
//
// Called only on the server's event loop. A handler borrows the Peer its
// frame came on for the length of the call; the parts keep only a peer's
// id() and look it up again (ServerContext::FindPeer), so nothing holds a
// closed connection.

#ifndef DROVER_SRC_RENDEZVOUS_PEER_H_
#define DROVER_SRC_RENDEZVOUS_PEER_H_

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drover.pb.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover::rendezvous_internal {

// Body bytes many frames share (the formed cluster), with their SHA-256
// state, so that sealing a frame for each connection hashes them only once.
struct SharedBody {
  std::string bytes;
  wire::BodyDigest digest;  // of `bytes`
};

// One frame to send: `head` (the header, then the body when nothing is
// shared), then, if set, `shared` (the start of the body, sent straight from
// the shared buffer with scatter-gather I/O; head is the header alone then),
// then `tail` (the rest of the body; the trailer is added to it when the
// frame is sealed).
struct OutFrame {
  std::string head;
  std::shared_ptr<const SharedBody> shared;
  std::string tail;
};

// An unsealed frame of `type` with `body` (the connection seals it).
OutFrame MakeFrame(wire::MessageType type, const google::protobuf::MessageLite& body);

class Peer {
 public:
  // kDraining: an ERROR frame is on its way out; nothing more is handled.
  enum class State { kAwaitHello, kAwaitAuth, kReady, kDraining, kClosed };

  Peer(uint64_t id, std::string address) : id_(id), address_(std::move(address)) {}
  virtual ~Peer() = default;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Unique for the server's life: never reused after a close.
  uint64_t id() const { return id_; }
  // "host:port", for log lines.
  const std::string& address() const { return address_; }
  State state() const { return state_; }
  void set_state(State state) { state_ = state; }
  bool open() const { return state_ != State::kClosed && state_ != State::kDraining; }

  // Queues a frame; nothing once the peer is not open().
  virtual void Send(OutFrame frame) = 0;
  void Send(wire::MessageType type, const google::protobuf::MessageLite& body) {
    Send(MakeFrame(type, body));
  }
  // Sends one ERROR frame, reports `reason` (log + on_rejected), then closes
  // once the frame is out and the peer has closed, or after drain_timeout
  // whatever the peer does. The peer stops handling frames at once.
  virtual void Reject(wire::ErrorCode code, const std::string& message,
                      const std::string& reason) = 0;
  // Closes now. A non-empty `reason` is logged and passed to on_rejected.
  virtual void Close(const std::string& reason) = 0;
  void Close() { Close(std::string()); }
  // The handshake succeeded and AUTH_OK is queued: from now on every frame
  // either way is sealed under `session_key`, and frames may be as large as
  // max_frame_bytes.
  virtual void StartSession(const wire::Token& session_key) = 0;

  // Whether this connection carries `id`'s node.
  bool Carries(const std::string& id) const;
  // This connection carries `id`'s node now (REGISTER).
  void Claim(const std::string& id);
  // Gives up `id`'s node (another connection took it over, or it died);
  // true while the connection still carries some node, which its close
  // would take down.
  bool Release(const std::string& id);
  // Every node this connection carries.
  std::vector<std::string> Executors() const;

  // `reason` for the log, after whose connection this is ("executor 3: ",
  // "executor 3's credential: "), when known; the log line names the peer.
  std::string Why(const std::string& reason) const;

  // Whether this connection holds `id`'s credential: the cluster token
  // (every node's), the node credential HELLO named, or one a host's
  // REGISTER proved (proven_ids).
  bool Holds(const std::string& id) const;

  // Kept by the handlers: the handshake's (Handshake), then the
  // registration's (Barrier).
  // Until AUTH; after it, on a node credential's connection, for the proofs
  // of a host's other credentials (Handshake::CheckProof).
  std::string client_nonce;
  std::string server_nonce;
  std::string name;           // from HELLO, escaped for logs
  std::string credential_id;  // HELLO's executor_id: "" the cluster token
  bool admin = false;         // authenticated with the cluster token
  // The other nodes' credentials a host's REGISTERs proved it holds.
  std::vector<std::string> proven_ids;
  std::string executor_id;  // "" until REGISTER; "" on a host connection
  // A host connection (REGISTER's host: a host's agent) carries several
  // nodes, these.
  bool host = false;
  std::vector<std::string> host_executors;
  // REGISTER's: whether its CLUSTER carries the node list.
  wire::NodeList node_list = wire::NODE_LIST_AUTO;

 protected:
  State state_ = State::kAwaitHello;

 private:
  uint64_t id_;
  std::string address_;
};

// True when `peer` may act for `executor_id` ("" : for no node: STOP_ALL):
// a node's credential covers its own slot only (Peer::Holds), the cluster
// token everything (docs/security.md). Otherwise rejects `peer` with
// PERMISSION_DENIED, saying it may not `what`; a refusal costs the sender
// its connection.
bool Permitted(Peer& peer, const std::string& executor_id, const std::string& what);

// Parses `frame`'s body into `message`; a body that does not parse rejects
// `peer` (kMalformed) and returns false.
bool ParseOrReject(Peer& peer, const wire::Frame& frame, google::protobuf::MessageLite* message);

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_PEER_H_

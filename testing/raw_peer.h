// RawPeer: a drover protocol peer built from a blocking POSIX socket, the
// frame codec and a hand-written handshake, for tests that must speak (or
// break) the wire protocol of docs/protocol.md without the real client.
// After Handshake() it seals what it sends and checks what it reads, as the
// protocol wants; Seal() hands out sealed frames to send (or alter) by hand.
//
// Every call that waits takes a deadline. A RawPeer owns its socket (move-only)
// and belongs to one thread at a time.

#ifndef DROVER_TESTING_RAW_PEER_H_
#define DROVER_TESTING_RAW_PEER_H_

#include <google/protobuf/message_lite.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover::testing {

class RawPeer {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Connects to 127.0.0.1:port.
  static Result<RawPeer> Connect(uint16_t port, Deadline deadline);

  RawPeer(RawPeer&& other) noexcept;
  RawPeer& operator=(RawPeer&& other) noexcept;
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;
  ~RawPeer();

  Status SendBytes(std::string_view bytes);
  // Sealed once the handshake is done.
  Status Send(wire::MessageType type, const google::protobuf::MessageLite& body);
  // The next sealed frame of any type (unknown ones too), not sent; uses up
  // a sequence number. REQUIRES: Handshake() succeeded.
  std::string Seal(uint16_t type, std::string_view body);

  // The next frame. kUnavailable "connection closed" at EOF (with how many
  // bytes of an unfinished frame came), kDeadlineExceeded at the deadline.
  Result<wire::Frame> ReadFrame(Deadline deadline);

  // Reads the next frame, which must be `type`, and parses it into `body`.
  // An ERROR frame instead becomes kUnavailable "<CODE_NAME>: <message>".
  Status Read(wire::MessageType type, google::protobuf::MessageLite* body, Deadline deadline);

  // Reads the next frame, which must be ERROR.
  Result<wire::Error> ReadError(Deadline deadline);

  // HELLO, CHALLENGE, AUTH, AUTH_OK; checks the server's proof, then starts
  // the session. `key` is the cluster token, or with `executor_id` that
  // executor's node credential.
  Status Handshake(const wire::Token& key, Deadline deadline, std::string name = "raw peer",
                   std::string executor_id = "");

  // The proof that this connection holds `node_key` too, for a host's
  // REGISTER (Register.credential_mac). REQUIRES: Handshake() succeeded.
  std::string CredentialProof(const wire::Token& node_key) const {
    return wire::ClaimMac(node_key, server_nonce_, client_nonce_);
  }

  // Waits until the server closes the connection (EOF or reset), discarding
  // any frames that come first.
  Status WaitForClose(Deadline deadline);

  // Closes the sending half (the server sees EOF).
  void ShutdownWrite();
  void Close();
  int fd() const { return fd_; }

 private:
  explicit RawPeer(int fd) : fd_(fd), reader_(wire::kClientMaxFrameBytes) {}
  // Reads some bytes into reader_. kUnavailable at EOF.
  Status Fill(Deadline deadline);

  int fd_ = -1;
  wire::FrameReader reader_;
  std::optional<wire::FrameSealer> sealer_;
  std::optional<wire::FrameOpener> opener_;
  std::string client_nonce_;  // the handshake's
  std::string server_nonce_;
};

}  // namespace drover::testing

#endif  // DROVER_TESTING_RAW_PEER_H_

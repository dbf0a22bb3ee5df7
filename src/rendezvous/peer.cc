#include "rendezvous/peer.h"

#include "rendezvous/log_text.h"

namespace drover::rendezvous_internal {

OutFrame MakeFrame(wire::MessageType type, const google::protobuf::MessageLite& body) {
  return OutFrame{wire::EncodeFrame(type, body), nullptr, {}};
}

std::string Peer::Why(const std::string& reason) const {
  if (!executor_id.empty()) return "executor " + Printable(executor_id) + ": " + reason;
  if (!credential_id.empty()) return "executor " + credential_id + "'s credential: " + reason;
  return reason;
}

bool Permitted(Peer& peer, const std::string& executor_id, const std::string& what) {
  if (peer.admin || executor_id == peer.credential_id) return true;
  std::string message =
      "the node credential of executor " + peer.credential_id + " may not " + what;
  peer.Reject(wire::PERMISSION_DENIED, message, peer.Why(message));
  return false;
}

bool ParseOrReject(Peer& peer, const wire::Frame& frame, google::protobuf::MessageLite* message) {
  wire::FrameError error;
  if (wire::ParseBody(frame, message, &error)) return true;
  peer.Reject(error.code, error.message, error.message);
  return false;
}

}  // namespace drover::rendezvous_internal

#include "rendezvous/peer.h"

#include <algorithm>

#include "rendezvous/log_text.h"

namespace drover::rendezvous_internal {

OutFrame MakeFrame(wire::MessageType type, const google::protobuf::MessageLite& body) {
  return OutFrame{wire::EncodeFrame(type, body), nullptr, {}};
}

bool Peer::Carries(const std::string& id) const {
  if (!host) return !id.empty() && executor_id == id;
  return std::find(host_executors.begin(), host_executors.end(), id) != host_executors.end();
}

void Peer::Claim(const std::string& id) {
  if (!host) {
    executor_id = id;
  } else if (!Carries(id)) {
    host_executors.push_back(id);
  }
}

bool Peer::Release(const std::string& id) {
  if (!host) {
    if (executor_id == id) executor_id.clear();
    return !executor_id.empty();
  }
  host_executors.erase(std::remove(host_executors.begin(), host_executors.end(), id),
                       host_executors.end());
  return !host_executors.empty();
}

std::vector<std::string> Peer::Executors() const {
  if (host) return host_executors;
  if (executor_id.empty()) return {};
  return {executor_id};
}

std::string Peer::Why(const std::string& reason) const {
  if (!executor_id.empty()) return "executor " + Printable(executor_id) + ": " + reason;
  if (host && !host_executors.empty()) {
    return "host connection of executor " + Printable(host_executors.front()) + " and " +
           std::to_string(host_executors.size() - 1) + " more: " + reason;
  }
  if (!credential_id.empty()) return "executor " + credential_id + "'s credential: " + reason;
  return reason;
}

bool Peer::Holds(const std::string& id) const {
  if (admin) return true;
  if (id.empty()) return false;
  return id == credential_id ||
         std::find(proven_ids.begin(), proven_ids.end(), id) != proven_ids.end();
}

bool Permitted(Peer& peer, const std::string& executor_id, const std::string& what) {
  if (peer.Holds(executor_id)) return true;
  std::string holder = "the node credential of executor " + peer.credential_id;
  if (!peer.proven_ids.empty()) {
    holder = "the node credentials of executor " + peer.credential_id + " and " +
             std::to_string(peer.proven_ids.size()) + " more";
  }
  std::string message = holder + " may not " + what;
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

// Test doubles for the rendezvous server's parts: FakePeer records what a
// handler did to a connection (frames sent, the ERROR it was rejected with,
// a close), and FakeContext stands in for the server (its log, the events
// the driver would get, the open peers by id, the published outcome). With
// them the parts are tested without sockets or an event loop.
//
// Test-only; one thread.

#ifndef DROVER_SRC_RENDEZVOUS_SERVER_FAKES_H_
#define DROVER_SRC_RENDEZVOUS_SERVER_FAKES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/rendezvous.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"
#include "wire/frame.h"

namespace drover::rendezvous_internal {

// The type in an OutFrame's header.
inline wire::MessageType TypeOf(const OutFrame& frame) {
  wire::FrameHeader header;
  wire::FrameError error;
  wire::DecodeHeader(std::string_view(frame.head).substr(0, wire::kHeaderBytes), UINT32_MAX,
                     &header, &error);
  return static_cast<wire::MessageType>(header.type);
}

// An unsealed OutFrame's body: what follows its header, shared bytes included.
inline std::string BodyOf(const OutFrame& frame) {
  std::string body = frame.head.substr(wire::kHeaderBytes);
  if (frame.shared) body += frame.shared->bytes;
  return body + frame.tail;
}

// A node as its agent registers it: one port on 10.0.0.1.
inline NodeInfo TestNode(const std::string& executor_id, uint32_t port = 7000) {
  NodeInfo node;
  node.executor_id = executor_id;
  node.host = "10.0.0.1";
  node.ports = {port};
  return node;
}

class FakePeer : public Peer {
 public:
  struct Rejection {
    wire::ErrorCode code;
    std::string message;
    std::string reason;
  };

  // Authenticated with the cluster token unless a test says otherwise.
  explicit FakePeer(uint64_t id, std::string address = "192.0.2.1:5000")
      : Peer(id, std::move(address)) {
    set_state(State::kReady);
    admin = true;
  }

  using Peer::Close;
  using Peer::Send;
  void Send(OutFrame frame) override {
    if (!open()) return;
    sent.push_back(std::move(frame));
    if (on_send) on_send();
  }
  void Reject(wire::ErrorCode code, const std::string& message,
              const std::string& reason) override {
    if (!open()) return;
    rejection = Rejection{code, message, reason};
    state_ = State::kDraining;
  }
  void Close(const std::string& reason) override {
    if (state_ == State::kClosed) return;
    closed = true;
    close_reason = reason;
    state_ = State::kClosed;
  }
  void StartSession(const wire::Token& key) override { session_key = key; }

  // Authenticated with executor `id`'s node credential, as an agent is.
  void AsNode(const std::string& id) {
    admin = false;
    credential_id = id;
  }

  size_t Count(wire::MessageType type) const {
    size_t count = 0;
    for (const OutFrame& frame : sent) count += TypeOf(frame) == type;
    return count;
  }
  // The last frame of `type` sent, parsed; nullopt when none was.
  template <typename Message>
  std::optional<Message> Last(wire::MessageType type) const {
    for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
      if (TypeOf(*it) != type) continue;
      Message message;
      if (!message.ParseFromString(BodyOf(*it))) return std::nullopt;
      return message;
    }
    return std::nullopt;
  }

  std::vector<OutFrame> sent;
  // Runs after each frame sent: what a real send may set off (a peer over
  // its write bound is closed, and the server drops its registration).
  std::function<void()> on_send;
  std::optional<Rejection> rejection;
  bool closed = false;
  std::string close_reason;
  std::optional<wire::Token> session_key;
};

class FakeContext : public ServerContext {
 public:
  void Log(const std::string& line) override { log.push_back(line); }
  void Report(const NodeEvent& event) override { events.push_back(event); }
  // As the server's: a peer rejected or closed is gone.
  Peer* FindPeer(uint64_t id) override {
    auto it = peers_.find(id);
    return it == peers_.end() || !it->second->open() ? nullptr : it->second.get();
  }
  void Publish(const Status& outcome) override {
    ++publications;
    if (!outcome_.has_value()) outcome_.emplace(outcome);
  }

  // Queued; RunPosted runs them, as the loop would after this turn.
  void Post(std::function<void()> task) override { posted.push_back(std::move(task)); }
  void RunPosted() {
    while (!posted.empty()) {
      std::function<void()> task = std::move(posted.front());
      posted.erase(posted.begin());
      task();
    }
  }

  // A new open peer with id `id`, owned by the context.
  FakePeer& AddPeer(uint64_t id) {
    auto [it, added] = peers_.emplace(id, std::make_unique<FakePeer>(id));
    return *it->second;
  }
  bool Logged(const std::string& text) const {
    for (const std::string& line : log) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  const std::optional<Status>& outcome() const { return outcome_; }

  std::vector<std::string> log;
  std::vector<NodeEvent> events;
  int publications = 0;
  std::vector<std::function<void()>> posted;

 private:
  std::map<uint64_t, std::unique_ptr<FakePeer>> peers_;
  std::optional<Status> outcome_;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_SERVER_FAKES_H_

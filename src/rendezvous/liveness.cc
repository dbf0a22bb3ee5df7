#include "rendezvous/liveness.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "rendezvous/node_info_codec.h"

namespace drover::rendezvous_internal {

namespace {

// A Heartbeat's or a NodeHeartbeat's payload: the same fields.
template <typename Message>
void Record(NodeRecord& node, const Message& payload) {
  node.program_pid = payload.program_pid();
  if (!node.report && !payload.has_feed() && payload.metrics().empty()) return;
  if (!node.report) node.report = std::make_unique<HeartbeatReport>();
  if (payload.has_feed()) node.report->feed = FeedProgressFromWire(payload.feed());
  node.report->metrics = MetricsFromWire(payload.metrics());
}

}  // namespace

void Liveness::HandleHeartbeat(Peer& peer, const wire::Heartbeat& heartbeat) {
  const Clock::time_point now = Clock::now();
  if (peer.host) {
    // A host's agent is alive: so are its nodes. Each node's payload comes
    // in `nodes`; the top-level one names no node and is not read.
    for (const std::string& id : peer.host_executors) {
      NodeRecord* node = table_.Find(id);
      if (node != nullptr && node->connection == peer.id()) {
        node->last_seen = now;
        node->quiet = heartbeat.quiet();
      }
    }
    for (const wire::NodeHeartbeat& payload : heartbeat.nodes()) {
      NodeRecord* node = table_.Find(payload.executor_id());
      if (node != nullptr && node->connection == peer.id()) Record(*node, payload);
    }
    return;
  }
  if (peer.executor_id.empty()) return;
  NodeRecord* node = table_.Find(peer.executor_id);
  if (node == nullptr || node->connection != peer.id()) return;
  node->last_seen = now;
  node->quiet = heartbeat.quiet();
  Record(*node, heartbeat);
}

void Liveness::CheckHeartbeats(Clock::time_point now) {
  if (table_.phase() != Phase::kFormed) return;
  const auto limit = options_.heartbeat_interval * options_.missed_heartbeats_until_dead;
  for (NodeRecord& node : table_.nodes()) {
    if (!node.alive || node.stop_sent) continue;
    auto silent = now - node.last_seen;
    if (silent <= limit + (node.quiet ? options_.quiet_heartbeat_interval : Milliseconds(0))) {
      continue;
    }
    double seconds = std::chrono::duration<double>(silent).count();
    char age[32];
    std::snprintf(age, sizeof(age), "%.1f s", seconds);
    uint64_t connection = node.connection;
    DeclareDead(node, "missed " + std::to_string(options_.missed_heartbeats_until_dead) +
                          " heartbeats (last " + age + " ago)");
    if (connection != 0) {
      node.connection = 0;
      // Released first: its close is not a second death. A host's
      // connection stays while it carries live nodes.
      Peer* peer = context_.FindPeer(connection);
      if (peer != nullptr && !peer->Release(node.info.executor_id)) peer->Close();
    }
  }
}

void Liveness::Disconnected(NodeRecord& node, const std::string& why) {
  if (table_.phase() == Phase::kFormed && node.alive && !node.stop_sent) {
    DeclareDead(node, why);
  }
}

void Liveness::DeclareDead(NodeRecord& node, const std::string& why) {
  if (!node.alive) return;
  node.alive = false;
  std::string message =
      NodeTable::Describe(node) + (why.rfind("missed", 0) == 0 ? " " : ": ") + why;
  // An error the node reported itself says more than how its connection ended.
  if (node.error.empty()) node.error = message;
  context_.Log(message + "; declared dead");
  context_.Report(NodeEvent{NodeEvent::Kind::kDead, node.info, message, node.last_log_lines});
}

}  // namespace drover::rendezvous_internal

#include "rendezvous/barrier.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "os/duration_text.h"
#include "rendezvous/log_text.h"
#include "rendezvous/node_info_codec.h"
#include "wire/frame.h"

namespace drover::rendezvous_internal {

void Barrier::HandleRegister(Peer& peer, const wire::Register& request) {
  std::string missing;
  if (!request.has_node()) {
    missing = "REGISTER needs a node";
  } else if (request.node().executor_id().empty()) {
    missing = "REGISTER needs an executor_id";
  } else if (request.node().host().empty()) {
    missing = "REGISTER needs a host (executor " + request.node().executor_id() + ")";
  } else if (request.node().ports().empty()) {
    missing = "REGISTER needs at least one port (executor " + request.node().executor_id() + ")";
  }
  if (!missing.empty()) return peer.Reject(wire::MALFORMED, missing, missing);
  const std::string& id = request.node().executor_id();
  if ((request.host() || peer.host) && !AcceptHost(peer, request)) return;
  if (!Permitted(peer, id, "register executor " + wire::PrintableBytes(id, 64))) return;
  peer.node_list = request.node_list();
  switch (table_.phase()) {
    case Phase::kStopped: {
      std::string message = "executor " + id + " cannot register: " + table_.stop_reason();
      return peer.Reject(wire::STOPPED, message, message);
    }
    case Phase::kFormed: {
      const NodeRecord* member = table_.Find(id);
      if (options_.elastic && (member == nullptr || !member->alive))
        return Park(peer, request.node());
      return Rejoin(peer, id);
    }
    case Phase::kReserving:
      return Reserve(peer, request.node());
  }
}

// A host connection: every REGISTER on it a host's, each node's credential
// held (the cluster token, or node credentials: Permitted, after), and not
// in elastic runs (a round's joiners and departures are single nodes'
// today).
bool Barrier::AcceptHost(Peer& peer, const wire::Register& request) {
  if (!request.host() || !peer.executor_id.empty()) {
    std::string message =
        "a connection carries one node, or a host's nodes (REGISTER with host set on each), not "
        "both";
    peer.Reject(wire::MALFORMED, message, message);
    return false;
  }
  if (options_.elastic) {
    std::string message = "an elastic cluster takes one node per connection, not a host's nodes";
    peer.Reject(wire::MALFORMED, message, message);
    return false;
  }
  peer.host = true;
  return true;
}

// Another connection takes `id`'s node over from `old`, which closes once
// it carries no node (a host's other nodes keep theirs).
void Barrier::TakeOver(Peer& old, const std::string& id) {
  if (!old.Release(id)) old.Close();
}

// After the barrier: a member reconnecting (a retried agent) takes over its
// slot and gets the cluster again; anyone else is too late.
void Barrier::Rejoin(Peer& peer, const std::string& executor_id) {
  NodeRecord* node = table_.Find(executor_id);
  if (node == nullptr || !node->alive) {
    std::string formed = "cluster already formed with " + std::to_string(table_.size()) + " nodes";
    std::string message =
        node == nullptr
            ? formed + "; executor " + executor_id + " was not part of it"
            : formed + "; executor " + executor_id + " was declared dead: " + node->error;
    return peer.Reject(wire::CLUSTER_FORMED, message, message);
  }
  if (node->connection != 0 && node->connection != peer.id()) {
    // Released first: the old connection's close is not the node's death.
    if (Peer* old = context_.FindPeer(node->connection)) TakeOver(*old, executor_id);
  }
  node->connection = peer.id();
  node->last_seen = Clock::now();
  peer.Claim(executor_id);
  Acknowledge(peer);
  // A node whose batch has not gone out yet gets the cluster with it.
  if (node->slot < unsent_from_) SendCluster(*node);
}

void Barrier::Reserve(Peer& peer, const wire::NodeInfo& request) {
  const std::string& id = request.executor_id();
  // A node's connection that registered under another id gives it up.
  if (!peer.host && !peer.executor_id.empty() && peer.executor_id != id) {
    NodeRecord* previous = table_.Find(peer.executor_id);
    if (previous != nullptr && previous->connection == peer.id()) table_.Remove(peer.executor_id);
    peer.executor_id.clear();
  }
  // A retried task is not a duplicate: the new registration replaces the old.
  NodeRecord* existing = table_.Find(id);
  if (existing != nullptr && existing->connection != 0 && existing->connection != peer.id()) {
    Peer* old = context_.FindPeer(existing->connection);
    existing->connection = 0;
    if (old != nullptr) {
      context_.Log("executor " + id + " registered again from " + peer.address() +
                   "; dropping its earlier connection from " + old->address());
      TakeOver(*old, id);
    }
  }
  NodeRecord& registered = table_.Register(NodeFromWire(request), peer.id(), Clock::now());
  peer.Claim(id);
  Acknowledge(peer);
  if (options_.elastic) {
    context_.Report(NodeEvent{NodeEvent::Kind::kRegistered, registered.info, "registered", {}});
  }
  FormIfFull();
}

void Barrier::Park(Peer& peer, const wire::NodeInfo& request) {
  const std::string& id = request.executor_id();
  auto existing = joiners_.find(id);
  if (existing != joiners_.end() && existing->second.connection != peer.id()) {
    if (Peer* old = context_.FindPeer(existing->second.connection)) {
      old->executor_id.clear();
      old->Close();
    }
  }
  NodeInfo info = NodeFromWire(request);
  joiners_[id] = Joiner{info, peer.id()};
  peer.executor_id = id;
  Acknowledge(peer);
  context_.Log("executor " + id + " from " + peer.address() +
               " registered after the cluster formed; it waits for the next round");
  context_.Report(NodeEvent{
      NodeEvent::Kind::kJoining, std::move(info), "executor " + id + " waits to join", {}});
}

void Barrier::Reform(const std::string& cluster_id, int round, const std::string& reason,
                     const std::vector<std::string>& admit, bool hold) {
  cluster_id_ = cluster_id;
  round_ = round;
  round_reason_ = reason;
  hold_ = hold;
  summary_ = EncodedCluster{};
  own_placements_ = {};
  node_list_ = EncodedCluster{};
  for (const std::string& id : admit) {
    auto joiner = joiners_.find(id);
    if (joiner == joiners_.end()) continue;
    Peer* peer = context_.FindPeer(joiner->second.connection);
    if (peer != nullptr && peer->open()) {
      table_.Register(joiner->second.info, peer->id(), Clock::now());
      Acknowledge(*peer);
    }
    joiners_.erase(joiner);
  }
  if (!table_.nodes().empty()) FormIfFull();
}

Result<int> Barrier::FormWithRegistered(int minimum) {
  if (table_.phase() != Phase::kReserving) {
    return Status::FailedPrecondition("the cluster is not reserving");
  }
  const int registered = static_cast<int>(table_.size());
  if (registered < minimum || registered == 0) {
    return Status::FailedPrecondition(table_.DescribeRegistrations() + ", fewer than the " +
                                      std::to_string(minimum) + " needed");
  }
  table_.SetExpected(registered);
  hold_ = false;
  FormCluster();
  if (table_.phase() != Phase::kFormed) {
    return Status::Internal("laying out the cluster of " + std::to_string(registered) +
                            " nodes failed");
  }
  return registered;
}

void Barrier::ForgetJoiner(uint64_t connection) {
  for (auto it = joiners_.begin(); it != joiners_.end(); ++it) {
    if (it->second.connection != connection) continue;
    context_.Log("executor " + it->first + " left before it could join");
    joiners_.erase(it);
    return;
  }
}

std::vector<uint64_t> Barrier::JoinerConnections() const {
  std::vector<uint64_t> connections;
  for (const auto& [id, joiner] : joiners_) connections.push_back(joiner.connection);
  return connections;
}

void Barrier::FormIfFull() {
  if (!hold_ && static_cast<int>(table_.size()) >= table_.expected()) FormCluster();
}

void Barrier::Acknowledge(Peer& peer) {
  wire::Registered registered;
  registered.set_registered(static_cast<uint32_t>(table_.size()));
  registered.set_expected(static_cast<uint32_t>(table_.expected()));
  peer.Send(wire::REGISTERED, registered);
}

void Barrier::Disconnected(const NodeRecord& node, const std::string& address) {
  std::string id = node.info.executor_id;  // a copy: Remove frees the record
  context_.Log("executor " + id + " at " + address +
               " disconnected before the cluster formed; its registration is dropped");
  table_.Remove(id);
}

void Barrier::FormCluster() {
  Clock::time_point started = Clock::now();
  table_.AssignSlots(started);
  Result<ClusterColumns> columns = PlaceColumns();
  if (!columns.ok()) {
    context_.Log("laying out the cluster failed: " + columns.status().ToString());
    context_.Publish(columns.status().WithContext("laying out the cluster"));
    return;
  }
  int with_list = 0;
  if (!KeepLayout(*columns, &with_list)) return;

  table_.set_formed();
  unsent_from_ = 0;
  ++send_generation_;
  SendClusterBatch(send_generation_);
  context_.Log(
      "cluster " + cluster_id_ + " formed with " + std::to_string(table_.size()) + " nodes (" +
      std::to_string(with_list) +
      " with the node list: " + std::to_string(node_list_.uncompressed_bytes) + " bytes, " +
      std::to_string(node_list_.compressed_bytes) + " compressed; " +
      std::to_string(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count()) +
      " us to encode, and to queue the first " + std::to_string(unsent_from_) + ")");
  context_.Publish(Status::Ok());
}

Result<ClusterColumns> Barrier::PlaceColumns() const {
  ClusterColumns columns;
  columns.cluster_id = cluster_id_;
  columns.round = round_;
  columns.round_reason = round_reason_;
  columns.nodes.reserve(table_.size());
  for (const NodeRecord& node : table_.nodes()) columns.nodes.push_back(&node.info);
  // The one layout of the cluster: the driver's (LayOut) is the same.
  DROVER_ASSIGN_OR_RETURN(columns.placed, PlaceNodeRoles(columns.nodes));
  return columns;
}

bool Barrier::KeepLayout(ClusterColumns& columns, int* with_list) {
  // Encode once, compress once; every node's frame borrows these bytes. The
  // node list is encoded only if some node wants it.
  if (!Encode(ClusterSummaryToWire(columns), &summary_)) return false;
  for (const NodeRecord& node : table_.nodes()) {
    const Peer* peer = node.connection == 0 ? nullptr : context_.FindPeer(node.connection);
    if (peer != nullptr && WantsNodeList(*peer)) ++*with_list;
  }
  if (*with_list > 0 && NodeListEncoding(&columns) == nullptr) return false;
  own_placements_ = std::move(columns.placed.roles);
  return true;
}

Result<FormedCluster> Barrier::LayOut() const {
  FormedCluster formed;
  formed.cluster_id = cluster_id_;
  formed.round = round_;
  formed.round_reason = round_reason_;
  formed.heartbeat_interval = options_.heartbeats.interval;
  formed.quiet_heartbeat_interval = options_.heartbeats.quiet;
  formed.nodes.reserve(table_.size());
  for (const NodeRecord& node : table_.nodes()) formed.nodes.push_back(node.info);
  // The one layout of the cluster: every node and the driver read it.
  DROVER_RETURN_IF_ERROR(PlaceNodes(formed));
  return formed;
}

Result<FormedCluster> Barrier::Formed() const {
  if (!summary_.body || table_.phase() == Phase::kReserving) {
    return Status::FailedPrecondition("the cluster has not formed");
  }
  return LayOut();
}

void Barrier::SendClusterBatch(uint64_t generation) {
  if (generation != send_generation_ || table_.phase() != Phase::kFormed) return;
  const std::vector<NodeRecord>& nodes = table_.nodes();
  const size_t end = std::min(nodes.size(), unsent_from_ + kClusterSendBatch);
  // Advanced first: a node that rejoins from here on is sent the cluster
  // by Rejoin, on its new connection, and not again by a later batch.
  const size_t begin = std::exchange(unsent_from_, end);
  for (size_t i = begin; i < end; ++i) SendCluster(nodes[i]);
  if (end < nodes.size()) context_.Post([this, generation] { SendClusterBatch(generation); });
}

void Barrier::SendCluster(const NodeRecord& node) {
  if (node.connection == 0 || !summary_.body) return;
  Peer* peer = context_.FindPeer(node.connection);
  if (peer == nullptr) return;
  if (WantsNodeList(*peer)) {
    const EncodedCluster* list = NodeListEncoding();
    if (list != nullptr) peer->Send(ClusterFrame(*list, node.slot, options_.heartbeats));
    return;
  }
  if (node.slot >= own_placements_.size()) return;
  peer->Send(ClusterFrame(summary_, node.slot, options_.heartbeats, node.info,
                          own_placements_[node.slot]));
}

bool Barrier::Encode(const wire::SharedCluster& shared, EncodedCluster* out) {
  int rc = EncodeCluster(shared, out);
  if (rc == Z_OK) return true;
  context_.Log("zlib compress2 failed with code " + std::to_string(rc));
  context_.Publish(
      Status::Internal("compressing the cluster failed (zlib code " + std::to_string(rc) + ")"));
  return false;
}

bool Barrier::WantsNodeList(const Peer& peer) const {
  switch (peer.node_list) {
    case wire::NODE_LIST_ALWAYS:
      return true;
    case wire::NODE_LIST_NEVER:
      return false;
    default:
      return static_cast<int>(table_.size()) <= options_.node_list_limit;
  }
}

const EncodedCluster* Barrier::NodeListEncoding(const ClusterColumns* columns) {
  if (node_list_.body) return &node_list_;
  if (columns == nullptr) {
    // Formed once: placed the same again from the table.
    Result<ClusterColumns> again = PlaceColumns();
    if (!again.ok()) return nullptr;
    return NodeListEncoding(&*again);
  }
  if (!Encode(SharedClusterToWire(*columns), &node_list_)) return nullptr;
  if (node_list_.compressed_bytes + 64 > wire::kClientMaxFrameBytes) {
    context_.Log("the compressed node list is " + std::to_string(node_list_.compressed_bytes) +
                 " bytes, over a client's frame limit of " +
                 std::to_string(wire::kClientMaxFrameBytes));
  }
  return &node_list_;
}

void Barrier::OnReservationTimeout() {
  if (table_.phase() != Phase::kReserving) return;
  // The registered nodes would take the first slots in executor-id order;
  // the slots after them are the missing ones.
  std::vector<std::string> registered = table_.RegisteredInSlotOrder();
  std::vector<std::string> missing = table_.MissingSlots();
  std::string message = "reservation timed out after " +
                        os::SecondsText(options_.reservation_timeout) + ": " +
                        std::to_string(registered.size()) + " of " +
                        std::to_string(table_.expected()) + " nodes registered";
  if (!registered.empty()) message += " (executors " + JoinLimited(registered) + ")";
  message += "; missing " + std::to_string(missing.size()) + " (" + JoinLimited(missing) + ")";
  context_.Log(message);

  table_.Stop(message);
  std::vector<uint64_t> waiting;
  for (const NodeRecord& node : table_.nodes()) {
    if (node.connection != 0) waiting.push_back(node.connection);
  }
  for (uint64_t id : waiting) {
    if (Peer* peer = context_.FindPeer(id)) {
      peer->Reject(wire::RESERVATION_TIMEOUT, message, message);
    }
  }
  context_.Publish(Status::DeadlineExceeded(message));
}

}  // namespace drover::rendezvous_internal

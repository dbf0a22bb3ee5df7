#include "rendezvous/control.h"

#include <utility>
#include <vector>

#include "rendezvous/node_info_codec.h"
#include "wire/frame.h"

namespace drover::rendezvous_internal {
namespace {

wire::State StateToWire(const ClusterState& state) {
  wire::State out;
  out.set_phase(state.phase);
  out.set_registered(static_cast<uint32_t>(state.registered));
  out.set_expected(static_cast<uint32_t>(state.expected));
  for (const NodeStatus& status : state.nodes) {
    wire::NodeState* node = out.add_nodes();
    *node->mutable_node() = NodeToWire(status.node);
    node->set_alive(status.alive);
    node->set_left(status.left);
    node->set_last_heartbeat_age_ms(static_cast<uint64_t>(status.last_heartbeat_age.count()));
    node->set_program_pid(status.program_pid);
    if (status.feed) *node->mutable_feed() = FeedProgressToWire(*status.feed);
    MetricsToWire(status.metrics, node->mutable_metrics());
    node->set_error(status.error);
    for (const std::string& line : status.last_log_lines) node->add_last_log_lines(line);
  }
  return out;
}

}  // namespace

void Control::HandleControl(Peer& peer, const wire::Control& control) {
  switch (control.kind()) {
    case wire::Control::REPORT_ERROR:
      return HandleReportError(peer, control);
    case wire::Control::QUERY_STATE:
      return HandleQueryState(peer);
    case wire::Control::STOP_ALL:
      return HandleStopAll(peer);
    case wire::Control::LEAVE:
      return HandleLeave(peer, control);
    case wire::Control::STOP_NODE:
      return HandleStopNode(peer, control);
    default: {
      std::string message = "CONTROL with unknown kind " + std::to_string(control.kind());
      return peer.Reject(wire::MALFORMED, message, message);
    }
  }
}

void Control::HandleReportError(Peer& peer, const wire::Control& control) {
  std::string id = control.executor_id().empty() ? peer.executor_id : control.executor_id();
  if (!Permitted(peer, id, "report an error for executor " + wire::PrintableBytes(id, 64))) {
    return;
  }
  NodeRecord* node = table_.Find(id);
  if (node == nullptr && !peer.executor_id.empty()) {
    // A node that registered before and is not a member now: its report is
    // from an earlier round of an elastic cluster, which has ended.
    context_.Log("ignoring executor " + id +
                 "'s report from an earlier round: " + control.message());
    return;
  }
  NodeInfo info;
  info.executor_id = id;
  std::vector<std::string> lines(control.last_log_lines().begin(), control.last_log_lines().end());
  if (node != nullptr) {
    node->error = control.message();
    node->last_log_lines = lines;
    info = node->info;
    context_.Log(NodeTable::Describe(*node) + " reported an error: " + control.message());
  } else {
    context_.Log("REPORT_ERROR for unknown executor '" + id + "' from " + peer.address() + ": " +
                 control.message());
  }
  context_.Report(
      NodeEvent{NodeEvent::Kind::kError, std::move(info), control.message(), std::move(lines)});
}

void Control::HandleQueryState(Peer& peer) {
  ClusterState state = table_.State(Clock::now());
  if (!peer.admin) {
    // A node sees every node's place and liveness (CLUSTER told it the
    // places already), and only its own errors and last lines (a host's
    // agent, its nodes').
    for (NodeStatus& status : state.nodes) {
      if (peer.Holds(status.node.executor_id)) continue;
      status.error.clear();
      status.last_log_lines.clear();
    }
  }
  peer.Send(wire::STATE, StateToWire(state));
}

void Control::HandleStopAll(Peer& peer) {
  if (!Permitted(peer, "", "stop all nodes")) return;
  NodeRecord* requester = peer.executor_id.empty() ? nullptr : table_.Find(peer.executor_id);
  std::string who = requester != nullptr ? NodeTable::Describe(*requester) : peer.address();
  context_.Log(who + " asked to stop all nodes");
  NodeInfo info = requester != nullptr ? requester->info : NodeInfo{};
  StopAll();
  context_.Report(
      NodeEvent{NodeEvent::Kind::kStopped, std::move(info), who + " asked to stop all nodes", {}});
}

void Control::HandleLeave(Peer& peer, const wire::Control& control) {
  // A host's agent names the node that finished; a node's connection is it.
  const std::string& id = peer.host ? control.executor_id() : peer.executor_id;
  NodeRecord* node = peer.Carries(id) ? table_.Find(id) : nullptr;
  if (node == nullptr || node->connection != peer.id()) {
    context_.Log("LEAVE from " + peer.address() + ", which is no registered node");
    return;
  }
  if (!node->alive) return;
  node->alive = false;
  node->left = true;
  context_.Log(NodeTable::Describe(*node) + " finished and left");
  context_.Report(NodeEvent{NodeEvent::Kind::kLeft, node->info, "finished and left", {}});
}

void Control::HandleStopNode(Peer& peer, const wire::Control& control) {
  if (!Permitted(peer, "", "stop executor " + wire::PrintableBytes(control.executor_id(), 64))) {
    return;
  }
  NodeRecord* node = table_.Find(control.executor_id());
  if (node == nullptr) {
    context_.Log("STOP_NODE from " + peer.address() + " names unknown executor '" +
                 control.executor_id() + "'");
    return;
  }
  wire::Control relay;
  relay.set_kind(wire::Control::STOP_NODE);
  relay.set_executor_id(control.executor_id());
  if (!RelayStop(*node, relay)) {
    context_.Log("cannot stop " + NodeTable::Describe(*node) + ": connection closed");
  }
}

Status Control::StopNode(const std::string& executor_id) {
  NodeRecord* node = table_.Find(executor_id);
  if (node == nullptr) {
    return Status::NotFound("no node with executor id '" + executor_id + "' (" +
                            table_.DescribeRegistrations() + ")");
  }
  wire::Control control;
  control.set_kind(wire::Control::STOP_NODE);
  control.set_executor_id(executor_id);
  if (!RelayStop(*node, control)) {
    return Status::Unavailable("cannot stop " + NodeTable::Describe(*node) +
                               ": its connection is closed");
  }
  return Status::Ok();
}

void Control::StopAll() {
  wire::Control control;
  control.set_kind(wire::Control::STOP_ALL);
  // A send may close its connection (a peer over its write bound), and
  // before the barrier a close removes the registration from the table:
  // walk a copy of the ids, not the table.
  std::vector<std::string> ids;
  for (const NodeRecord& node : table_.nodes()) ids.push_back(node.info.executor_id);
  for (const std::string& id : ids) {
    if (NodeRecord* node = table_.Find(id)) RelayStop(*node, control);
  }
}

void Control::SendReform(int round, const std::string& reason) {
  wire::Control control;
  control.set_kind(wire::Control::REFORM);
  control.set_round(static_cast<uint32_t>(round));
  control.set_message(reason);
  for (const NodeRecord& node : table_.nodes()) {
    // A node that left (its program finished) is still a member.
    if (node.stop_sent || node.connection == 0) continue;
    Peer* peer = context_.FindPeer(node.connection);
    if (peer != nullptr && peer->open()) peer->Send(wire::CONTROL, control);
  }
}

bool Control::RelayStop(NodeRecord& node, const wire::Control& control) {
  node.stop_sent = true;
  Peer* peer = node.connection == 0 ? nullptr : context_.FindPeer(node.connection);
  if (peer == nullptr || !peer->open()) return false;
  peer->Send(wire::CONTROL, control);
  return true;
}

}  // namespace drover::rendezvous_internal

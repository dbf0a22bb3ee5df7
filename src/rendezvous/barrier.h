// Barrier: registration and the barrier (docs/protocol.md, "Messages").
// Before the barrier, REGISTER adds a node to the NodeTable (a retried task
// replaces its entry and its earlier connection); when the last slot fills,
// the slots are assigned, the cluster is encoded once (cluster_frame.h) and
// every node gets its CLUSTER frame. After it, a member that reconnects
// while alive gets its slot and the cluster again, and anyone else
// kClusterFormed. The reservation timeout ends the reservation, naming the
// registered and the missing. The server owns the timer and calls
// OnReservationTimeout.
//
// Owns the encoded cluster; the nodes are the NodeTable's. Called only on
// the server's event loop.

#ifndef DROVER_SRC_RENDEZVOUS_BARRIER_H_
#define DROVER_SRC_RENDEZVOUS_BARRIER_H_

#include <string>
#include <utility>

#include "drover.pb.h"
#include "drover/rendezvous.h"
#include "rendezvous/cluster_frame.h"
#include "rendezvous/node_table.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"

namespace drover::rendezvous_internal {

struct BarrierOptions {
  std::string cluster_id;
  Milliseconds heartbeat_interval{1'000};     // sent to every node with the cluster
  Milliseconds reservation_timeout{600'000};  // for the timeout's message
};

class Barrier {
 public:
  // `table` and `context` must outlive the Barrier.
  Barrier(BarrierOptions options, NodeTable& table, ServerContext& context)
      : options_(std::move(options)), table_(table), context_(context) {}

  // REGISTER from an authenticated peer.
  void HandleRegister(Peer& peer, const wire::Register& request);
  // Before the barrier, `node`'s connection (from `address`) closed: a node
  // gone before the barrier must not count towards it; a retried task
  // registers again. REQUIRES: the phase is kReserving.
  void Disconnected(const NodeRecord& node, const std::string& address);
  // The reservation timed out: every waiting node gets
  // RESERVATION_TIMEOUT, and the phase becomes kStopped. Nothing once the
  // cluster formed.
  void OnReservationTimeout();

 private:
  void Rejoin(Peer& peer, const std::string& executor_id);
  void Reserve(Peer& peer, const wire::NodeInfo& node);
  void Acknowledge(Peer& peer);
  void FormCluster();
  void SendCluster(const NodeRecord& node);

  const BarrierOptions options_;
  NodeTable& table_;
  ServerContext& context_;
  EncodedCluster cluster_;  // once formed
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_BARRIER_H_

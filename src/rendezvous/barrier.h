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
// Owns the encoded cluster and each node's own placement (28 bytes a node);
// the nodes are the NodeTable's, and the FormedCluster the driver reads is
// laid out again from them when asked (Formed). Called only on the server's
// event loop.

#ifndef DROVER_SRC_RENDEZVOUS_BARRIER_H_
#define DROVER_SRC_RENDEZVOUS_BARRIER_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "drover.pb.h"
#include "drover/rendezvous.h"
#include "rendezvous/cluster_frame.h"
#include "rendezvous/node_info_codec.h"
#include "rendezvous/node_table.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"

namespace drover::rendezvous_internal {

struct BarrierOptions {
  std::string cluster_id;
  HeartbeatTiming heartbeats;                 // sent to every node with the cluster
  Milliseconds reservation_timeout{600'000};  // for the timeout's message
  // Once formed, a newcomer waits for the next round (a joiner) instead of
  // being refused, and Reform starts that round.
  bool elastic = false;
  // NODE_LIST_AUTO nodes get the node list up to this many nodes.
  int node_list_limit = 1024;
};

class Barrier {
 public:
  // `table` and `context` must outlive the Barrier.
  Barrier(BarrierOptions options, NodeTable& table, ServerContext& context)
      : options_(std::move(options)),
        table_(table),
        context_(context),
        cluster_id_(options_.cluster_id) {}

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

  // Elastic: the next round. The table must have been Reset for it; the
  // admitted joiners register at once, and the cluster forms if they fill it.
  // With `hold`, only FormWithRegistered forms it.
  void Reform(const std::string& cluster_id, int round, const std::string& reason,
              const std::vector<std::string>& admit, bool hold);
  // Elastic, while reserving: forms with the registered nodes now, if at
  // least `minimum`.
  Result<int> FormWithRegistered(int minimum);
  // A closed connection that was a parked joiner's.
  void ForgetJoiner(uint64_t connection);
  // The parked joiners' connections (StopAll reaches them too).
  std::vector<uint64_t> JoinerConnections() const;
  // The formed cluster, as the driver reads it (WaitForCluster): laid out
  // again from the table, the same layout every node got, as PlaceNodes
  // depends on the nodes alone. The server keeps no copy: at 100,000 nodes
  // one is 73 MB. kFailedPrecondition before this round formed.
  Result<FormedCluster> Formed() const;

 private:
  struct Joiner {
    NodeInfo info;
    uint64_t connection = 0;
  };
  bool AcceptHost(Peer& peer, const wire::Register& request);
  void TakeOver(Peer& old, const std::string& id);
  void Park(Peer& peer, const wire::NodeInfo& node);
  void Rejoin(Peer& peer, const std::string& executor_id);
  void Reserve(Peer& peer, const wire::NodeInfo& node);
  void Acknowledge(Peer& peer);
  // Forms the cluster once every slot is registered, unless the round is held.
  void FormIfFull();
  void FormCluster();
  // The layout of the table's nodes, in slot order, as the driver reads it.
  Result<FormedCluster> LayOut() const;
  // The table's nodes in slot order and their roles: what the nodes' frames
  // are built from, without a copy of any node.
  Result<ClusterColumns> PlaceColumns() const;
  // Encodes `columns` and keeps each slot's own placement (moved out of
  // it); counts the nodes that want the node list into *with_list. False
  // (published) on failure.
  bool KeepLayout(ClusterColumns& columns, int* with_list);
  // Sends the cluster to the next kClusterSendBatch nodes in slot order, and
  // posts the batch after them; nothing once `generation` is not this
  // round's.
  void SendClusterBatch(uint64_t generation);
  void SendCluster(const NodeRecord& node);
  bool WantsNodeList(const Peer& peer) const;
  // Encodes `shared` into *out; false (logged, published) when zlib fails.
  bool Encode(const wire::SharedCluster& shared, EncodedCluster* out);
  // The node list's encoding, made the first time a node wants it (from
  // `columns` when given, else placed again from the table).
  const EncodedCluster* NodeListEncoding(const ClusterColumns* columns = nullptr);

  const BarrierOptions options_;
  NodeTable& table_;
  ServerContext& context_;
  std::string cluster_id_;  // this round's; options_.cluster_id first
  int round_ = 0;
  std::string round_reason_;
  // Once formed: the cluster without the node list, and each slot's own
  // placement for its frame.
  EncodedCluster summary_;
  std::vector<TaskRole> own_placements_;
  EncodedCluster node_list_;               // once a node wants it
  std::map<std::string, Joiner> joiners_;  // by executor id, elastic only
  bool hold_ = false;                      // this round forms when told
  // The formed cluster goes out one batch of nodes per turn of the loop, so
  // that a batch's frames are written, and their memory reused, before the
  // next is built: at 100,000 nodes, every frame built at once held 29 MB.
  static constexpr size_t kClusterSendBatch = 1024;
  size_t unsent_from_ = 0;        // slot order: the nodes not yet sent the cluster
  uint64_t send_generation_ = 0;  // one per formed round
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_BARRIER_H_

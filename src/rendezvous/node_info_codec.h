// NodeInfo, FeedProgress, metrics and the formed cluster <-> their wire forms
// (drover.proto), shared by the rendezvous server and client. Pure functions; thread-safe.

#ifndef DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_
#define DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_

#include "drover.pb.h"
#include "drover/rendezvous.h"

namespace drover::rendezvous_internal {

wire::NodeInfo NodeToWire(const NodeInfo& node);
NodeInfo NodeFromWire(const wire::NodeInfo& node);
wire::FeedProgress FeedProgressToWire(const FeedProgress& progress);
FeedProgress FeedProgressFromWire(const wire::FeedProgress& progress);
void MetricsToWire(const std::vector<MetricValue>& metrics,
                   google::protobuf::RepeatedPtrField<wire::Metric>* out);
// Keeps the first kMaxMetrics metrics with valid names; drops the rest (a
// node's reports are bounded wherever they are held).
std::vector<MetricValue> MetricsFromWire(
    const google::protobuf::RepeatedPtrField<wire::Metric>& in);

// Where `node` is, as it registered: its role, host, ports and GPUs; the rest
// of its placement (chief, ranks, share) is PlaceTasks's to fill in.
Placement NodePlacement(const NodeInfo& node);

// Lays out cluster.placements and cluster.spec from cluster.nodes, which
// carry their roles already: the one layout every node and the driver read.
Status PlaceNodes(FormedCluster& cluster);

// The formed cluster as the server holds it: its nodes, borrowed, in slot
// order, and the roles PlaceRoles gave them; no Placement and no spec, so
// laying out 100,000 nodes costs tens of bytes a node, not a copy of each.
struct ClusterColumns {
  std::string cluster_id;
  int round = 0;
  std::string round_reason;
  std::vector<const NodeInfo*> nodes;
  PlacedRoles placed;  // placed.roles[i] is nodes[i]'s
};

// Places `nodes`, which carry their roles already, as PlaceNodes does: the
// same roles and the same errors.
Result<PlacedRoles> PlaceNodeRoles(const std::vector<const NodeInfo*>& nodes);
// `cluster`'s columns, borrowing its nodes and taking its placements as
// they are.
ClusterColumns ColumnsOf(const FormedCluster& cluster);

// The part of CLUSTER every node shares: the nodes, their placements
// (cluster.placements[i] is cluster.nodes[i]'s) and the sizes they share.
wire::SharedCluster SharedClusterToWire(const ClusterColumns& cluster);
wire::SharedCluster SharedClusterToWire(const FormedCluster& cluster);
// The cluster back, placements and spec included (self and the heartbeat
// interval are the frame's own). kInvalidArgument saying what does not fit:
// the counts, a rank or the master out of range, a task placed twice.
Result<FormedCluster> SharedClusterFromWire(const wire::SharedCluster& shared);

// Without the node list (docs/protocol.md, "The node list"): the part every
// node shares is the sizes and rank 0's entry; each node's own entry and
// placement travel in its own frame.
wire::SharedCluster ClusterSummaryToWire(const ClusterColumns& cluster);
wire::SharedCluster ClusterSummaryToWire(const FormedCluster& cluster);

// A node's own placement as its CLUSTER frame carries it (wire::OwnPlacement)
// is its TaskRole: what the server keeps of each node once the cluster
// formed.
TaskRole OwnPlacementOf(const Placement& placement);
wire::OwnPlacement OwnPlacementToWire(const TaskRole& placement);
// A node's cluster from the summary and its own part: nodes and placements
// hold that node alone (self 0), has_node_list is false, spec is empty.
// kInvalidArgument saying what does not fit.
Result<FormedCluster> OwnClusterFromWire(const wire::SharedCluster& summary,
                                         const wire::NodeInfo& node,
                                         const wire::OwnPlacement& placement);

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_

#include "rendezvous/node_info_codec.h"

#include <string>
#include <utility>

namespace drover::rendezvous_internal {

wire::NodeInfo NodeToWire(const NodeInfo& node) {
  wire::NodeInfo out;
  out.set_executor_id(node.executor_id);
  out.set_host(node.host);
  for (uint32_t port : node.ports) out.add_ports(port);
  out.set_pid(node.pid);
  for (int32_t gpu : node.gpus) out.add_gpus(gpu);
  out.set_agent_address(node.agent_address);
  out.set_feed_socket(node.feed_socket);
  out.set_job_name(node.job_name);
  out.set_task_index(node.task_index);
  return out;
}

NodeInfo NodeFromWire(const wire::NodeInfo& node) {
  NodeInfo out;
  out.executor_id = node.executor_id();
  out.host = node.host();
  out.ports.assign(node.ports().begin(), node.ports().end());
  out.pid = node.pid();
  out.gpus.assign(node.gpus().begin(), node.gpus().end());
  out.agent_address = node.agent_address();
  out.feed_socket = node.feed_socket();
  out.job_name = node.job_name();
  out.task_index = node.task_index();
  return out;
}

wire::FeedProgress FeedProgressToWire(const FeedProgress& progress) {
  wire::FeedProgress out;
  out.set_records(progress.records);
  out.set_bytes(progress.bytes);
  out.set_partitions_done(progress.partitions_done);
  out.set_partitions_total(progress.partitions_total);
  out.set_share_bytes(progress.share_bytes);
  out.set_epoch(progress.epoch);
  out.set_epochs(progress.epochs);
  out.set_queue_bytes(progress.queue_bytes);
  out.set_queue_capacity(progress.queue_capacity);
  out.set_feeder_restarts(progress.feeder_restarts);
  out.set_results(progress.results);
  return out;
}

FeedProgress FeedProgressFromWire(const wire::FeedProgress& progress) {
  FeedProgress out;
  out.records = progress.records();
  out.bytes = progress.bytes();
  out.partitions_done = progress.partitions_done();
  out.partitions_total = progress.partitions_total();
  out.share_bytes = progress.share_bytes();
  out.epoch = progress.epoch();
  out.epochs = progress.epochs();
  out.queue_bytes = progress.queue_bytes();
  out.queue_capacity = progress.queue_capacity();
  out.feeder_restarts = progress.feeder_restarts();
  out.results = progress.results();
  return out;
}

Placement NodePlacement(const NodeInfo& node) {
  Placement out;
  out.job = node.job_name;
  out.index = node.task_index;
  out.host = node.host;
  out.ports = node.ports;
  out.gpus = node.gpus;
  return out;
}

namespace {

wire::Placement PlacementToWire(const Placement& placement) {
  wire::Placement out;
  out.set_chief(placement.chief);
  if (placement.rank) {
    wire::Placement::Rank* rank = out.mutable_rank();
    rank->set_rank(static_cast<uint32_t>(placement.rank->rank));
    rank->set_local_rank(static_cast<uint32_t>(placement.rank->local_rank));
    rank->set_local_world_size(static_cast<uint32_t>(placement.rank->local_world_size));
    rank->set_group_rank(static_cast<uint32_t>(placement.rank->group_rank));
    rank->set_role_rank(static_cast<uint32_t>(placement.rank->role_rank));
    rank->set_role_world_size(static_cast<uint32_t>(placement.rank->role_world_size));
  }
  return out;
}

Placement PlacementFromWire(const NodeInfo& node, const wire::Placement& wire) {
  Placement out = NodePlacement(node);
  out.chief = wire.chief();
  if (wire.has_rank()) {
    RankInfo rank;
    rank.rank = static_cast<int>(wire.rank().rank());
    rank.local_rank = static_cast<int>(wire.rank().local_rank());
    rank.local_world_size = static_cast<int>(wire.rank().local_world_size());
    rank.group_rank = static_cast<int>(wire.rank().group_rank());
    rank.role_rank = static_cast<int>(wire.rank().role_rank());
    rank.role_world_size = static_cast<int>(wire.rank().role_world_size());
    out.rank = rank;
  }
  return out;
}

}  // namespace

wire::SharedCluster SharedClusterToWire(const FormedCluster& cluster) {
  wire::SharedCluster out;
  out.set_cluster_id(cluster.cluster_id);
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    *out.add_nodes() = NodeToWire(cluster.nodes[i]);
    const Placement& placement = cluster.placements[i];
    *out.add_placements() = PlacementToWire(placement);
    if (!placement.rank) continue;
    out.set_world_size(static_cast<uint32_t>(placement.rank->world_size));
    out.set_group_world_size(static_cast<uint32_t>(placement.rank->group_world_size));
    if (placement.rank->rank == 0) out.set_master(static_cast<uint32_t>(i));
  }
  return out;
}

Result<FormedCluster> SharedClusterFromWire(const wire::SharedCluster& shared) {
  if (shared.placements_size() != shared.nodes_size()) {
    return Status::InvalidArgument(std::to_string(shared.nodes_size()) + " nodes but " +
                                   std::to_string(shared.placements_size()) + " placements");
  }
  FormedCluster out;
  out.cluster_id = shared.cluster_id();
  out.nodes.reserve(static_cast<size_t>(shared.nodes_size()));
  out.placements.reserve(static_cast<size_t>(shared.nodes_size()));
  for (int i = 0; i < shared.nodes_size(); ++i) {
    out.nodes.push_back(NodeFromWire(shared.nodes(i)));
    out.placements.push_back(PlacementFromWire(out.nodes.back(), shared.placements(i)));
  }
  const uint32_t world_size = shared.world_size();
  bool ranked = false;
  for (const Placement& placement : out.placements) ranked = ranked || placement.rank.has_value();
  if (ranked && shared.master() >= out.placements.size()) {
    return Status::InvalidArgument("the master is node " + std::to_string(shared.master()) +
                                   " of " + std::to_string(out.placements.size()));
  }
  for (Placement& placement : out.placements) {
    if (!placement.rank) continue;
    RankInfo& rank = *placement.rank;
    if (static_cast<uint32_t>(rank.rank) >= world_size) {
      return Status::InvalidArgument("task " + placement.Task() + " has rank " +
                                     std::to_string(rank.rank) + " of " +
                                     std::to_string(world_size));
    }
    rank.world_size = static_cast<int>(world_size);
    rank.group_world_size = static_cast<int>(shared.group_world_size());
    PointAtMaster(out.placements[shared.master()], rank);
    placement.feed = FeedShare{rank.rank, rank.world_size};
  }
  DROVER_ASSIGN_OR_RETURN(out.spec, ClusterSpecOf(out.placements));
  return out;
}

}  // namespace drover::rendezvous_internal

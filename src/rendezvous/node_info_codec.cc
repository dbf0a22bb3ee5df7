#include "rendezvous/node_info_codec.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
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
  out.set_ingest(progress.ingest);
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
  // A way's name ("extent-read"); anything else is not shown.
  const std::string& ingest = progress.ingest();
  if (ingest.size() <= 16 && std::all_of(ingest.begin(), ingest.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || c == '-';
      })) {
    out.ingest = ingest;
  }
  return out;
}

void MetricsToWire(const std::vector<MetricValue>& metrics,
                   google::protobuf::RepeatedPtrField<wire::Metric>* out) {
  for (const MetricValue& metric : metrics) {
    wire::Metric* added = out->Add();
    added->set_name(metric.name);
    added->set_value(metric.value);
    added->set_has_step(metric.step.has_value());
    if (metric.step) added->set_step(*metric.step);
  }
}

std::vector<MetricValue> MetricsFromWire(
    const google::protobuf::RepeatedPtrField<wire::Metric>& in) {
  std::vector<MetricValue> metrics;
  for (const wire::Metric& metric : in) {
    if (metrics.size() == kMaxMetrics) break;
    if (!ValidMetricName(metric.name())) continue;
    MetricValue value{metric.name(), metric.value(), std::nullopt};
    if (metric.has_step()) value.step = metric.step();
    metrics.push_back(std::move(value));
  }
  return metrics;
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

// The columns of wire::Placements, each exactly one entry per node.
bool ColumnsFit(const wire::Placements& p, int nodes) {
  return p.chief_size() == nodes && p.ranked_size() == nodes && p.rank_step_size() == nodes &&
         p.local_rank_size() == nodes && p.local_world_size_size() == nodes &&
         p.group_rank_step_size() == nodes && p.role_rank_step_size() == nodes &&
         p.role_world_size_size() == nodes;
}

// The sizes a cluster with every node knows from its list.
void CountNodes(FormedCluster& cluster) {
  cluster.node_count = static_cast<int>(cluster.nodes.size());
  cluster.job_sizes.clear();
  for (const NodeInfo& node : cluster.nodes) ++cluster.job_sizes[node.job_name];
  cluster.has_node_list = true;
}

}  // namespace

Status PlaceNodes(FormedCluster& cluster) {
  cluster.placements.clear();
  cluster.placements.reserve(cluster.nodes.size());
  for (const NodeInfo& node : cluster.nodes) cluster.placements.push_back(NodePlacement(node));
  DROVER_RETURN_IF_ERROR(PlaceTasks(cluster.placements));
  DROVER_ASSIGN_OR_RETURN(cluster.spec, ClusterSpecOf(cluster.placements));
  CountNodes(cluster);
  return Status::Ok();
}

Result<PlacedRoles> PlaceNodeRoles(const std::vector<const NodeInfo*>& nodes) {
  std::vector<TaskKey> keys;
  keys.reserve(nodes.size());
  for (const NodeInfo* node : nodes) {
    keys.push_back(TaskKey{node->job_name, node->task_index, node->host, !node->ports.empty()});
  }
  return PlaceRoles(keys);
}

ClusterColumns ColumnsOf(const FormedCluster& cluster) {
  ClusterColumns out;
  out.cluster_id = cluster.cluster_id;
  out.round = cluster.round;
  out.round_reason = cluster.round_reason;
  out.nodes.reserve(cluster.nodes.size());
  for (const NodeInfo& node : cluster.nodes) out.nodes.push_back(&node);
  out.placed.roles.reserve(cluster.placements.size());
  for (size_t i = 0; i < cluster.placements.size(); ++i) {
    const Placement& placement = cluster.placements[i];
    out.placed.roles.push_back(OwnPlacementOf(placement));
    if (!placement.rank) continue;
    out.placed.world_size = placement.rank->world_size;
    out.placed.group_world_size = placement.rank->group_world_size;
    if (placement.rank->rank == 0) out.placed.master = i;
  }
  return out;
}

namespace {

void SetRound(const ClusterColumns& cluster, wire::SharedCluster& out) {
  out.set_cluster_id(cluster.cluster_id);
  out.set_round(static_cast<uint32_t>(cluster.round));
  out.set_round_reason(cluster.round_reason);
}

int32_t Step(uint32_t now, uint32_t before) {
  return static_cast<int32_t>(now) - static_cast<int32_t>(before);
}

}  // namespace

wire::SharedCluster SharedClusterToWire(const ClusterColumns& cluster) {
  wire::SharedCluster out;
  SetRound(cluster, out);
  wire::Placements* columns = out.mutable_placements();
  TaskRole previous;  // the last ranked node's, for the delta-coded columns
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    *out.add_nodes() = NodeToWire(*cluster.nodes[i]);
    const TaskRole& role = cluster.placed.roles[i];
    const TaskRole& rank = role.ranked ? role : previous;
    columns->add_chief(role.chief);
    columns->add_ranked(role.ranked);
    columns->add_rank_step(Step(rank.rank, previous.rank));
    columns->add_local_rank(role.ranked ? role.local_rank : 0);
    columns->add_local_world_size(role.ranked ? role.local_world_size : 0);
    columns->add_group_rank_step(Step(rank.group_rank, previous.group_rank));
    columns->add_role_rank_step(Step(rank.role_rank, previous.role_rank));
    columns->add_role_world_size(role.ranked ? role.role_world_size : 0);
    if (role.ranked) previous = role;
  }
  if (cluster.placed.master) {
    out.set_world_size(static_cast<uint32_t>(cluster.placed.world_size));
    out.set_group_world_size(static_cast<uint32_t>(cluster.placed.group_world_size));
    out.set_master(static_cast<uint32_t>(*cluster.placed.master));
  }
  return out;
}

wire::SharedCluster SharedClusterToWire(const FormedCluster& cluster) {
  return SharedClusterToWire(ColumnsOf(cluster));
}

Result<FormedCluster> SharedClusterFromWire(const wire::SharedCluster& shared) {
  const int count = shared.nodes_size();
  const wire::Placements& columns = shared.placements();
  if (!ColumnsFit(columns, count)) {
    return Status::InvalidArgument(std::to_string(count) +
                                   " nodes but placement columns of other lengths");
  }
  FormedCluster out;
  out.cluster_id = shared.cluster_id();
  out.round = static_cast<int>(shared.round());
  out.round_reason = shared.round_reason();
  out.nodes.reserve(static_cast<size_t>(count));
  out.placements.reserve(static_cast<size_t>(count));
  const uint32_t world_size = shared.world_size();
  int64_t rank = 0, group_rank = 0, role_rank = 0;  // the running sums
  bool any_ranked = false;
  for (int i = 0; i < count; ++i) {
    out.nodes.push_back(NodeFromWire(shared.nodes(i)));
    Placement placement = NodePlacement(out.nodes.back());
    placement.chief = columns.chief(i);
    rank += columns.rank_step(i);
    group_rank += columns.group_rank_step(i);
    role_rank += columns.role_rank_step(i);
    if (columns.ranked(i)) {
      if (rank < 0 || rank >= world_size) {
        return Status::InvalidArgument("task " + placement.Task() + " has rank " +
                                       std::to_string(rank) + " of " + std::to_string(world_size));
      }
      any_ranked = true;
      const TaskRole role{.rank = static_cast<uint32_t>(rank),
                          .local_rank = columns.local_rank(i),
                          .local_world_size = columns.local_world_size(i),
                          .group_rank = static_cast<uint32_t>(group_rank),
                          .role_rank = static_cast<uint32_t>(role_rank),
                          .role_world_size = columns.role_world_size(i),
                          .ranked = true};
      const RankInfo info = RankInfoOf(role, static_cast<int>(world_size),
                                       static_cast<int>(shared.group_world_size()));
      placement.rank = info;
      placement.feed = FeedShare{info.rank, info.world_size};
    }
    out.placements.push_back(std::move(placement));
  }
  if (any_ranked) {
    const uint32_t master = shared.master();
    if (master >= out.placements.size() || !out.placements[master].rank ||
        out.placements[master].rank->rank != 0) {
      return Status::InvalidArgument("the master is node " + std::to_string(master) + " of " +
                                     std::to_string(out.placements.size()) + ", not rank 0");
    }
  }
  for (Placement& placement : out.placements) {
    if (placement.rank) PointAtMaster(out.placements[shared.master()], *placement.rank);
  }
  DROVER_ASSIGN_OR_RETURN(out.spec, ClusterSpecOf(out.placements));
  CountNodes(out);
  return out;
}

wire::SharedCluster ClusterSummaryToWire(const ClusterColumns& cluster) {
  wire::SharedCluster out;
  SetRound(cluster, out);
  out.set_node_count(static_cast<uint32_t>(cluster.nodes.size()));
  std::map<std::string_view, uint32_t> job_sizes;  // in name order, as FormedCluster's
  for (const NodeInfo* node : cluster.nodes) ++job_sizes[node->job_name];
  for (const auto& [job, tasks] : job_sizes) {
    wire::JobSize* size = out.add_jobs();
    size->set_job_name(std::string(job));
    size->set_tasks(tasks);
  }
  if (cluster.placed.master) {
    const size_t master = *cluster.placed.master;
    out.set_world_size(static_cast<uint32_t>(cluster.placed.world_size));
    out.set_group_world_size(static_cast<uint32_t>(cluster.placed.group_world_size));
    out.set_master(static_cast<uint32_t>(master));
    *out.mutable_master_node() = NodeToWire(*cluster.nodes[master]);
  }
  return out;
}

wire::SharedCluster ClusterSummaryToWire(const FormedCluster& cluster) {
  return ClusterSummaryToWire(ColumnsOf(cluster));
}

TaskRole OwnPlacementOf(const Placement& placement) {
  TaskRole out;
  out.chief = placement.chief;
  if (!placement.rank) return out;
  const RankInfo& rank = *placement.rank;
  out.ranked = true;
  out.rank = static_cast<uint32_t>(rank.rank);
  out.local_rank = static_cast<uint32_t>(rank.local_rank);
  out.local_world_size = static_cast<uint32_t>(rank.local_world_size);
  out.group_rank = static_cast<uint32_t>(rank.group_rank);
  out.role_rank = static_cast<uint32_t>(rank.role_rank);
  out.role_world_size = static_cast<uint32_t>(rank.role_world_size);
  return out;
}

wire::OwnPlacement OwnPlacementToWire(const TaskRole& placement) {
  wire::OwnPlacement out;
  out.set_chief(placement.chief);
  if (!placement.ranked) return out;
  out.set_ranked(true);
  out.set_rank(placement.rank);
  out.set_local_rank(placement.local_rank);
  out.set_local_world_size(placement.local_world_size);
  out.set_group_rank(placement.group_rank);
  out.set_role_rank(placement.role_rank);
  out.set_role_world_size(placement.role_world_size);
  return out;
}

Result<FormedCluster> OwnClusterFromWire(const wire::SharedCluster& summary,
                                         const wire::NodeInfo& node,
                                         const wire::OwnPlacement& placement) {
  FormedCluster out;
  out.cluster_id = summary.cluster_id();
  out.round = static_cast<int>(summary.round());
  out.round_reason = summary.round_reason();
  out.node_count = static_cast<int>(summary.node_count());
  out.has_node_list = false;
  int64_t tasks = 0;
  for (const wire::JobSize& size : summary.jobs()) {
    out.job_sizes[size.job_name()] = static_cast<int>(size.tasks());
    tasks += size.tasks();
  }
  if (tasks != out.node_count) {
    return Status::InvalidArgument("the jobs have " + std::to_string(tasks) +
                                   " tasks but the cluster " + std::to_string(out.node_count) +
                                   " nodes");
  }
  out.nodes.push_back(NodeFromWire(node));
  Placement own = NodePlacement(out.nodes.back());
  own.chief = placement.chief();
  if (placement.ranked()) {
    const uint32_t world_size = summary.world_size();
    if (placement.rank() >= world_size || placement.local_rank() >= placement.local_world_size() ||
        placement.group_rank() >= summary.group_world_size() ||
        placement.role_rank() >= placement.role_world_size()) {
      return Status::InvalidArgument("task " + own.Task() + " has a rank out of range (rank " +
                                     std::to_string(placement.rank()) + " of " +
                                     std::to_string(world_size) + ")");
    }
    if (!summary.has_master_node() || summary.master_node().ports().empty()) {
      return Status::InvalidArgument("task " + own.Task() + " is ranked but rank 0 is not named");
    }
    const TaskRole role{.rank = placement.rank(),
                        .local_rank = placement.local_rank(),
                        .local_world_size = placement.local_world_size(),
                        .group_rank = placement.group_rank(),
                        .role_rank = placement.role_rank(),
                        .role_world_size = placement.role_world_size(),
                        .ranked = true};
    RankInfo rank = RankInfoOf(role, static_cast<int>(world_size),
                               static_cast<int>(summary.group_world_size()));
    PointAtMaster(NodePlacement(NodeFromWire(summary.master_node())), rank);
    own.rank = rank;
    own.feed = FeedShare{rank.rank, rank.world_size};
  }
  out.placements.push_back(std::move(own));
  out.self = 0;
  return out;
}

}  // namespace drover::rendezvous_internal

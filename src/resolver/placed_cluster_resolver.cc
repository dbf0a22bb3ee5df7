#include "drover/placed_cluster_resolver.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "resolver/resolver_env.h"

namespace drover {

Result<ClusterSpec> PlacedClusterResolver::cluster_spec() const {
  DROVER_ASSIGN_OR_RETURN(std::vector<TaskPlacement> placements, Placement());
  DROVER_ASSIGN_OR_RETURN(int own_rank, rank());
  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& [name, count] : configured_jobs()) jobs[name];  // keep empty jobs
  for (const TaskPlacement& p : placements) {
    jobs[p.job].push_back(p.host + ":" + std::to_string(p.port));
  }
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) DROVER_RETURN_IF_ERROR(spec.AddJob(name, std::move(tasks)));
  if (auto_set_gpu()) {
    env_->Set("CUDA_VISIBLE_DEVICES", resolver_internal::JoinComma(placements[own_rank].gpus));
  }
  return spec;
}

Result<std::string> PlacedClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  return resolver_internal::MasterFor(*this, task_type, task_id, rpc_layer);
}

Result<AcceleratorMap> PlacedClusterResolver::num_accelerators(
    const std::optional<std::string>& task_type, std::optional<int> task_id) const {
  AcceleratorMap map;
  if (gpus_per_task_ > 0) map["GPU"] = gpus_per_task_;
  return map;
}

std::optional<std::string> PlacedClusterResolver::task_type() const {
  if (task_type_) return task_type_;
  return OwnTask().first;
}

std::optional<int> PlacedClusterResolver::task_id() const {
  if (task_id_) return task_id_;
  return OwnTask().second;
}

std::pair<std::optional<std::string>, std::optional<int>> PlacedClusterResolver::get_task_info()
    const {
  return {task_type(), task_id()};
}

std::pair<std::optional<std::string>, std::optional<int>> PlacedClusterResolver::OwnTask() const {
  Result<std::vector<TaskPlacement>> placements = Placement();
  Result<int> own_rank = rank();
  if (!placements.ok() || !own_rank.ok()) return {std::nullopt, std::nullopt};
  const TaskPlacement& own = (*placements)[*own_rank];
  return {own.job, own.task_index};
}

}  // namespace drover

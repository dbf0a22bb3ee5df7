#include "drover/framework_env.h"

#include <nlohmann/json.hpp>

namespace drover {

Result<std::string> MakeTfConfig(const ClusterSpec& cluster, std::string_view task_type,
                                 int task_index, const std::optional<std::string>& rpc_layer) {
  DROVER_RETURN_IF_ERROR(cluster.task_address(task_type, task_index).status());
  nlohmann::ordered_json config;
  config["cluster"] = nlohmann::ordered_json::parse(cluster.ToJson());
  config["task"] = {{"type", std::string(task_type)}, {"index", task_index}};
  // Estimator-era TensorFlow reads "cloud" as: the chief/master is a task of
  // the cluster, not an in-process master.
  if (cluster.has_job("chief") || cluster.has_job("master")) config["environment"] = "cloud";
  if (rpc_layer) config["rpc_layer"] = *rpc_layer;
  return config.dump();
}

Result<std::optional<RankInfo>> ComputeRank(const ClusterSpec& cluster, std::string_view task_type,
                                            int task_index, const FrameworkEnvOptions& options) {
  DROVER_ASSIGN_OR_RETURN(Placement placement,
                          PlacementOf(cluster, task_type, task_index, options.training_jobs));
  return placement.rank;
}

Result<std::map<std::string, std::string>> FrameworkEnvironment(
    const ClusterSpec& cluster, std::string_view task_type, int task_index,
    const FrameworkEnvOptions& options) {
  DROVER_ASSIGN_OR_RETURN(Placement placement,
                          PlacementOf(cluster, task_type, task_index, options.training_jobs));
  return FrameworkEnvironment(cluster, placement, options);
}

Result<std::map<std::string, std::string>> FrameworkEnvironment(
    const ClusterSpec& cluster, const Placement& task, const FrameworkEnvOptions& options) {
  std::map<std::string, std::string> vars;
  if (options.tensorflow) {
    DROVER_ASSIGN_OR_RETURN(vars["TF_CONFIG"],
                            MakeTfConfig(cluster, task.job, task.index, options.rpc_layer));
  }
  if (options.drover) {
    vars["DROVER_JOB_NAME"] = task.job;
    vars["DROVER_TASK_INDEX"] = std::to_string(task.index);
    vars["DROVER_CLUSTER_SPEC"] = cluster.ToJson();
  }
  if (!task.rank) return vars;
  const RankInfo& rank = *task.rank;
  if (options.torch) {
    vars["MASTER_ADDR"] = rank.master_host;
    vars["MASTER_PORT"] = std::to_string(options.master_port.value_or(rank.store_port));
    vars["RANK"] = std::to_string(rank.rank);
    vars["WORLD_SIZE"] = std::to_string(rank.world_size);
    vars["LOCAL_RANK"] = std::to_string(rank.local_rank);
    vars["LOCAL_WORLD_SIZE"] = std::to_string(rank.local_world_size);
    vars["GROUP_RANK"] = std::to_string(rank.group_rank);
    vars["GROUP_WORLD_SIZE"] = std::to_string(rank.group_world_size);
    vars["ROLE_NAME"] = task.job;
    vars["ROLE_RANK"] = std::to_string(rank.role_rank);
    vars["ROLE_WORLD_SIZE"] = std::to_string(rank.role_world_size);
  }
  if (options.jax) {
    vars["JAX_COORDINATOR_ADDRESS"] =
        JoinHostPort(rank.master_host, options.jax_coordinator_port.value_or(rank.master_port));
    vars["JAX_NUM_PROCESSES"] = std::to_string(rank.world_size);
    vars["JAX_PROCESS_ID"] = std::to_string(rank.rank);
  }
  return vars;
}

std::string FormatShellExports(const std::map<std::string, std::string>& vars) {
  std::string out;
  for (const auto& [name, value] : vars) {
    out += "export " + name + "='";
    for (char c : value) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    out += "'\n";
  }
  return out;
}

}  // namespace drover

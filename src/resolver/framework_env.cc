#include "drover/framework_env.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace drover {
namespace {

struct RankedTask {
  std::string job;
  int index;
  std::string host;
  int port;
};

std::string TaskName(std::string_view job, int index) {
  return std::string(job) + ":" + std::to_string(index);
}

Result<std::vector<RankedTask>> RankedTasks(const ClusterSpec& cluster,
                                            const std::vector<std::string>& training_jobs) {
  std::vector<RankedTask> ranked;
  for (const std::string& job : training_jobs) {
    if (!cluster.has_job(job)) continue;
    DROVER_ASSIGN_OR_RETURN(ClusterSpec::TaskMap tasks, cluster.job_task_map(job));
    for (const auto& [index, address] : tasks) {
      auto host_port = SplitHostPort(address);
      if (!host_port.ok()) return host_port.status().WithContext("task " + TaskName(job, index));
      ranked.push_back({job, index, host_port->first, host_port->second});
    }
  }
  return ranked;
}

RankInfo DescribeRank(const std::vector<RankedTask>& ranked, size_t rank) {
  RankInfo info;
  info.rank = static_cast<int>(rank);
  info.world_size = static_cast<int>(ranked.size());
  info.master_host = ranked.front().host;
  info.master_port = ranked.front().port;
  std::vector<std::string> hosts;  // in order of first appearance
  for (size_t r = 0; r < ranked.size(); ++r) {
    const RankedTask& task = ranked[r];
    if (std::find(hosts.begin(), hosts.end(), task.host) == hosts.end()) hosts.push_back(task.host);
    if (task.host == ranked[rank].host) {
      if (r < rank) ++info.local_rank;
      ++info.local_world_size;
    }
    if (task.job == ranked[rank].job) {
      if (r < rank) ++info.role_rank;
      ++info.role_world_size;
    }
  }
  info.group_world_size = static_cast<int>(hosts.size());
  info.group_rank =
      static_cast<int>(std::find(hosts.begin(), hosts.end(), ranked[rank].host) - hosts.begin());
  return info;
}

}  // namespace

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
  DROVER_RETURN_IF_ERROR(cluster.task_address(task_type, task_index).status());
  DROVER_ASSIGN_OR_RETURN(std::vector<RankedTask> ranked,
                          RankedTasks(cluster, options.training_jobs));
  for (size_t rank = 0; rank < ranked.size(); ++rank) {
    if (ranked[rank].job == task_type && ranked[rank].index == task_index) {
      return std::optional<RankInfo>(DescribeRank(ranked, rank));
    }
  }
  return std::optional<RankInfo>();
}

Result<std::map<std::string, std::string>> FrameworkEnvironment(
    const ClusterSpec& cluster, std::string_view task_type, int task_index,
    const FrameworkEnvOptions& options) {
  std::map<std::string, std::string> vars;
  DROVER_ASSIGN_OR_RETURN(std::optional<RankInfo> rank,
                          ComputeRank(cluster, task_type, task_index, options));
  if (options.tensorflow) {
    DROVER_ASSIGN_OR_RETURN(vars["TF_CONFIG"],
                            MakeTfConfig(cluster, task_type, task_index, options.rpc_layer));
  }
  if (options.drover) {
    vars["DROVER_JOB_NAME"] = std::string(task_type);
    vars["DROVER_TASK_INDEX"] = std::to_string(task_index);
    vars["DROVER_CLUSTER_SPEC"] = cluster.ToJson();
  }
  if (!rank) return vars;
  if (options.torch) {
    vars["MASTER_ADDR"] = rank->master_host;
    vars["MASTER_PORT"] = std::to_string(options.master_port.value_or(rank->master_port));
    vars["RANK"] = std::to_string(rank->rank);
    vars["WORLD_SIZE"] = std::to_string(rank->world_size);
    vars["LOCAL_RANK"] = std::to_string(rank->local_rank);
    vars["LOCAL_WORLD_SIZE"] = std::to_string(rank->local_world_size);
    vars["GROUP_RANK"] = std::to_string(rank->group_rank);
    vars["GROUP_WORLD_SIZE"] = std::to_string(rank->group_world_size);
    vars["ROLE_NAME"] = std::string(task_type);
    vars["ROLE_RANK"] = std::to_string(rank->role_rank);
    vars["ROLE_WORLD_SIZE"] = std::to_string(rank->role_world_size);
  }
  if (options.jax) {
    vars["JAX_COORDINATOR_ADDRESS"] =
        JoinHostPort(rank->master_host, options.jax_coordinator_port.value_or(rank->master_port));
    vars["JAX_NUM_PROCESSES"] = std::to_string(rank->world_size);
    vars["JAX_PROCESS_ID"] = std::to_string(rank->rank);
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

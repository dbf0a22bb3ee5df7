// FrameworkEnvironment: the reverse of a resolver. From a ClusterSpec and one
// task of it, builds the environment variables each framework reads at start:
//
//   TensorFlow  TF_CONFIG = {"cluster": ..., "task": {"type", "index"},
//               "environment": "cloud" when the cluster has a chief or master job,
//               "rpc_layer" when one is given}
//   PyTorch     MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
//               LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME,
//               ROLE_RANK, ROLE_WORLD_SIZE (torchrun's names and meanings)
//   JAX         JAX_COORDINATOR_ADDRESS (read by jax.distributed.initialize),
//               JAX_NUM_PROCESSES, JAX_PROCESS_ID
//   drover      DROVER_JOB_NAME, DROVER_TASK_INDEX, DROVER_CLUSTER_SPEC (JSON)
//
// Ranks come from the task's Placement (drover/placement.h, the one home of
// the role rule): rank 0 is the coordinator (MASTER_ADDR,
// JAX_COORDINATOR_ADDRESS); tasks of other jobs (ps, evaluator) get TF_CONFIG
// and drover's variables but no rank.
//
// Pure functions of their arguments; thread-safe.

#ifndef DROVER_FRAMEWORK_ENV_H_
#define DROVER_FRAMEWORK_ENV_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/cluster_spec.h"
#include "drover/host_port.h"
#include "drover/placement.h"
#include "drover/status.h"

namespace drover {

struct FrameworkEnvOptions {
  // Jobs whose tasks get a rank, in rank order. Jobs absent from the cluster
  // are skipped.
  std::vector<std::string> training_jobs = TrainingJobs();
  // Written into TF_CONFIG when set.
  std::optional<std::string> rpc_layer;
  // Overrides the store port for MASTER_PORT (RankInfo::store_port: rank 0's
  // second reserved port, else its address port, which TensorFlow's server
  // normally takes).
  std::optional<int> master_port;
  // Overrides rank 0's port for JAX_COORDINATOR_ADDRESS.
  std::optional<int> jax_coordinator_port;

  bool tensorflow = true;
  bool torch = true;
  bool jax = true;
  bool drover = true;
};

// The TF_CONFIG JSON for one task. kNotFound when the task is not in the cluster.
Result<std::string> MakeTfConfig(const ClusterSpec& cluster, std::string_view task_type,
                                 int task_index,
                                 const std::optional<std::string>& rpc_layer = std::nullopt);

// The task's rank, or nullopt when its job is not a training job.
Result<std::optional<RankInfo>> ComputeRank(const ClusterSpec& cluster, std::string_view task_type,
                                            int task_index,
                                            const FrameworkEnvOptions& options = {});

// All variables for one task, sorted by name.
Result<std::map<std::string, std::string>> FrameworkEnvironment(
    const ClusterSpec& cluster, std::string_view task_type, int task_index,
    const FrameworkEnvOptions& options = {});

// The same for a task already placed (the rendezvous' layout): its rank is
// taken as it is, and options.training_jobs is not used.
Result<std::map<std::string, std::string>> FrameworkEnvironment(const ClusterSpec& cluster,
                                                                const Placement& task,
                                                                const FrameworkEnvOptions& options);

// `export NAME='value'` lines, single-quoted for POSIX shells.
std::string FormatShellExports(const std::map<std::string, std::string>& vars);

}  // namespace drover

#endif  // DROVER_FRAMEWORK_ENV_H_

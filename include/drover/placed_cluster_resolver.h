// PlacedClusterResolver: the part SlurmClusterResolver and MPIClusterResolver
// share (TensorFlow makes its MPIClusterResolver a SlurmClusterResolver for the
// same reason). A subclass says where every rank runs (Placement()) and which
// rank this process is (rank()); from that this class builds the ClusterSpec
// (one job per name, tasks in rank order, empty configured jobs kept), sets
// CUDA_VISIBLE_DEVICES to this rank's GPUs when the subclass's options ask for
// it, answers master() by TensorFlow's rule, num_accelerators() from
// gpus_per_task, and task_type()/task_id() from this rank's placement unless
// they were set.
//
// Borrows the Environment, which must outlive it. Not thread-safe
// (cluster_spec() may set CUDA_VISIBLE_DEVICES).

#ifndef DROVER_PLACED_CLUSTER_RESOLVER_H_
#define DROVER_PLACED_CLUSTER_RESOLVER_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/cluster_resolver.h"
#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

class PlacedClusterResolver : public ClusterResolver {
 public:
  // Where one task (rank) runs.
  struct TaskPlacement {
    int rank = 0;
    std::string host;
    int local_index = 0;  // among the tasks of `host`, in rank order
    int port = 0;
    std::vector<std::string> gpus;  // CUDA_VISIBLE_DEVICES entries
    std::string job;
    int task_index = 0;
  };

  // Also sets CUDA_VISIBLE_DEVICES when auto_set_gpu is on.
  Result<ClusterSpec> cluster_spec() const override;
  using ClusterResolver::master;
  // "" when neither the arguments nor the resolver give a task.
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;
  using ClusterResolver::num_accelerators;
  // {"GPU": gpus_per_task}, or {} when it is 0.
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;

  // The set value, else this rank's job/index (nullopt when the environment
  // cannot be read).
  std::optional<std::string> task_type() const override;
  std::optional<int> task_id() const override;

  // TensorFlow's get_task_info(): (task_type(), task_id()).
  std::pair<std::optional<std::string>, std::optional<int>> get_task_info() const;

  // Every task's placement, in rank order.
  virtual Result<std::vector<TaskPlacement>> Placement() const = 0;
  // This process's rank.
  virtual Result<int> rank() const = 0;

  int gpus_per_node() const { return gpus_per_node_; }
  int gpus_per_task() const { return gpus_per_task_; }

 protected:
  explicit PlacedClusterResolver(Environment& env) : env_(&env) {}

  Environment& env() const { return *env_; }
  // The GPU IDs handed out, by position on a node.
  const std::vector<std::string>& gpu_ids() const { return gpu_ids_; }
  void set_gpus(int per_node, int per_task, std::vector<std::string> ids) {
    gpus_per_node_ = per_node;
    gpus_per_task_ = per_task;
    gpu_ids_ = std::move(ids);
  }

 private:
  // The subclass's options.jobs (jobs named there stay in the spec even when
  // empty) and options.auto_set_gpu.
  virtual const std::map<std::string, int>& configured_jobs() const = 0;
  virtual bool auto_set_gpu() const = 0;

  // This rank's (job, index), ignoring overrides.
  std::pair<std::optional<std::string>, std::optional<int>> OwnTask() const;

  Environment* env_;  // borrowed
  int gpus_per_node_ = 0;
  int gpus_per_task_ = 0;
  std::vector<std::string> gpu_ids_;
};

}  // namespace drover

#endif  // DROVER_PLACED_CLUSTER_RESOLVER_H_

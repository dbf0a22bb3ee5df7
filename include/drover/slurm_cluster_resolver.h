// SlurmClusterResolver: the cluster of a Slurm job step, from the SLURM_*
// variables srun exports to every task (TensorFlow's SlurmClusterResolver).
//
// Each Slurm task becomes one TensorFlow task. Task r (SLURM_PROCID r) runs on
// the node Slurm placed it on, listens on port_base + its index among the
// tasks of that node, and, when auto_set_gpu is on, gets gpus_per_task GPUs of
// that node through CUDA_VISIBLE_DEVICES. Jobs take consecutive ranks in
// job-name order: with {"ps": 1, "worker": 2}, rank 0 is ps:0 and ranks 1, 2
// are worker:0, worker:1.
//
// Variables read on every cluster_spec()/master() call (TensorFlow semantics,
// no caching), step-level first, then job-level:
//   SLURM_PROCID                                         this task's rank
//   SLURM_STEP_NUM_TASKS, SLURM_NTASKS                   number of tasks
//   SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST   hostlist
//   SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE      "2(x3),1"
//   SLURM_DISTRIBUTION                                   block (default), cyclic, plane=N
// Read once, in Create(), because the resolver itself rewrites
// CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES (the GPUs this task may hand
// out), then SLURM_STEP_GPUS, SLURM_JOB_GPUS, SLURM_GPUS_ON_NODE, then the
// host's GPU count, to default gpus_per_node.
//
// Errors: kNotFound when a required variable is missing (naming it, "not
// running inside a Slurm step?"); kInvalidArgument when one is garbled, when
// the jobs ask for a different number of tasks than Slurm started, when the
// tasks of a node need more GPUs than it has, or when the nodelist and the
// tasks-per-node list disagree.
//
// cluster_spec(), master(), num_accelerators(), task_type()/task_id() and
// get_task_info() are PlacedClusterResolver's, over Placement() and rank().
//
// The resolver borrows the Environment, which must outlive it. Not
// thread-safe (cluster_spec() may set CUDA_VISIBLE_DEVICES).

#ifndef DROVER_SLURM_CLUSTER_RESOLVER_H_
#define DROVER_SLURM_CLUSTER_RESOLVER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/environment.h"
#include "drover/placed_cluster_resolver.h"
#include "drover/status.h"

namespace drover {

class SlurmClusterResolver : public PlacedClusterResolver {
 public:
  struct Options {
    // Job name -> number of tasks. Empty: {"worker": <number of Slurm tasks>}.
    std::map<std::string, int> jobs;
    // The first port on every node; the k-th task of a node listens on
    // port_base + k.
    int port_base = 8888;
    // nullopt: the GPUs visible to this task (see above).
    std::optional<int> gpus_per_node;
    // nullopt: gpus_per_node / (most tasks on one node), rounded down; may be 0.
    std::optional<int> gpus_per_task;
    // The same number of tasks on every node of the nodelist, instead of
    // SLURM_STEP_TASKS_PER_NODE.
    std::optional<int> tasks_per_node;
    // Explicit (host, number of tasks) pairs, in placement order; replaces the
    // nodelist and tasks_per_node altogether (TensorFlow's dict form).
    std::vector<std::pair<std::string, int>> tasks_per_host;
    // Set CUDA_VISIBLE_DEVICES to this task's GPUs on every cluster_spec().
    // A task given no GPUs gets CUDA_VISIBLE_DEVICES="" (it sees none), so it
    // never grabs the GPUs of its neighbours.
    bool auto_set_gpu = true;
    std::string rpc_layer = "grpc";
  };

  // Reads the environment once to check it (as TensorFlow's constructor
  // raises) and to fix gpus_per_node/gpus_per_task.
  static Result<std::unique_ptr<SlurmClusterResolver>> Create(Options options, Environment& env);

  // Every task's placement, in rank order, as the environment says now.
  Result<std::vector<TaskPlacement>> Placement() const override;
  // SLURM_PROCID.
  Result<int> rank() const override;

  const Options& options() const { return options_; }

 private:
  SlurmClusterResolver(Options options, Environment& env);
  const std::map<std::string, int>& configured_jobs() const override { return options_.jobs; }
  bool auto_set_gpu() const override { return options_.auto_set_gpu; }

  Options options_;
};

}  // namespace drover

#endif  // DROVER_SLURM_CLUSTER_RESOLVER_H_

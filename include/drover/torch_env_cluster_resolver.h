// TorchEnvClusterResolver: a cluster from the variables torchrun (and
// torch.distributed.launch, and drover's own launcher) export to each process:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT.
//
// Those variables name only two addresses: the master's (MASTER_ADDR and
// MASTER_PORT, which is rank 0) and this process's own host. The cluster is
// therefore a *sparse* job, which is what TensorFlow's sparse jobs exist for:
//   {"worker": {0: "MASTER_ADDR:MASTER_PORT",
//               RANK: "<this host>:<port_base + LOCAL_RANK>"}}
// (just {0: ...} on rank 0). task_type is the job name ("worker") and task_id
// is RANK. Other ranks' addresses are unknowable from here: use a rendezvous
// for a dense cluster.
//
// Required: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT. LOCAL_RANK and
// LOCAL_WORLD_SIZE default to 0 and 1 when both are unset (one process per
// host, as a plain env:// launch); GROUP_RANK is optional. Everything is
// re-read on every call. Errors name the variable: kNotFound when one is
// missing; kInvalidArgument when it is garbled ("RANK=abc is not an integer")
// or inconsistent ("RANK=5 must be < WORLD_SIZE=4").
//
// The resolver borrows the Environment, which must outlive it. Not
// thread-safe.

#ifndef DROVER_TORCH_ENV_CLUSTER_RESOLVER_H_
#define DROVER_TORCH_ENV_CLUSTER_RESOLVER_H_

#include <memory>
#include <optional>
#include <string>

#include "drover/cluster_resolver.h"
#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

class TorchEnvClusterResolver : public ClusterResolver {
 public:
  struct Options {
    std::string job_name = "worker";
    // This process listens on port_base + LOCAL_RANK of its own host.
    int port_base = 8888;
    std::string rpc_layer = "grpc";
  };

  // Validates the environment once, so a missing variable fails early.
  static Result<std::unique_ptr<TorchEnvClusterResolver>> Create(Options options, Environment& env);

  Result<ClusterSpec> cluster_spec() const override;
  using ClusterResolver::master;
  // "" when no task is known (task_id is RANK unless overridden).
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;

  // The set value, else job_name / RANK (nullopt when RANK is unreadable).
  std::optional<std::string> task_type() const override;
  std::optional<int> task_id() const override;
  using ClusterResolver::num_accelerators;
  // This host's GPUs (LocalAccelerators).
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;

  Result<int> rank() const;
  Result<int> world_size() const;
  Result<int> local_rank() const;
  Result<int> local_world_size() const;
  // GROUP_RANK (the node's index), nullopt when unset.
  Result<std::optional<int>> group_rank() const;
  // "MASTER_ADDR:MASTER_PORT".
  Result<std::string> master_address() const;

  const Options& options() const { return options_; }

 private:
  TorchEnvClusterResolver(Options options, Environment& env);

  Options options_;
  Environment* env_;  // borrowed
};

}  // namespace drover

#endif  // DROVER_TORCH_ENV_CLUSTER_RESOLVER_H_

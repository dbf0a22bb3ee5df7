// MPIClusterResolver: the cluster of a program started by mpirun/mpiexec
// (TensorFlow's MPIClusterResolver), from the launcher's variables:
//   Open MPI:      OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                  OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   MPICH/Hydra:   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
// Open MPI's variables win when both sets are present.
//
// Each MPI rank becomes one TensorFlow task, laid out in rank order: task r is
// host_of(r):(port_base + local_rank(r)), where local_rank(r) counts the ranks
// below r on the same host. Jobs take consecutive ranks in job-name order (as
// SlurmClusterResolver), and GPUs are handed out by local rank. Every rank of
// one job computes the identical ClusterSpec.
//
// Host names come from a HostExchange, a collective all-gather. Create() runs
// it once (every rank must call Create()) and keeps the result: the ranks of an
// MPI job cannot move. When all ranks are on this host (LOCAL_SIZE == SIZE) no
// exchange is needed and none is made. Everything else (rank, sizes, task
// overrides) is re-read from the environment on every call.
//
// CUDA_VISIBLE_DEVICES, SLURM_*_GPUS and the host's GPU count are read once,
// in Create(), to default gpus_per_node, as in SlurmClusterResolver.
//
// Errors: kNotFound when no launcher variables are set; kInvalidArgument when
// one is garbled or out of range, when the jobs ask for a different number of
// tasks, when a host's tasks need more GPUs than it has, or when the exchanged
// host names disagree with LOCAL_SIZE (two nodes with one host name); kUnavailable when the
// ranks span hosts and no exchange is available.
//
// cluster_spec(), master(), num_accelerators(), task_type()/task_id() and
// get_task_info() are PlacedClusterResolver's, over Placement() and rank().
//
// The resolver borrows the Environment (which must outlive it) and shares
// ownership of the exchange. Not thread-safe.

#ifndef DROVER_MPI_CLUSTER_RESOLVER_H_
#define DROVER_MPI_CLUSTER_RESOLVER_H_

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

// A collective exchange of host names between the ranks of one job.
class HostExchange {
 public:
  virtual ~HostExchange() = default;
  // Returns the host name of every rank, indexed by rank. Collective: every
  // one of the `size` ranks must call it once with its own name.
  virtual Result<std::vector<std::string>> AllgatherHostNames(const std::string& own, int rank,
                                                              int size) = 0;
};

// True when drover was built with MPI (DROVER_WITH_MPI).
bool HaveMpiHostExchange();

// The MPI exchange: initializes MPI on first use unless the program already
// did (MPI_Init_thread, MPI_THREAD_MULTIPLE requested), finalizes it at exit
// only if it initialized it, and checks that MPI_COMM_WORLD has the size and
// rank the launcher's variables say (a program built against one MPI and
// started by another's mpiexec sees a world of 1). nullptr when drover was
// built without MPI. Thread-safe to create; the exchange itself must be called
// from one thread.
std::shared_ptr<HostExchange> NewMpiHostExchange();

class MPIClusterResolver : public PlacedClusterResolver {
 public:
  struct Options {
    // Job name -> number of tasks. Empty: {"worker": <world size>}.
    std::map<std::string, int> jobs;
    int port_base = 8888;
    // nullopt: the GPUs visible to this rank when Create() ran.
    std::optional<int> gpus_per_node;
    // nullopt: gpus_per_node / (most ranks on one host), rounded down; may be 0.
    std::optional<int> gpus_per_task;
    // Set CUDA_VISIBLE_DEVICES on every cluster_spec(); "" for a rank given
    // no GPUs.
    bool auto_set_gpu = true;
    std::string rpc_layer = "grpc";
  };

  // `exchange` may be null: then the ranks must all be on this host.
  // Collective when the ranks span hosts.
  static Result<std::unique_ptr<MPIClusterResolver>> Create(Options options,
                                                            std::shared_ptr<HostExchange> exchange,
                                                            Environment& env);

  // Create() with NewMpiHostExchange().
  static Result<std::unique_ptr<MPIClusterResolver>> CreateWithMpi(Options options,
                                                                   Environment& env);

  // Every rank's placement, in rank order; local_index is the rank's local
  // rank.
  Result<std::vector<TaskPlacement>> Placement() const override;
  Result<int> rank() const override;
  Result<int> size() const;

  // Host name of every rank, as exchanged in Create().
  const std::vector<std::string>& host_names() const { return hosts_; }
  const Options& options() const { return options_; }

 private:
  MPIClusterResolver(Options options, Environment& env);
  const std::map<std::string, int>& configured_jobs() const override { return options_.jobs; }
  bool auto_set_gpu() const override { return options_.auto_set_gpu; }

  Options options_;
  std::vector<std::string> hosts_;  // by rank
};

}  // namespace drover

#endif  // DROVER_MPI_CLUSTER_RESOLVER_H_

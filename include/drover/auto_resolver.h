// Picking a ClusterResolver by name, or by looking at the environment.
//
// Names (the CLI's --resolver): auto, tfconfig, slurm, mpi, torch, k8s,
// resource-spec=FILE, static=JSON. `static` takes a cluster dict
// ({"worker": [...]}) or a TF_CONFIG-shaped object ({"cluster": ..., "task": ...}).
//
// `auto` takes the first source that is present, in this order:
//   1. TF_CONFIG        set and not empty: the user said so explicitly
//   2. torch            RANK, WORLD_SIZE and MASTER_ADDR (torchrun, also inside Slurm)
//   3. mpi              OMPI_COMM_WORLD_RANK or PMI_RANK (mpirun, also inside Slurm)
//   4. slurm            SLURM_PROCID and a SLURM_*NODELIST (srun)
//   5. k8s              JOB_COMPLETION_INDEX (an Indexed Job)
//   6. resource-spec    DROVER_RESOURCE_SPEC names a file
// Launchers come before Slurm because a launcher run inside an allocation sees
// the allocation's SLURM_* variables too, but its own ranks are the truth.
//
// The returned resolver borrows `env`, which must outlive it.

#ifndef DROVER_AUTO_RESOLVER_H_
#define DROVER_AUTO_RESOLVER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/cluster_resolver.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

struct ResolverChoice {
  std::string kind;  // "tfconfig", "slurm", ... as in the names above
  std::unique_ptr<ClusterResolver> resolver;
};

// The sources `auto` checks, in order, as {kind, what is looked for}.
const std::vector<std::pair<std::string, std::string>>& AutoResolverOrder();

// Builds the resolver `name` names. kInvalidArgument for an unknown name or
// a malformed static JSON; kNotFound when `auto` finds no source (the message
// lists what was checked).
Result<ResolverChoice> MakeClusterResolver(std::string_view name, Environment& env);

}  // namespace drover

#endif  // DROVER_AUTO_RESOLVER_H_

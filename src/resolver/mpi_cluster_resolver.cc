#include "drover/mpi_cluster_resolver.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "resolver/resolver_env.h"

namespace drover {
namespace {

using resolver_internal::GpuPool;
using resolver_internal::JobSlot;

constexpr std::string_view kNotUnderMpirun = "not started by mpirun/mpiexec?";

// The launcher's view of this rank, from Open MPI's or Hydra's variables.
struct LauncherVars {
  std::string flavour;  // "Open MPI" or "MPICH/Hydra"
  std::string rank_name, size_name, local_rank_name, local_size_name;
  int rank = 0;
  int size = 0;
  std::optional<int> local_rank;
  std::optional<int> local_size;
};

Result<LauncherVars> ReadLauncherVars(const Environment& env) {
  LauncherVars vars;
  if (env.Get("OMPI_COMM_WORLD_RANK")) {
    vars.flavour = "Open MPI";
    vars.rank_name = "OMPI_COMM_WORLD_RANK";
    vars.size_name = "OMPI_COMM_WORLD_SIZE";
    vars.local_rank_name = "OMPI_COMM_WORLD_LOCAL_RANK";
    vars.local_size_name = "OMPI_COMM_WORLD_LOCAL_SIZE";
  } else if (env.Get("PMI_RANK")) {
    vars.flavour = "MPICH/Hydra";
    vars.rank_name = "PMI_RANK";
    vars.size_name = "PMI_SIZE";
    vars.local_rank_name = "MPI_LOCALRANKID";
    vars.local_size_name = "MPI_LOCALNRANKS";
  } else {
    return Status::NotFound(
        "neither OMPI_COMM_WORLD_RANK (Open MPI) nor PMI_RANK (MPICH/Hydra) is set (" +
        std::string(kNotUnderMpirun) + ")");
  }
  DROVER_ASSIGN_OR_RETURN(vars.rank,
                          resolver_internal::RequireIntVar(env, vars.rank_name, kNotUnderMpirun));
  DROVER_ASSIGN_OR_RETURN(
      vars.size, resolver_internal::RequireIntVar(env, vars.size_name, kNotUnderMpirun, 1));
  if (vars.rank >= vars.size) {
    return Status::InvalidArgument(vars.rank_name + "=" + std::to_string(vars.rank) +
                                   " must be < " + vars.size_name + "=" +
                                   std::to_string(vars.size));
  }
  DROVER_ASSIGN_OR_RETURN(vars.local_rank,
                          resolver_internal::OptionalIntVar(env, vars.local_rank_name));
  DROVER_ASSIGN_OR_RETURN(vars.local_size,
                          resolver_internal::OptionalIntVar(env, vars.local_size_name, 1));
  if (vars.local_size && *vars.local_size > vars.size) {
    return Status::InvalidArgument(vars.local_size_name + "=" + std::to_string(*vars.local_size) +
                                   " must be <= " + vars.size_name + "=" +
                                   std::to_string(vars.size));
  }
  if (vars.local_rank && vars.local_size && *vars.local_rank >= *vars.local_size) {
    return Status::InvalidArgument(vars.local_rank_name + "=" + std::to_string(*vars.local_rank) +
                                   " must be < " + vars.local_size_name + "=" +
                                   std::to_string(*vars.local_size));
  }
  return vars;
}

// local_rank(r): how many ranks below r share r's host.
std::vector<int> LocalRanks(const std::vector<std::string>& hosts, int* max_per_host,
                            std::string* busiest) {
  std::map<std::string, int> seen;
  std::vector<int> local(hosts.size());
  *max_per_host = 0;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    local[r] = seen[hosts[r]]++;
    if (local[r] + 1 > *max_per_host) {
      *max_per_host = local[r] + 1;
      *busiest = hosts[r];
    }
  }
  return local;
}

}  // namespace

#ifndef DROVER_WITH_MPI
// Built without MPI: mpi_host_exchange.cc is not compiled.
bool HaveMpiHostExchange() {
  return false;
}
std::shared_ptr<HostExchange> NewMpiHostExchange() {
  return nullptr;
}
#endif

MPIClusterResolver::MPIClusterResolver(Options options, Environment& env)
    : PlacedClusterResolver(env), options_(std::move(options)) {
  rpc_layer_ = options_.rpc_layer;
}

Result<std::unique_ptr<MPIClusterResolver>> MPIClusterResolver::Create(
    Options options, std::shared_ptr<HostExchange> exchange, Environment& env) {
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort("port_base", options.port_base));
  DROVER_ASSIGN_OR_RETURN(LauncherVars vars, ReadLauncherVars(env));
  std::string own_host = env.HostName();
  std::vector<std::string> hosts;
  if (vars.size == 1 || (vars.local_size && *vars.local_size == vars.size)) {
    // Every rank is on this host: nothing to exchange.
    hosts.assign(vars.size, own_host);
  } else if (exchange == nullptr) {
    std::string why = vars.local_size
                          ? vars.local_size_name + "=" + std::to_string(*vars.local_size) + " < " +
                                vars.size_name + "=" + std::to_string(vars.size)
                          : vars.local_size_name + " is not set";
    return Status::Unavailable(
        "the " + std::to_string(vars.size) + " MPI ranks may span several hosts (" + why +
        ") and no host exchange is available" +
        (HaveMpiHostExchange() ? "" : ": drover was built without MPI (DROVER_WITH_MPI=OFF)"));
  } else {
    Result<std::vector<std::string>> gathered =
        exchange->AllgatherHostNames(own_host, vars.rank, vars.size);
    if (!gathered.ok()) return gathered.status().WithContext("exchanging host names");
    hosts = std::move(gathered).value();
    if (static_cast<int>(hosts.size()) != vars.size) {
      return Status::Internal("the host exchange returned " + std::to_string(hosts.size()) +
                              " names for " + std::to_string(vars.size) + " ranks");
    }
    for (std::size_t r = 0; r < hosts.size(); ++r) {
      if (hosts[r].empty()) {
        return Status::Internal("the host exchange returned an empty name for rank " +
                                std::to_string(r));
      }
    }
  }
  int max_per_host = 0;
  std::string busiest;
  std::vector<int> local = LocalRanks(hosts, &max_per_host, &busiest);
  // Containers often share one host name; then the layout would put two
  // nodes' ranks on one name. The launcher's own counts catch that.
  int same_host = static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[vars.rank]));
  if (vars.local_size && same_host != *vars.local_size) {
    return Status::InvalidArgument(std::to_string(same_host) + " ranks report host name '" +
                                   hosts[vars.rank] + "' but " + vars.local_size_name + "=" +
                                   std::to_string(*vars.local_size) +
                                   ": are several nodes using the same host name?");
  }
  if (vars.local_rank && local[vars.rank] != *vars.local_rank) {
    return Status::InvalidArgument("rank " + std::to_string(vars.rank) + " is local rank " +
                                   std::to_string(local[vars.rank]) + " by host names but " +
                                   vars.local_rank_name + "=" + std::to_string(*vars.local_rank) +
                                   ": are several nodes using the same host name?");
  }
  DROVER_RETURN_IF_ERROR(
      resolver_internal::CheckPort("port_base + ranks per host - 1",
                                   static_cast<long long>(options.port_base) + max_per_host - 1));
  DROVER_ASSIGN_OR_RETURN(GpuPool pool,
                          resolver_internal::ResolveGpuPool(env, options.gpus_per_node,
                                                            options.gpus_per_task, max_per_host));
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckGpusFit(pool, max_per_host, busiest));
  std::unique_ptr<MPIClusterResolver> resolver(new MPIClusterResolver(std::move(options), env));
  resolver->hosts_ = std::move(hosts);
  resolver->set_gpus(pool.per_node, pool.per_task, std::move(pool.ids));
  DROVER_RETURN_IF_ERROR(resolver->Placement().status());
  return resolver;
}

Result<std::unique_ptr<MPIClusterResolver>> MPIClusterResolver::CreateWithMpi(Options options,
                                                                              Environment& env) {
  return Create(std::move(options), NewMpiHostExchange(), env);
}

Result<int> MPIClusterResolver::rank() const {
  DROVER_ASSIGN_OR_RETURN(LauncherVars vars, ReadLauncherVars(env()));
  return vars.rank;
}

Result<int> MPIClusterResolver::size() const {
  DROVER_ASSIGN_OR_RETURN(LauncherVars vars, ReadLauncherVars(env()));
  return vars.size;
}

Result<std::vector<MPIClusterResolver::TaskPlacement>> MPIClusterResolver::Placement() const {
  DROVER_ASSIGN_OR_RETURN(LauncherVars vars, ReadLauncherVars(env()));
  if (vars.size != static_cast<int>(hosts_.size())) {
    return Status::InvalidArgument(vars.size_name + "=" + std::to_string(vars.size) +
                                   " but the resolver was created for " +
                                   std::to_string(hosts_.size()) + " ranks");
  }
  std::map<std::string, int> jobs = options_.jobs;
  if (jobs.empty()) jobs["worker"] = vars.size;
  DROVER_ASSIGN_OR_RETURN(
      std::vector<JobSlot> job_slots,
      resolver_internal::SplitIntoJobs(
          jobs, vars.size, "mpirun (" + vars.size_name + "=" + std::to_string(vars.size) + ")"));
  int max_per_host = 0;
  std::string busiest;
  std::vector<int> local = LocalRanks(hosts_, &max_per_host, &busiest);
  GpuPool pool;
  pool.per_node = gpus_per_node();
  pool.per_task = gpus_per_task();
  pool.ids = gpu_ids();
  std::vector<TaskPlacement> placements;
  placements.reserve(hosts_.size());
  for (int r = 0; r < vars.size; ++r) {
    TaskPlacement p;
    p.rank = r;
    p.host = hosts_[r];
    p.local_index = local[r];
    p.port = options_.port_base + local[r];
    p.gpus = pool.ForLocalIndex(local[r]);
    p.job = job_slots[r].job;
    p.task_index = job_slots[r].task_index;
    placements.push_back(std::move(p));
  }
  return placements;
}

}  // namespace drover

#include "drover/slurm_cluster_resolver.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "drover/hostlist.h"
#include "resolver/resolver_env.h"

namespace drover {
namespace {

using resolver_internal::FirstVar;
using resolver_internal::GpuPool;
using resolver_internal::JobSlot;

constexpr std::string_view kNotInStep = "not running inside a Slurm step?";

// TensorFlow's SlurmClusterResolver raises RuntimeError for a variable that
// is missing and for variables (or jobs) that disagree with each other, and
// ValueError for one that is garbled: the first two are
// kFailedPrecondition here (RuntimeError in Python), the message unchanged.
Status StepError(const std::string& message) {
  return Status::FailedPrecondition(message);
}
Status MissingIsStepError(Status status) {
  if (status.code() != Status::Code::kNotFound) return status;
  return StepError(status.message());
}

Result<int> ReadRank(const Environment& env) {
  Result<int> rank = resolver_internal::RequireIntVar(env, "SLURM_PROCID", kNotInStep);
  if (!rank.ok()) return MissingIsStepError(rank.status());
  return rank;
}

// How Slurm spread the ranks over the nodes (SLURM_DISTRIBUTION's first part).
struct Distribution {
  enum Kind { kBlock, kCyclic, kPlane } kind = kBlock;
  int plane_size = 1;
};

Result<Distribution> ReadDistribution(const Environment& env) {
  Distribution distribution;
  std::optional<std::string> value = env.Get("SLURM_DISTRIBUTION");
  if (!value) return distribution;
  // "block:cyclic,pack": only the node level (before ':' or ',') places ranks.
  std::string node_level = value->substr(0, value->find_first_of(":,"));
  std::transform(node_level.begin(), node_level.end(), node_level.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (node_level.empty() || node_level == "*" || node_level == "block") return distribution;
  if (node_level == "cyclic") {
    distribution.kind = Distribution::kCyclic;
    return distribution;
  }
  if (node_level.rfind("plane", 0) == 0) {
    distribution.kind = Distribution::kPlane;
    std::string size_text;
    std::string size_name = "SLURM_DISTRIBUTION";
    if (node_level.size() > 5 && node_level[5] == '=') {
      size_text = node_level.substr(6);
    } else if (std::optional<std::string> size = env.Get("SLURM_DIST_PLANESIZE")) {
      size_text = *size;
      size_name = "SLURM_DIST_PLANESIZE";
    } else {
      return StepError("SLURM_DISTRIBUTION=" + *value +
                       " without a plane size (plane=<N> or SLURM_DIST_PLANESIZE)");
    }
    DROVER_ASSIGN_OR_RETURN(distribution.plane_size,
                            resolver_internal::ParseIntVar(size_name, size_text, 1));
    return distribution;
  }
  return Status::InvalidArgument(
      "SLURM_DISTRIBUTION=" + *value +
      " is not supported: the rank placement of block, cyclic and plane distributions can be "
      "computed, arbitrary placements cannot (pass tasks_per_host in rank order instead)");
}

// Everything the environment says now about the step.
struct Layout {
  int rank = 0;
  std::vector<std::string> hosts;
  std::vector<int> counts;  // tasks per host, parallel to hosts
  int total = 0;
  int max_per_host = 0;
  std::string max_host;
  std::optional<int> declared_tasks;  // SLURM_STEP_NUM_TASKS / SLURM_NTASKS
  std::string declared_name;
  // By rank: (host index, index among that host's tasks).
  std::vector<std::pair<int, int>> slots;
};

Result<Layout> ReadLayout(const SlurmClusterResolver::Options& options, const Environment& env) {
  Layout layout;
  DROVER_ASSIGN_OR_RETURN(layout.rank, ReadRank(env));
  // Step-level variables describe the srun step this task belongs to; the
  // job-level ones (sbatch script without srun) the whole allocation. Never
  // pair a step nodelist with job counts: they can disagree.
  bool step_level = env.Get("SLURM_STEP_NODELIST").has_value();
  if (!options.tasks_per_host.empty()) {
    for (const auto& [host, count] : options.tasks_per_host) {
      if (host.empty()) return Status::InvalidArgument("tasks_per_host names an empty host");
      if (count < 0) {
        return Status::InvalidArgument("tasks_per_host gives " + host + " " +
                                       std::to_string(count) + " tasks; must be >= 0");
      }
      layout.hosts.push_back(host);
      layout.counts.push_back(count);
    }
  } else {
    auto nodelist = step_level ? FirstVar(env, {"SLURM_STEP_NODELIST"})
                               : FirstVar(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    if (!nodelist) {
      return StepError("SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) is not set (" +
                       std::string(kNotInStep) + ")");
    }
    Result<std::vector<std::string>> hosts = ExpandHostlist(nodelist->second);
    if (!hosts.ok()) return hosts.status().WithContext(nodelist->first);
    layout.hosts = std::move(hosts).value();
    if (layout.hosts.empty()) {
      return Status::InvalidArgument(nodelist->first + "=\"" + nodelist->second +
                                     "\" names no nodes");
    }
    if (options.tasks_per_node) {
      if (*options.tasks_per_node < 0) {
        return Status::InvalidArgument("tasks_per_node=" + std::to_string(*options.tasks_per_node) +
                                       " must be >= 0");
      }
      layout.counts.assign(layout.hosts.size(), *options.tasks_per_node);
    } else {
      auto tasks_var = step_level ? FirstVar(env, {"SLURM_STEP_TASKS_PER_NODE"})
                                  : FirstVar(env, {"SLURM_TASKS_PER_NODE"});
      if (!tasks_var) {
        return StepError(
            std::string(step_level ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE") +
            " is not set and tasks_per_node was not given (" + std::string(kNotInStep) + ")");
      }
      Result<std::vector<int>> counts = ExpandTasksPerNode(tasks_var->second);
      if (!counts.ok()) return counts.status().WithContext(tasks_var->first);
      layout.counts = std::move(counts).value();
      if (layout.counts.size() != layout.hosts.size()) {
        return StepError(nodelist->first + "=" + nodelist->second + " names " +
                         std::to_string(layout.hosts.size()) + " nodes but " + tasks_var->first +
                         "=" + tasks_var->second + " gives task counts for " +
                         std::to_string(layout.counts.size()));
      }
    }
  }
  long long total = 0;
  for (std::size_t i = 0; i < layout.counts.size(); ++i) {
    total += layout.counts[i];
    if (layout.counts[i] > layout.max_per_host) {
      layout.max_per_host = layout.counts[i];
      layout.max_host = layout.hosts[i];
    }
  }
  if (total > static_cast<long long>(kMaxHostlistEntries)) {
    return Status::InvalidArgument("the step has " + std::to_string(total) +
                                   " tasks, more than drover handles (" +
                                   std::to_string(kMaxHostlistEntries) + ")");
  }
  layout.total = static_cast<int>(total);

  auto declared = step_level ? FirstVar(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"})
                             : FirstVar(env, {"SLURM_NTASKS", "SLURM_NPROCS"});
  if (declared) {
    DROVER_ASSIGN_OR_RETURN(int n,
                            resolver_internal::ParseIntVar(declared->first, declared->second));
    layout.declared_tasks = n;
    layout.declared_name = declared->first;
  }
  if (layout.rank >= layout.total) {
    return StepError("SLURM_PROCID=" + std::to_string(layout.rank) + " must be < " +
                     std::to_string(layout.total) + ", the number of tasks on the nodes");
  }

  DROVER_ASSIGN_OR_RETURN(Distribution distribution, ReadDistribution(env));
  layout.slots.reserve(layout.total);
  std::vector<int> placed(layout.hosts.size(), 0);
  if (distribution.kind == Distribution::kBlock) {
    for (std::size_t h = 0; h < layout.hosts.size(); ++h) {
      for (int k = 0; k < layout.counts[h]; ++k) layout.slots.emplace_back(static_cast<int>(h), k);
    }
  } else {
    // Round-robin over the nodes that still have room: one task (cyclic) or up
    // to plane_size tasks (plane) per node per pass.
    int chunk = distribution.kind == Distribution::kCyclic ? 1 : distribution.plane_size;
    while (static_cast<int>(layout.slots.size()) < layout.total) {
      for (std::size_t h = 0; h < layout.hosts.size(); ++h) {
        for (int k = 0; k < chunk && placed[h] < layout.counts[h]; ++k) {
          layout.slots.emplace_back(static_cast<int>(h), placed[h]++);
        }
      }
    }
  }
  return layout;
}

}  // namespace

SlurmClusterResolver::SlurmClusterResolver(Options options, Environment& env)
    : PlacedClusterResolver(env), options_(std::move(options)) {
  rpc_layer_ = options_.rpc_layer;
}

Result<std::unique_ptr<SlurmClusterResolver>> SlurmClusterResolver::Create(Options options,
                                                                           Environment& env) {
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort("port_base", options.port_base));
  DROVER_ASSIGN_OR_RETURN(Layout layout, ReadLayout(options, env));
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort(
      "port_base + tasks per node - 1",
      static_cast<long long>(options.port_base) + std::max(layout.max_per_host, 1) - 1));
  DROVER_ASSIGN_OR_RETURN(
      GpuPool pool, resolver_internal::ResolveGpuPool(env, options.gpus_per_node,
                                                      options.gpus_per_task, layout.max_per_host));
  std::unique_ptr<SlurmClusterResolver> resolver(new SlurmClusterResolver(std::move(options), env));
  resolver->set_gpus(pool.per_node, pool.per_task, std::move(pool.ids));
  // Check the whole resolution once, as TensorFlow's constructor raises.
  DROVER_RETURN_IF_ERROR(resolver->Placement().status());
  return resolver;
}

Result<std::vector<SlurmClusterResolver::TaskPlacement>> SlurmClusterResolver::Placement() const {
  DROVER_ASSIGN_OR_RETURN(Layout layout, ReadLayout(options_, env()));
  std::map<std::string, int> jobs = options_.jobs;
  if (jobs.empty()) jobs["worker"] = layout.declared_tasks.value_or(layout.total);
  std::string source = "Slurm";
  if (layout.declared_tasks) {
    source += " (" + layout.declared_name + "=" + std::to_string(*layout.declared_tasks) + ")";
  }
  Result<std::vector<JobSlot>> split = resolver_internal::SplitIntoJobs(jobs, layout.total, source);
  if (!split.ok()) {
    // Names and counts that are fine but add up to another number of tasks
    // than the step has: TensorFlow's "Requested N tasks but only M were
    // assigned" (RuntimeError).
    const bool jobs_valid = std::all_of(jobs.begin(), jobs.end(), [](const auto& job) {
      return !job.first.empty() && job.second >= 0;
    });
    return jobs_valid ? StepError(split.status().message()) : split.status();
  }
  std::vector<JobSlot> job_slots = std::move(split).value();
  GpuPool pool;
  pool.per_node = gpus_per_node();
  pool.per_task = gpus_per_task();
  pool.ids = gpu_ids();
  // TensorFlow's "Requested more GPUs per node than available" is a RuntimeError too.
  if (Status fits = resolver_internal::CheckGpusFit(pool, layout.max_per_host, layout.max_host);
      !fits.ok()) {
    return StepError(fits.message());
  }
  if (static_cast<long long>(options_.port_base) + layout.max_per_host - 1 > 65535) {
    return Status::InvalidArgument("port_base=" + std::to_string(options_.port_base) + " with " +
                                   std::to_string(layout.max_per_host) +
                                   " tasks on one node runs past port 65535");
  }
  std::vector<TaskPlacement> placements;
  placements.reserve(layout.total);
  for (int rank = 0; rank < layout.total; ++rank) {
    auto [host, local] = layout.slots[rank];
    TaskPlacement placement;
    placement.rank = rank;
    placement.host = layout.hosts[host];
    placement.local_index = local;
    placement.port = options_.port_base + local;
    placement.gpus = pool.ForLocalIndex(local);
    placement.job = job_slots[rank].job;
    placement.task_index = job_slots[rank].task_index;
    placements.push_back(std::move(placement));
  }
  return placements;
}

Result<int> SlurmClusterResolver::rank() const {
  return ReadRank(env());
}

}  // namespace drover

// Internal helpers shared by the environment-driven resolvers: reading and
// checking variables with errors that name them, splitting ranks into jobs,
// handing out GPUs, and TensorFlow's master() rule. Not part of the public API.
//
// Pure functions over their arguments; thread-safe as the Environment is.

#ifndef DROVER_SRC_RESOLVER_RESOLVER_ENV_H_
#define DROVER_SRC_RESOLVER_RESOLVER_ENV_H_

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/cluster_resolver.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover::resolver_internal {

// Parses a whole decimal int (surrounding whitespace allowed).
inline std::optional<long long> ParseInteger(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n')) {
    text.remove_suffix(1);
  }
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "NAME=value is not an integer" / "NAME=value must be >= min".
inline Result<int> ParseIntVar(std::string_view name, const std::string& value, long long min = 0,
                               long long max = 2147483647) {
  std::optional<long long> parsed = ParseInteger(value);
  if (!parsed) {
    return Status::InvalidArgument(std::string(name) + "=" + value + " is not an integer");
  }
  if (*parsed < min) {
    return Status::InvalidArgument(std::string(name) + "=" + value +
                                   " must be >= " + std::to_string(min));
  }
  if (*parsed > max) {
    return Status::InvalidArgument(std::string(name) + "=" + value +
                                   " must be <= " + std::to_string(max));
  }
  return static_cast<int>(*parsed);
}

// kNotFound "NAME is not set (<hint>)" when missing.
inline Result<std::string> RequireVar(const Environment& env, std::string_view name,
                                      std::string_view hint) {
  std::optional<std::string> value = env.Get(name);
  if (!value) {
    return Status::NotFound(std::string(name) + " is not set" +
                            (hint.empty() ? "" : " (" + std::string(hint) + ")"));
  }
  return *value;
}

inline Result<int> RequireIntVar(const Environment& env, std::string_view name,
                                 std::string_view hint, long long min = 0) {
  DROVER_ASSIGN_OR_RETURN(std::string value, RequireVar(env, name, hint));
  return ParseIntVar(name, value, min);
}

// nullopt when unset; an error when set but garbled.
inline Result<std::optional<int>> OptionalIntVar(const Environment& env, std::string_view name,
                                                 long long min = 0) {
  std::optional<std::string> value = env.Get(name);
  if (!value) return std::optional<int>();
  DROVER_ASSIGN_OR_RETURN(int parsed, ParseIntVar(name, *value, min));
  return std::optional<int>(parsed);
}

// The first of `names` that is set, with its name; nullopt when none is.
inline std::optional<std::pair<std::string, std::string>> FirstVar(
    const Environment& env, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    if (std::optional<std::string> value = env.Get(name)) {
      return std::make_pair(std::string(name), *value);
    }
  }
  return std::nullopt;
}

// Which job and index each rank gets: jobs take consecutive ranks in
// job-name order (std::map order, TensorFlow's sorted(jobs.items())).
struct JobSlot {
  std::string job;
  int task_index = 0;
};

// `source` names where num_tasks came from, for the error.
inline Result<std::vector<JobSlot>> SplitIntoJobs(const std::map<std::string, int>& jobs,
                                                  int num_tasks, std::string_view source) {
  long long requested = 0;
  for (const auto& [name, count] : jobs) {
    if (name.empty()) return Status::InvalidArgument("a job name is empty");
    if (count < 0) {
      return Status::InvalidArgument("job '" + name + "' asks for " + std::to_string(count) +
                                     " tasks; the count must be >= 0");
    }
    requested += count;
  }
  if (requested != num_tasks) {
    std::string listing;
    for (const auto& [name, count] : jobs) {
      listing += (listing.empty() ? "" : ", ") + name + ": " + std::to_string(count);
    }
    return Status::InvalidArgument("the jobs {" + listing + "} ask for " +
                                   std::to_string(requested) + " tasks but " + std::string(source) +
                                   " started " + std::to_string(num_tasks));
  }
  std::vector<JobSlot> slots;
  slots.reserve(num_tasks);
  for (const auto& [name, count] : jobs) {
    for (int i = 0; i < count; ++i) slots.push_back({name, i});
  }
  return slots;
}

// The GPUs tasks of one node are given: gpus_per_task consecutive IDs per
// task, by the task's index on its node.
struct GpuPool {
  int per_node = 0;
  int per_task = 0;
  std::vector<std::string> ids;  // by position; size >= per_node

  std::vector<std::string> ForLocalIndex(int local_index) const {
    std::vector<std::string> out;
    for (int g = 0; g < per_task; ++g) {
      std::size_t at = static_cast<std::size_t>(local_index) * per_task + g;
      if (at < ids.size()) out.push_back(ids[at]);
    }
    return out;
  }
};

// Decides gpus_per_node, gpus_per_task and the IDs to hand out.
// gpus_per_node defaults to the devices in CUDA_VISIBLE_DEVICES when set, else
// SLURM_STEP_GPUS, SLURM_JOB_GPUS, SLURM_GPUS_ON_NODE, else the host's count.
// IDs are the CUDA_VISIBLE_DEVICES entries when it lists any (a subset of them
// is always valid, whatever numbering the launcher used), else 0..n-1.
inline Result<GpuPool> ResolveGpuPool(const Environment& env, std::optional<int> gpus_per_node,
                                      std::optional<int> gpus_per_task, int max_tasks_per_node) {
  GpuPool pool;
  std::optional<std::string> visible = env.Get("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> visible_ids =
      visible ? ParseVisibleDevices(*visible) : std::vector<std::string>();
  if (gpus_per_node) {
    if (*gpus_per_node < 0) {
      return Status::InvalidArgument("gpus_per_node=" + std::to_string(*gpus_per_node) +
                                     " must be >= 0");
    }
    pool.per_node = *gpus_per_node;
  } else if (visible) {
    pool.per_node = static_cast<int>(visible_ids.size());
  } else if (auto slurm_gpus = FirstVar(env, {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"})) {
    pool.per_node = static_cast<int>(ParseVisibleDevices(slurm_gpus->second).size());
  } else if (auto on_node = env.Get("SLURM_GPUS_ON_NODE")) {
    DROVER_ASSIGN_OR_RETURN(pool.per_node, ParseIntVar("SLURM_GPUS_ON_NODE", *on_node));
  } else {
    pool.per_node = env.CountLocalGpus();
  }
  if (gpus_per_task) {
    if (*gpus_per_task < 0) {
      return Status::InvalidArgument("gpus_per_task=" + std::to_string(*gpus_per_task) +
                                     " must be >= 0");
    }
    pool.per_task = *gpus_per_task;
  } else {
    pool.per_task = max_tasks_per_node > 0 ? pool.per_node / max_tasks_per_node : 0;
  }
  if (!visible_ids.empty()) {
    if (static_cast<int>(visible_ids.size()) < pool.per_node) {
      return Status::InvalidArgument(
          "gpus_per_node=" + std::to_string(pool.per_node) + " but CUDA_VISIBLE_DEVICES=" +
          *visible + " makes only " + std::to_string(visible_ids.size()) +
          " visible to this task; if the launcher already binds GPUs per task, turn "
          "auto_set_gpu off");
    }
    pool.ids.assign(visible_ids.begin(), visible_ids.begin() + pool.per_node);
  } else {
    for (int i = 0; i < pool.per_node; ++i) pool.ids.push_back(std::to_string(i));
  }
  return pool;
}

// TensorFlow's "Requested more GPUs per node than available" check.
inline Status CheckGpusFit(const GpuPool& pool, int max_tasks_per_node, std::string_view host) {
  long long needed = static_cast<long long>(max_tasks_per_node) * pool.per_task;
  if (needed > pool.per_node) {
    return Status::InvalidArgument(
        "requested more GPUs per node than available: " + std::to_string(max_tasks_per_node) +
        " tasks on " + std::string(host) + " x " + std::to_string(pool.per_task) +
        " GPUs per task > " + std::to_string(pool.per_node) + " GPUs per node");
  }
  return Status::Ok();
}

inline std::string JoinComma(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

inline Status CheckPort(std::string_view what, long long port) {
  if (port < 1 || port > 65535) {
    return Status::InvalidArgument(std::string(what) + "=" + std::to_string(port) +
                                   " is not a port in 1..65535");
  }
  return Status::Ok();
}

// TensorFlow's master(): the address of (task_type, task_id), arguments
// winning over the resolver's values, "" when either is unknown; an empty
// rpc_layer argument falls back to the resolver's (TF's `rpc_layer or
// self.rpc_layer`).
inline Result<std::string> MasterFor(const ClusterResolver& resolver,
                                     const std::optional<std::string>& task_type,
                                     std::optional<int> task_id,
                                     const std::optional<std::string>& rpc_layer) {
  std::optional<std::string> type = task_type ? task_type : resolver.task_type();
  std::optional<int> id = task_id ? task_id : resolver.task_id();
  if (!type || !id) return std::string();
  DROVER_ASSIGN_OR_RETURN(ClusterSpec spec, resolver.cluster_spec());
  DROVER_ASSIGN_OR_RETURN(std::string address, spec.task_address(*type, *id));
  std::string layer =
      rpc_layer && !rpc_layer->empty() ? *rpc_layer : resolver.rpc_layer().value_or("");
  return FormatMasterUrl(address, layer);
}

}  // namespace drover::resolver_internal

#endif  // DROVER_SRC_RESOLVER_RESOLVER_ENV_H_

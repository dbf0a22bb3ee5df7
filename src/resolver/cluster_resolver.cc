#include "drover/cluster_resolver.h"

#include <set>
#include <utility>

#include "drover/environment.h"
#include "spec/python_repr.h"

namespace drover {
namespace {

// Python's `value or fallback` for an optional string: "" counts as unset.
std::optional<std::string> OrElse(const std::optional<std::string>& value,
                                  const std::optional<std::string>& fallback) {
  if (value.has_value() && !value->empty()) return value;
  return fallback;
}

// repr() of a Python set of ints; CPython lists small ints in ascending order.
std::string SetRepr(const std::set<int>& keys) {
  std::string out = "{";
  for (int key : keys) {
    if (out.size() > 1) out += ", ";
    out += std::to_string(key);
  }
  return out + "}";
}

}  // namespace

std::string FormatMasterUrl(const std::string& master, const std::string& rpc_layer) {
  if (rpc_layer.empty()) return master;
  return rpc_layer + "://" + master;
}

AcceleratorMap LocalAccelerators(const Environment& env) {
  // TensorFlow lists the devices a session on master() sees; without a
  // runtime we can only count this host's GPUs.
  const int gpus = env.CountLocalGpus();
  if (gpus > 0) return AcceleratorMap{{"GPU", gpus}};
  return AcceleratorMap{};
}

// ---- SimpleClusterResolver ----

SimpleClusterResolver::SimpleClusterResolver(ClusterSpec cluster_spec)
    : SimpleClusterResolver(std::move(cluster_spec), Options()) {}

SimpleClusterResolver::SimpleClusterResolver(ClusterSpec cluster_spec, Options options)
    : cluster_spec_(std::move(cluster_spec)),
      master_(std::move(options.master)),
      environment_(std::move(options.environment)),
      num_accelerators_(std::move(options.num_accelerators)) {
  task_type_ = std::move(options.task_type);
  task_id_ = options.task_id;
  rpc_layer_ = std::move(options.rpc_layer);
}

Result<std::string> SimpleClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  std::string master = master_;
  if (task_type.has_value() && task_id.has_value()) {
    DROVER_ASSIGN_OR_RETURN(master, cluster_spec_.task_address(*task_type, *task_id));
  }
  return FormatMasterUrl(master, OrElse(rpc_layer, this->rpc_layer()).value_or(""));
}

Result<AcceleratorMap> SimpleClusterResolver::num_accelerators(
    const std::optional<std::string>& /*task_type*/, std::optional<int> /*task_id*/) const {
  // TensorFlow: "does not do automatic detection of accelerators".
  return num_accelerators_.value_or(AcceleratorMap{});
}

// ---- UnionClusterResolver ----

Result<std::unique_ptr<UnionClusterResolver>> UnionClusterResolver::Create(
    std::vector<std::shared_ptr<ClusterResolver>> resolvers, Options options) {
  if (resolvers.empty()) {
    return Status::InvalidArgument("At least one ClusterResolver is required.");
  }
  for (size_t i = 0; i < resolvers.size(); ++i) {
    if (resolvers[i] == nullptr) {
      return Status::WrongType(
          "All arguments must be a sub-class of `ClusterResolver.` (resolver " + std::to_string(i) +
          " is null)");
    }
  }
  return std::unique_ptr<UnionClusterResolver>(
      new UnionClusterResolver(std::move(resolvers), std::move(options)));
}

UnionClusterResolver::UnionClusterResolver(std::vector<std::shared_ptr<ClusterResolver>> resolvers,
                                           Options options)
    : resolvers_(std::move(resolvers)) {
  task_type_ = std::move(options.task_type);
  task_id_ = options.task_id;
  rpc_layer_ = std::move(options.rpc_layer);
}

Result<ClusterSpec> UnionClusterResolver::cluster_spec() const {
  // Read each source once (TensorFlow reads each twice, once per pass).
  std::vector<ClusterSpec> specs;
  specs.reserve(resolvers_.size());
  for (const auto& resolver : resolvers_) {
    DROVER_ASSIGN_OR_RETURN(ClusterSpec spec, resolver->cluster_spec());
    specs.push_back(std::move(spec));
  }

  // Pass 1: a job stays a list only while every source shows it as a list
  // (as_dict() shows dense jobs as lists; empty and sparse ones as dicts).
  std::vector<std::string> order;
  std::map<std::string, bool> is_list;
  for (const ClusterSpec& spec : specs) {
    for (const std::string& job : spec.jobs()) {
      auto [it, inserted] = is_list.emplace(job, spec.is_dense(job));
      if (inserted) {
        order.push_back(job);
      } else if (!spec.is_dense(job)) {
        it->second = false;
      }
    }
  }

  // Pass 2: concatenate lists; merge dicts, refusing an index seen before.
  std::map<std::string, std::vector<std::string>> lists;
  std::map<std::string, ClusterSpec::TaskMap> dicts;
  for (const ClusterSpec& spec : specs) {
    for (const std::string& job : spec.jobs()) {
      ClusterSpec::TaskMap tasks = spec.job_task_map(job).value();
      if (is_list[job]) {
        auto& list = lists[job];
        for (auto& entry : tasks) list.push_back(std::move(entry.second));
        continue;
      }
      auto& merged = dicts[job];
      std::set<int> duplicates;
      for (const auto& entry : tasks) {
        if (merged.count(entry.first) != 0) duplicates.insert(entry.first);
      }
      if (!duplicates.empty()) {
        return Status::AlreadyExists("Duplicate keys detected when merging two ClusterSpecs: " +
                                     SetRepr(duplicates) + " (job " + PythonRepr(job) + ")");
      }
      merged.merge(tasks);
    }
  }

  ClusterSpec merged;
  for (const std::string& job : order) {
    if (is_list[job]) {
      DROVER_RETURN_IF_ERROR(merged.AddJob(job, std::move(lists[job])));
    } else {
      DROVER_RETURN_IF_ERROR(merged.AddSparseJob(job, std::move(dicts[job])));
    }
  }
  return merged;
}

Result<std::string> UnionClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  if (task_type.has_value() && task_id.has_value()) {
    DROVER_ASSIGN_OR_RETURN(ClusterSpec spec, cluster_spec());
    DROVER_ASSIGN_OR_RETURN(std::string address, spec.task_address(*task_type, *task_id));
    // TensorFlow falls back to the union's own rpc_layer here, not the first
    // resolver's.
    return FormatMasterUrl(address, OrElse(rpc_layer, rpc_layer_).value_or(""));
  }
  return resolvers_.front()->master(std::nullopt, std::nullopt, rpc_layer);
}

Result<AcceleratorMap> UnionClusterResolver::num_accelerators(
    const std::optional<std::string>& task_type, std::optional<int> task_id) const {
  return resolvers_.front()->num_accelerators(task_type, task_id);
}

std::string UnionClusterResolver::environment() const {
  return resolvers_.front()->environment();
}

std::optional<std::string> UnionClusterResolver::task_type() const {
  return OrElse(task_type_, resolvers_.front()->task_type());
}

std::optional<int> UnionClusterResolver::task_id() const {
  // TensorFlow writes `self._task_id or ...`, which drops an override of 0;
  // we keep it (an explicit task 0 is the chief-by-convention worker).
  if (task_id_.has_value()) return task_id_;
  return resolvers_.front()->task_id();
}

std::optional<std::string> UnionClusterResolver::rpc_layer() const {
  return OrElse(rpc_layer_, resolvers_.front()->rpc_layer());
}

}  // namespace drover

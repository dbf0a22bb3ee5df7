#include "drover/kubernetes_cluster_resolver.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "resolver/resolver_env.h"

namespace drover {
namespace {

constexpr std::string_view kNotIndexedJob = "not a pod of an Indexed Job?";

// A DNS label: 1-63 of [a-z0-9-], not starting or ending with '-' (RFC 1123,
// which Kubernetes enforces on Job, Service and namespace names).
bool IsDnsLabel(std::string_view name) {
  if (name.empty() || name.size() > 63 || name.front() == '-' || name.back() == '-') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// A domain: dot-separated DNS labels.
bool IsDnsDomain(std::string_view name) {
  if (name.empty()) return false;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = name.find('.', start);
    if (!IsDnsLabel(name.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

KubernetesClusterResolver::KubernetesClusterResolver(Options options, Environment& env)
    : options_(std::move(options)), env_(&env) {
  rpc_layer_ = options_.rpc_layer;
}

Result<std::unique_ptr<KubernetesClusterResolver>> KubernetesClusterResolver::Create(
    Options options, Environment& env) {
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort("port", options.port));
  if (!IsDnsDomain(options.cluster_domain)) {
    return Status::InvalidArgument("cluster_domain=\"" + options.cluster_domain +
                                   "\" is not a DNS domain");
  }
  std::unique_ptr<KubernetesClusterResolver> resolver(
      new KubernetesClusterResolver(std::move(options), env));
  DROVER_RETURN_IF_ERROR(resolver->cluster_spec().status());
  return resolver;
}

Result<int> KubernetesClusterResolver::completion_index() const {
  return resolver_internal::RequireIntVar(*env_, "JOB_COMPLETION_INDEX", kNotIndexedJob);
}

Result<int> KubernetesClusterResolver::num_tasks() const {
  long long from_jobs = 0;
  for (const auto& [name, count] : options_.jobs) from_jobs += count < 0 ? 0 : count;
  std::optional<int> given = options_.num_tasks;
  std::string given_name = "num_tasks";
  if (!given) {
    DROVER_ASSIGN_OR_RETURN(given, resolver_internal::OptionalIntVar(*env_, "DROVER_NUM_TASKS", 1));
    given_name = "DROVER_NUM_TASKS";
  }
  if (given) {
    if (*given < 1) {
      return Status::InvalidArgument("num_tasks=" + std::to_string(*given) + " must be >= 1");
    }
    if (!options_.jobs.empty() && from_jobs != *given) {
      return Status::InvalidArgument("the jobs ask for " + std::to_string(from_jobs) +
                                     " tasks but " + given_name + "=" + std::to_string(*given));
    }
    return *given;
  }
  if (options_.jobs.empty()) {
    return Status::NotFound(
        "the number of tasks is unknown: pass jobs or num_tasks, or set DROVER_NUM_TASKS to the "
        "Indexed Job's completions");
  }
  return static_cast<int>(from_jobs);
}

Result<std::string> KubernetesClusterResolver::job_name() const {
  std::string name = options_.job_name;
  if (name.empty()) {
    DROVER_ASSIGN_OR_RETURN(int index, completion_index());
    std::optional<std::string> hostname = env_->Get("HOSTNAME");
    std::string source = hostname ? "HOSTNAME" : "the host name";
    std::string host = hostname ? *hostname : env_->HostName();
    std::string suffix = "-" + std::to_string(index);
    if (host.size() <= suffix.size() ||
        host.compare(host.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return Status::InvalidArgument(
          "cannot derive the Kubernetes Job name: " + source + "=" + host + " does not end in \"" +
          suffix + "\" (JOB_COMPLETION_INDEX=" + std::to_string(index) +
          "); pods of an Indexed Job are named <job-name>-<index>, else pass job_name");
    }
    name = host.substr(0, host.size() - suffix.size());
  }
  if (!IsDnsLabel(name)) {
    return Status::InvalidArgument("job name \"" + name + "\" is not a DNS label");
  }
  return name;
}

Result<std::string> KubernetesClusterResolver::service() const {
  std::string name = options_.service;
  if (name.empty()) name = env_->Get("DROVER_K8S_SERVICE").value_or("");
  if (name.empty()) {
    DROVER_ASSIGN_OR_RETURN(name, job_name());
  }
  if (!IsDnsLabel(name)) {
    return Status::InvalidArgument("service \"" + name + "\" is not a DNS label");
  }
  return name;
}

std::string KubernetesClusterResolver::kube_namespace() const {
  if (!options_.kube_namespace.empty()) return options_.kube_namespace;
  std::optional<std::string> from_env = env_->Get("POD_NAMESPACE");
  if (from_env && !from_env->empty()) return *from_env;
  if (!options_.namespace_file.empty()) {
    std::ifstream file(options_.namespace_file);
    std::string line;
    if (file && std::getline(file, line)) {
      line.erase(line.find_last_not_of(" \t\r\n") + 1);
      if (!line.empty()) return line;
    }
  }
  return "default";
}

Result<std::string> KubernetesClusterResolver::pod_dns_name(int index) const {
  DROVER_ASSIGN_OR_RETURN(std::string job, job_name());
  DROVER_ASSIGN_OR_RETURN(std::string svc, service());
  std::string ns = kube_namespace();
  if (!IsDnsLabel(ns))
    return Status::InvalidArgument("namespace \"" + ns + "\" is not a DNS label");
  return job + "-" + std::to_string(index) + "." + svc + "." + ns + ".svc." +
         options_.cluster_domain;
}

Result<ClusterSpec> KubernetesClusterResolver::cluster_spec() const {
  DROVER_ASSIGN_OR_RETURN(int total, num_tasks());
  DROVER_ASSIGN_OR_RETURN(int index, completion_index());
  if (index >= total) {
    return Status::InvalidArgument("JOB_COMPLETION_INDEX=" + std::to_string(index) +
                                   " must be < the number of tasks, " + std::to_string(total));
  }
  std::map<std::string, int> jobs = options_.jobs;
  if (jobs.empty()) jobs["worker"] = total;
  DROVER_ASSIGN_OR_RETURN(std::vector<resolver_internal::JobSlot> slots,
                          resolver_internal::SplitIntoJobs(jobs, total, "the Indexed Job"));
  DROVER_ASSIGN_OR_RETURN(std::string job, job_name());
  DROVER_ASSIGN_OR_RETURN(std::string svc, service());
  std::string ns = kube_namespace();
  if (!IsDnsLabel(ns))
    return Status::InvalidArgument("namespace \"" + ns + "\" is not a DNS label");
  std::string domain_suffix = "." + svc + "." + ns + ".svc." + options_.cluster_domain + ":" +
                              std::to_string(options_.port);
  std::map<std::string, std::vector<std::string>> tasks;
  for (const auto& [name, count] : jobs) tasks[name];
  for (int i = 0; i < total; ++i) {
    tasks[slots[i].job].push_back(job + "-" + std::to_string(i) + domain_suffix);
  }
  ClusterSpec spec;
  for (auto& [name, addresses] : tasks) {
    DROVER_RETURN_IF_ERROR(spec.AddJob(name, std::move(addresses)));
  }
  return spec;
}

Result<std::string> KubernetesClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  return resolver_internal::MasterFor(*this, task_type, task_id, rpc_layer);
}

std::optional<std::string> KubernetesClusterResolver::task_type() const {
  if (task_type_) return task_type_;
  return OwnTask().first;
}

std::optional<int> KubernetesClusterResolver::task_id() const {
  if (task_id_) return task_id_;
  return OwnTask().second;
}

Result<AcceleratorMap> KubernetesClusterResolver::num_accelerators(
    const std::optional<std::string>& /*task_type*/, std::optional<int> /*task_id*/) const {
  return LocalAccelerators(*env_);
}

std::pair<std::optional<std::string>, std::optional<int>> KubernetesClusterResolver::OwnTask()
    const {
  Result<int> total = num_tasks();
  Result<int> index = completion_index();
  if (!total.ok() || !index.ok() || *index >= *total) return {std::nullopt, std::nullopt};
  std::map<std::string, int> jobs = options_.jobs;
  if (jobs.empty()) jobs["worker"] = *total;
  Result<std::vector<resolver_internal::JobSlot>> slots =
      resolver_internal::SplitIntoJobs(jobs, *total, "the Indexed Job");
  if (!slots.ok()) return {std::nullopt, std::nullopt};
  return {(*slots)[*index].job, (*slots)[*index].task_index};
}

}  // namespace drover

// KubernetesClusterResolver: the cluster of a Kubernetes Indexed Job, worked
// out without the API server (TensorFlow's KubernetesClusterResolver asks the
// API server for pod IPs; this one needs no credentials).
//
// The Job must run with completionMode: Indexed and a headless Service whose
// name is the pods' `subdomain`. Kubernetes then names pod i "<job-name>-<i>",
// sets its HOSTNAME to that, exports JOB_COMPLETION_INDEX=i, and publishes it
// in DNS as
//   <job-name>-<i>.<service>.<namespace>.svc.<cluster-domain>
// Every task listens on the same port (each pod has its own IP), so task i is
// "<that name>:<port>". Jobs take consecutive indices in job-name order: with
// {"chief": 1, "worker": 3}, index 0 is chief:0 and 1..3 are worker:0..2.
//
// Variables, re-read on every call: JOB_COMPLETION_INDEX (required),
// HOSTNAME (to derive the job name), DROVER_NUM_TASKS, DROVER_K8S_SERVICE,
// POD_NAMESPACE; then the service account's namespace file.
//
// Errors: kNotFound when JOB_COMPLETION_INDEX is unset, or when the number of
// tasks is unknown (no jobs, no num_tasks, no DROVER_NUM_TASKS);
// kInvalidArgument when a variable is garbled, the index is out of range, the
// jobs and num_tasks disagree, or the job name cannot be derived from HOSTNAME.
//
// The resolver borrows the Environment, which must outlive it. Not thread-safe.

#ifndef DROVER_KUBERNETES_CLUSTER_RESOLVER_H_
#define DROVER_KUBERNETES_CLUSTER_RESOLVER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "drover/cluster_resolver.h"
#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

class KubernetesClusterResolver : public ClusterResolver {
 public:
  struct Options {
    // Job name -> number of tasks. Empty: {"worker": num_tasks}.
    std::map<std::string, int> jobs;
    // Pods in the Indexed Job (its `completions`). nullopt: DROVER_NUM_TASKS,
    // else the sum of `jobs`.
    std::optional<int> num_tasks;
    // The Kubernetes Job's name. "": HOSTNAME (else the host name) without
    // its "-<JOB_COMPLETION_INDEX>" suffix.
    std::string job_name;
    // The headless Service (the pods' subdomain). "": DROVER_K8S_SERVICE, else
    // the job name.
    std::string service;
    // "": POD_NAMESPACE, else the first line of namespace_file, else "default".
    std::string kube_namespace;
    std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    std::string cluster_domain = "cluster.local";
    // TensorFlow's KubernetesClusterResolver's default tf_server_port.
    int port = 8470;
    std::string rpc_layer = "grpc";
  };

  // Validates the environment once, so a missing variable fails early.
  static Result<std::unique_ptr<KubernetesClusterResolver>> Create(Options options,
                                                                   Environment& env);

  Result<ClusterSpec> cluster_spec() const override;
  using ClusterResolver::master;
  // "" when no task is known.
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;
  // The set value, else this pod's job/index from JOB_COMPLETION_INDEX.
  std::optional<std::string> task_type() const override;
  std::optional<int> task_id() const override;
  using ClusterResolver::num_accelerators;
  // This host's GPUs (LocalAccelerators).
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;

  // JOB_COMPLETION_INDEX.
  Result<int> completion_index() const;
  Result<int> num_tasks() const;
  Result<std::string> job_name() const;
  Result<std::string> service() const;
  std::string kube_namespace() const;
  // "<job-name>-<index>.<service>.<namespace>.svc.<cluster-domain>".
  Result<std::string> pod_dns_name(int index) const;

  const Options& options() const { return options_; }

 private:
  KubernetesClusterResolver(Options options, Environment& env);
  // This pod's (job, index) from JOB_COMPLETION_INDEX, ignoring overrides.
  std::pair<std::optional<std::string>, std::optional<int>> OwnTask() const;

  Options options_;
  Environment* env_;  // borrowed
};

}  // namespace drover

#endif  // DROVER_KUBERNETES_CLUSTER_RESOLVER_H_

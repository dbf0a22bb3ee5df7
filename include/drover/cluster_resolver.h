// ClusterResolver: where a cluster comes from (TF_CONFIG, Slurm, MPI, the
// torch launcher's variables, a Kubernetes indexed Job, an AutoDist resource
// spec, or a ClusterSpec given by hand).
//
// The interface is TensorFlow's tf.distribute.cluster_resolver.ClusterResolver:
// cluster_spec() and master() re-read their source on every call (no caching),
// task_type/task_id/rpc_layer may be overridden by the caller, and
// num_accelerators() maps a device type ("GPU") to a count.
//
// This header also holds the two resolvers that read no environment:
// SimpleClusterResolver and UnionClusterResolver. The environment-driven ones
// each have a header of their own (tf_config_cluster_resolver.h, ...).
//
// Resolvers are not thread-safe: use one per thread or guard it.

#ifndef DROVER_CLUSTER_RESOLVER_H_
#define DROVER_CLUSTER_RESOLVER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

// Device type -> count, e.g. {"GPU": 2}. Types with no devices are absent.
using AcceleratorMap = std::map<std::string, int>;

// "grpc://host:port" when rpc_layer is non-empty, else the address unchanged.
std::string FormatMasterUrl(const std::string& master, const std::string& rpc_layer);

// This host's GPUs as `env` counts them: {"GPU": n}, or {} when there are
// none (TensorFlow lists no type without devices).
AcceleratorMap LocalAccelerators(const Environment& env);

class ClusterResolver {
 public:
  virtual ~ClusterResolver() = default;

  // The cluster as its source describes it now.
  virtual Result<ClusterSpec> cluster_spec() const = 0;

  // The session master: the address of (task_type, task_id) when both are
  // known (given here or from the resolver), prefixed by "<rpc_layer>://".
  // An unset argument falls back to the resolver's own value.
  virtual Result<std::string> master(const std::optional<std::string>& task_type,
                                     std::optional<int> task_id,
                                     const std::optional<std::string>& rpc_layer) const = 0;
  Result<std::string> master() const { return master(std::nullopt, std::nullopt, std::nullopt); }

  // Accelerators per task (LocalAccelerators() for a resolver that only
  // knows this host's).
  virtual Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                                  std::optional<int> task_id) const = 0;
  Result<AcceleratorMap> num_accelerators() const {
    return num_accelerators(std::nullopt, std::nullopt);
  }

  // "google" inside Google, else "" (TensorFlow's meaning); resolvers may
  // report what their source says.
  virtual std::string environment() const { return ""; }

  // The current task's role and index, and the RPC layer. Setters override
  // what the source says; passing nullopt returns to the source's value.
  virtual std::optional<std::string> task_type() const { return task_type_; }
  virtual std::optional<int> task_id() const { return task_id_; }
  virtual std::optional<std::string> rpc_layer() const { return rpc_layer_; }
  virtual void set_task_type(std::optional<std::string> task_type) {
    task_type_ = std::move(task_type);
  }
  virtual void set_task_id(std::optional<int> task_id) { task_id_ = task_id; }
  virtual void set_rpc_layer(std::optional<std::string> rpc_layer) {
    rpc_layer_ = std::move(rpc_layer);
  }

 protected:
  std::optional<std::string> task_type_;
  std::optional<int> task_id_;
  std::optional<std::string> rpc_layer_;
};

// A resolver over a ClusterSpec given by the caller (TensorFlow's
// SimpleClusterResolver, same constructor arguments).
class SimpleClusterResolver : public ClusterResolver {
 public:
  struct Options {
    std::string master;
    std::optional<std::string> task_type;
    std::optional<int> task_id;
    std::string environment;
    // Returned as given by num_accelerators(); nullopt returns {}, as
    // TensorFlow's SimpleClusterResolver does no detection of its own.
    std::optional<AcceleratorMap> num_accelerators;
    std::optional<std::string> rpc_layer;
  };

  explicit SimpleClusterResolver(ClusterSpec cluster_spec);
  SimpleClusterResolver(ClusterSpec cluster_spec, Options options);

  Result<ClusterSpec> cluster_spec() const override { return cluster_spec_; }
  using ClusterResolver::master;
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;
  using ClusterResolver::num_accelerators;
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;
  std::string environment() const override { return environment_; }

 private:
  ClusterSpec cluster_spec_;
  std::string master_;
  std::string environment_;
  std::optional<AcceleratorMap> num_accelerators_;
};

// Merges the clusters of several resolvers (TensorFlow's
// UnionClusterResolver): a job that is a list in every source is
// concatenated; a job that is a map in any source becomes a map, and an index
// present twice is an error (kAlreadyExists, Python KeyError). master(),
// environment, num_accelerators and unset task_type/task_id/rpc_layer come
// from the first resolver.
class UnionClusterResolver : public ClusterResolver {
 public:
  struct Options {
    std::optional<std::string> task_type;
    std::optional<int> task_id;
    std::optional<std::string> rpc_layer;
  };

  // REQUIRES: resolvers are non-null. An empty list is reported by Create().
  static Result<std::unique_ptr<UnionClusterResolver>> Create(
      std::vector<std::shared_ptr<ClusterResolver>> resolvers, Options options = {});

  Result<ClusterSpec> cluster_spec() const override;
  using ClusterResolver::master;
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;
  using ClusterResolver::num_accelerators;
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;
  std::string environment() const override;
  std::optional<std::string> task_type() const override;
  std::optional<int> task_id() const override;
  std::optional<std::string> rpc_layer() const override;

  const std::vector<std::shared_ptr<ClusterResolver>>& resolvers() const { return resolvers_; }

 private:
  UnionClusterResolver(std::vector<std::shared_ptr<ClusterResolver>> resolvers, Options options);

  std::vector<std::shared_ptr<ClusterResolver>> resolvers_;
};

}  // namespace drover

#endif  // DROVER_CLUSTER_RESOLVER_H_

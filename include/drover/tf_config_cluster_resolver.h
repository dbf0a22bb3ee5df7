// TFConfigClusterResolver: the cluster as the TF_CONFIG environment variable
// describes it (TensorFlow's tf.distribute.cluster_resolver.
// TFConfigClusterResolver), and ParseTfConfig, the TF_CONFIG parser it, the
// CLI and the fuzzer share.
//
// TF_CONFIG is JSON: {"cluster": {...}, "task": {"type": "worker", "index": 0},
// "rpc_layer": "grpc", "session_master": "...", "environment": "cloud"}; every
// key is optional and unknown keys are ignored. The resolver re-reads it on
// every call, so a changed variable is seen at once; an unset or blank
// TF_CONFIG reads as {}.
//
// The resolver borrows the Environment it is given, which must outlive it. It
// is not thread-safe (see cluster_resolver.h).

#ifndef DROVER_TF_CONFIG_CLUSTER_RESOLVER_H_
#define DROVER_TF_CONFIG_CLUSTER_RESOLVER_H_

#include <optional>
#include <string>
#include <string_view>

#include "drover/cluster_resolver.h"
#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

// One parsed TF_CONFIG. Absent keys (and JSON null for the string keys) are
// nullopt; an absent "cluster" is the empty ClusterSpec.
struct TfConfig {
  ClusterSpec cluster;
  std::optional<std::string> task_type;
  std::optional<int> task_id;
  std::optional<std::string> rpc_layer;
  std::optional<std::string> session_master;
  std::optional<std::string> environment;
};

// Parses TF_CONFIG text. As TensorFlow does, task.type may be a string or an
// integer (cast to its decimal string) and task.index an integer or a string
// holding one ("1"); an integral float (1.0) is also taken. Errors say
// "TF_CONFIG: ..." and what came:
//   kInvalidArgument: not JSON, not an object, a repeated key, a misshapen
//     "task" or task field (e.g. `TF_CONFIG: task.index must be an integer,
//     got "x"`), a non-string rpc_layer/session_master/environment, and the
//     cluster's own kInvalidArgument cases (ClusterSpec::FromJson);
//   kWrongType: the cluster's TypeError cases (a job that is not a list or
//     map, an address that is not a string), as TensorFlow raises TypeError.
// The text must be JSON: the resolver, not this function, reads "" as {}.
Result<TfConfig> ParseTfConfig(std::string_view json);

class TFConfigClusterResolver : public ClusterResolver {
 public:
  // Each set field overrides what TF_CONFIG says (TensorFlow's constructor
  // arguments).
  struct Options {
    std::optional<std::string> task_type;
    std::optional<int> task_id;
    std::optional<std::string> rpc_layer;
    std::optional<std::string> environment;
  };

  explicit TFConfigClusterResolver(Options options, Environment& env);

  // TF_CONFIG as it reads now; an unset or blank variable gives TfConfig{}.
  Result<TfConfig> tf_config() const;

  // TF_CONFIG's "cluster", or an empty ClusterSpec when there is none.
  Result<ClusterSpec> cluster_spec() const override;

  // TensorFlow's rules, in order: TF_CONFIG's session_master, verbatim, when
  // present; "" when the cluster is empty or is one job whose job_tasks() has
  // one entry; else the address of (task_type, task_id), each argument
  // falling back to task_type()/task_id(), prefixed by "<rpc_layer>://" where
  // rpc_layer (an argument, even "", wins over rpc_layer()) is non-empty.
  // kInvalidArgument when no task type or index is known; kNotFound when the
  // task is not in the cluster.
  using ClusterResolver::master;
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;

  // {"GPU": n} for the n GPUs the Environment sees on this host, else {}; the
  // task arguments do not change the answer (TensorFlow filters the devices
  // of a running session by task; we have no session to ask). Fails only
  // when TF_CONFIG is malformed.
  using ClusterResolver::num_accelerators;
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;

  // The environment given in Options, else "" (TensorFlow does not read
  // TF_CONFIG's "environment" here; TfConfig::environment has it).
  std::string environment() const override;

  // The override when set, else TF_CONFIG's task.type / task.index /
  // rpc_layer. nullopt when neither has one, and also when TF_CONFIG (or
  // that entry) is malformed: these accessors cannot fail; the Read* ones
  // below say why.
  std::optional<std::string> task_type() const override;
  std::optional<int> task_id() const override;
  std::optional<std::string> rpc_layer() const override;

  // TensorFlow's task_type / task_id / rpc_layer properties: as above, but
  // kInvalidArgument (ValueError in Python, as TensorFlow raises) when
  // TF_CONFIG is not a JSON object or the entry itself is malformed (a task
  // index that is not an integer). Like TensorFlow they read only their own
  // entry: a broken cluster does not hide the task.
  Result<std::optional<std::string>> ReadTaskType() const;
  Result<std::optional<int>> ReadTaskId() const;
  Result<std::optional<std::string>> ReadRpcLayer() const;

 private:
  Environment* env_;
  std::optional<std::string> environment_;
};

}  // namespace drover

#endif  // DROVER_TF_CONFIG_CLUSTER_RESOLVER_H_

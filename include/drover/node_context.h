// NodeContext: what a program started by `drover agent` knows about its place
// in the cluster (docs/run.md). The agent writes it as a JSON context file and
// points DROVER_CONTEXT_FILE at it; the program reads it with Load(). This is
// TensorFlowOnSpark's TFNodeContext for any program; Python's drover.context()
// wraps this type.
//
// The context file is one JSON object:
//   {"executor_id": str, "job_name": str, "task_index": int,
//    "cluster_spec": {job: [addr...] | {index: addr}}, "cluster_id": str,
//    "port": int, "ports": [int...], "default_fs": str, "working_dir": str,
//    "log_dir": str, "restart_count": int, "num_workers": int, "is_chief": bool,
//    "restart_reason": str}
// ("restart_reason" is written only after a restart; absent reads as "".)
//
// A NodeContext is a plain copyable value; const methods are thread-safe.

#ifndef DROVER_NODE_CONTEXT_H_
#define DROVER_NODE_CONTEXT_H_

#include <string>
#include <string_view>
#include <vector>

#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

// The environment variable naming the context file.
inline constexpr char kContextFileVariable[] = "DROVER_CONTEXT_FILE";

struct NodeContext {
  std::string executor_id;
  std::string job_name;
  int task_index = 0;
  ClusterSpec cluster_spec;
  std::string cluster_id;
  int port = 0;            // the node's address port in cluster_spec (ports[0])
  std::vector<int> ports;  // every port the agent reserved for the node
  std::string default_fs = "file://";
  std::string working_dir;
  std::string log_dir;
  int restart_count = 0;
  std::string restart_reason;  // why the group was re-formed; "" in the first round
  int num_workers = 0;         // tasks of the "worker" job
  bool is_chief = false;

  // Reads the file that `env`'s DROVER_CONTEXT_FILE names (a program passes
  // ProcessEnvironment()). kNotFound naming the variable when it is unset or
  // empty; otherwise as LoadFile().
  static Result<NodeContext> Load(const Environment& env);
  // kNotFound when the file cannot be opened, kInvalidArgument (naming the
  // file and the field) when it is not a context file.
  static Result<NodeContext> LoadFile(const std::string& path);
  // kInvalidArgument / kWrongType for a bad object or a field of the wrong type.
  static Result<NodeContext> FromJson(std::string_view json);
  std::string ToJson(int indent = -1) const;

  // TensorFlowOnSpark's absolute_path: a path with a scheme ("hdfs://x/y")
  // is returned as is; an absolute path gets default_fs in front
  // ("/d/x" -> "file:///d/x"); a relative path is resolved against
  // default_fs + working_dir ("x" -> "file:///work/dir/x"; the current
  // directory when working_dir is empty).
  std::string absolute_path(const std::string& path) const;
};

}  // namespace drover

#endif  // DROVER_NODE_CONTEXT_H_

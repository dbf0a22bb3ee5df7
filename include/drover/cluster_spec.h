// ClusterSpec: the set of processes in a distributed job, as jobs of tasks.
//
// Semantics are TensorFlow's tf.train.ClusterSpec: a job is a dense list of
// addresses (task i at position i) or a sparse {index: address} map. Jobs keep
// the order they were added in (TensorFlow's dict order); equality ignores that
// order, as TensorFlow's dict comparison does. AsClusterDef() writes
// TensorFlow's ClusterDef protobuf (docs/cluster_def.md) with jobs sorted by name
// and tasks by index, so equal specs give identical bytes.
//
// A ClusterSpec is a plain copyable value; const methods are safe to call from
// many threads.

#ifndef DROVER_CLUSTER_SPEC_H_
#define DROVER_CLUSTER_SPEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/status.h"

namespace drover {

class ClusterSpec {
 public:
  // Task index -> network address ("host:port").
  using TaskMap = std::map<int, std::string>;

  ClusterSpec() = default;

  // Parses the JSON form used by TF_CONFIG's "cluster": an object whose values
  // are arrays of strings (dense) or objects from decimal index strings to
  // strings (sparse). Errors: kInvalidArgument for bad JSON, a negative or
  // non-integer index, a duplicate job; kWrongType when a value is not a list,
  // map or string (TensorFlow's TypeError cases).
  static Result<ClusterSpec> FromJson(std::string_view json);

  // Parses a serialized TensorFlow ClusterDef. Accepts any valid protobuf
  // encoding (fields in any order, unknown fields, repeated map entries where
  // the last wins). kInvalidArgument when the bytes are not a ClusterDef.
  static Result<ClusterSpec> FromClusterDef(std::string_view bytes);

  // Adds a dense job; task i is tasks[i]. kInvalidArgument if the job exists
  // or its name is empty.
  Status AddJob(std::string name, std::vector<std::string> tasks);
  // Adds a sparse job. kInvalidArgument if the job exists, its name is empty,
  // or an index is negative.
  Status AddSparseJob(std::string name, TaskMap tasks);
  // Sets one task's address, creating the job if needed.
  Status SetTask(std::string_view job, int index, std::string address);

  // Job names in the order they were added.
  std::vector<std::string> jobs() const;
  bool has_job(std::string_view job) const;

  // The accessors below fail with kNotFound "No such job in cluster: '<job>'",
  // and task_address with "No task with index <i> in job '<job>'", the same
  // messages TensorFlow raises as ValueError.
  Result<int> num_tasks(std::string_view job) const;
  Result<std::vector<int>> task_indices(std::string_view job) const;
  Result<std::string> task_address(std::string_view job, int task_index) const;
  // Addresses by index, nullopt where a sparse job has a gap; [] for an empty job.
  Result<std::vector<std::optional<std::string>>> job_tasks(std::string_view job) const;
  // The job's task map (a view of what as_dict() would show as a map).
  Result<TaskMap> job_task_map(std::string_view job) const;
  // True when the job's indices are exactly 0..n-1 (as_dict shows a list).
  // An empty job is not dense: TensorFlow shows it as {}.
  bool is_dense(std::string_view job) const;

  // Total number of tasks over all jobs.
  int total_tasks() const;
  bool empty() const { return jobs_.empty(); }
  explicit operator bool() const { return !empty(); }

  // as_dict() in JSON: dense jobs as arrays, sparse (and empty) jobs as
  // objects keyed by decimal index strings. Keys in job-insertion order.
  std::string ToJson(int indent = -1) const;

  // TensorFlow's repr: ClusterSpec({'ps': ['a:1'], 'worker': {1: 'b:2'}}),
  // jobs sorted by name.
  std::string DebugString() const;

  // Serialized tensorflow.ClusterDef; deterministic bytes.
  std::string AsClusterDef() const;

  friend bool operator==(const ClusterSpec& a, const ClusterSpec& b);
  friend bool operator!=(const ClusterSpec& a, const ClusterSpec& b) { return !(a == b); }

 private:
  using Job = std::pair<std::string, TaskMap>;
  const TaskMap* FindJob(std::string_view job) const;
  TaskMap* FindJob(std::string_view job);

  std::vector<Job> jobs_;  // insertion order
};

}  // namespace drover

#endif  // DROVER_CLUSTER_SPEC_H_

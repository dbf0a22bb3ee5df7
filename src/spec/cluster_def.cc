// ClusterSpec <-> tensorflow.ClusterDef bytes. The mapping and what we accept
// are written down in docs/cluster_def.md.

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cluster.pb.h"
#include "drover/cluster_spec.h"
#include "spec/python_repr.h"

namespace drover {

std::string ClusterSpec::AsClusterDef() const {
  std::vector<const Job*> sorted;
  sorted.reserve(jobs_.size());
  for (const Job& job : jobs_) sorted.push_back(&job);
  // TensorFlow's _make_cluster_def sorts jobs by name too.
  std::sort(sorted.begin(), sorted.end(),
            [](const Job* a, const Job* b) { return a->first < b->first; });

  tf::ClusterDef def;
  for (const Job* job : sorted) {
    tf::JobDef* job_def = def.add_job();
    job_def->set_name(job->first);
    auto& tasks = *job_def->mutable_tasks();
    for (const auto& [index, address] : job->second) tasks[index] = address;
  }

  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    // Map fields are hash maps; only deterministic mode writes entries by key.
    coded.SetSerializationDeterministic(true);
    def.SerializeToCodedStream(&coded);
  }
  return bytes;
}

Result<ClusterSpec> ClusterSpec::FromClusterDef(std::string_view bytes) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status::InvalidArgument("ClusterDef of " + std::to_string(bytes.size()) +
                                   " bytes is too large to parse");
  }
  tf::ClusterDef def;
  if (!def.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::InvalidArgument("Bytes are not a serialized tensorflow.ClusterDef (" +
                                   std::to_string(bytes.size()) + " bytes)");
  }
  ClusterSpec spec;
  for (const tf::JobDef& job_def : def.job()) {
    if (job_def.name().empty()) {
      return Status::InvalidArgument("ClusterDef has a job with an empty name");
    }
    TaskMap tasks;
    for (const auto& [index, address] : job_def.tasks()) {
      if (index < 0) {
        return Status::InvalidArgument("ClusterDef job " + PythonRepr(job_def.name()) +
                                       " has negative task index " + std::to_string(index));
      }
      tasks.emplace(index, address);
    }
    // A job named twice: the later JobDef replaces the earlier one's tasks
    // but keeps its position, as TensorFlow's dict assignment does.
    if (TaskMap* existing = spec.FindJob(job_def.name())) {
      *existing = std::move(tasks);
    } else {
      DROVER_RETURN_IF_ERROR(spec.AddSparseJob(job_def.name(), std::move(tasks)));
    }
  }
  return spec;
}

}  // namespace drover

#include "drover/cluster_spec.h"

#include <algorithm>
#include <limits>

#include "spec/python_repr.h"

namespace drover {
namespace {

Status NoSuchJob(std::string_view job) {
  return Status::NotFound("No such job in cluster: " + PythonRepr(job));
}

Status CheckJobName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("Job name must not be empty");
  if (!IsValidUtf8(name)) {
    return Status::InvalidArgument("Job name " + PythonRepr(name) + " is not valid UTF-8");
  }
  return Status::Ok();
}

Status CheckTask(std::string_view job, int index, std::string_view address) {
  if (index < 0) {
    return Status::InvalidArgument("Task index must be non-negative, got " + std::to_string(index) +
                                   " in job " + PythonRepr(job));
  }
  // ClusterDef's addresses are proto3 strings, which must be UTF-8; checking
  // here keeps FromClusterDef(AsClusterDef()) an identity.
  if (!IsValidUtf8(address)) {
    return Status::InvalidArgument("Task address " + PythonRepr(address) + " of task " +
                                   std::to_string(index) + " in job " + PythonRepr(job) +
                                   " is not valid UTF-8");
  }
  return Status::Ok();
}

// repr() of what as_dict() holds for one job: a list when dense, else a dict.
std::string JobRepr(const ClusterSpec::TaskMap& tasks) {
  const bool dense = !tasks.empty() && tasks.rbegin()->first + 1 == static_cast<int>(tasks.size());
  std::string out(1, dense ? '[' : '{');
  bool first = true;
  for (const auto& [index, address] : tasks) {
    if (!first) out += ", ";
    first = false;
    if (!dense) out += std::to_string(index) + ": ";
    out += PythonRepr(address);
  }
  out += dense ? ']' : '}';
  return out;
}

}  // namespace

const ClusterSpec::TaskMap* ClusterSpec::FindJob(std::string_view job) const {
  for (const Job& entry : jobs_) {
    if (entry.first == job) return &entry.second;
  }
  return nullptr;
}

ClusterSpec::TaskMap* ClusterSpec::FindJob(std::string_view job) {
  for (Job& entry : jobs_) {
    if (entry.first == job) return &entry.second;
  }
  return nullptr;
}

Status ClusterSpec::AddJob(std::string name, std::vector<std::string> tasks) {
  DROVER_RETURN_IF_ERROR(CheckJobName(name));
  if (FindJob(name) != nullptr) {
    return Status::InvalidArgument("Duplicate job in cluster: " + PythonRepr(name));
  }
  if (tasks.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status::InvalidArgument("Job " + PythonRepr(name) + " has more tasks than an int holds");
  }
  TaskMap map;
  for (size_t i = 0; i < tasks.size(); ++i) {
    DROVER_RETURN_IF_ERROR(CheckTask(name, static_cast<int>(i), tasks[i]));
    map.emplace_hint(map.end(), static_cast<int>(i), std::move(tasks[i]));
  }
  jobs_.emplace_back(std::move(name), std::move(map));
  return Status::Ok();
}

Status ClusterSpec::AddSparseJob(std::string name, TaskMap tasks) {
  DROVER_RETURN_IF_ERROR(CheckJobName(name));
  if (FindJob(name) != nullptr) {
    return Status::InvalidArgument("Duplicate job in cluster: " + PythonRepr(name));
  }
  for (const auto& [index, address] : tasks) {
    DROVER_RETURN_IF_ERROR(CheckTask(name, index, address));
  }
  jobs_.emplace_back(std::move(name), std::move(tasks));
  return Status::Ok();
}

Status ClusterSpec::SetTask(std::string_view job, int index, std::string address) {
  DROVER_RETURN_IF_ERROR(CheckJobName(job));
  DROVER_RETURN_IF_ERROR(CheckTask(job, index, address));
  TaskMap* tasks = FindJob(job);
  if (tasks == nullptr) {
    jobs_.emplace_back(std::string(job), TaskMap());
    tasks = &jobs_.back().second;
  }
  (*tasks)[index] = std::move(address);
  return Status::Ok();
}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> names;
  names.reserve(jobs_.size());
  for (const Job& entry : jobs_) names.push_back(entry.first);
  return names;
}

bool ClusterSpec::has_job(std::string_view job) const {
  return FindJob(job) != nullptr;
}

Result<int> ClusterSpec::num_tasks(std::string_view job) const {
  const TaskMap* tasks = FindJob(job);
  if (tasks == nullptr) return NoSuchJob(job);
  return static_cast<int>(tasks->size());
}

Result<std::vector<int>> ClusterSpec::task_indices(std::string_view job) const {
  const TaskMap* tasks = FindJob(job);
  if (tasks == nullptr) return NoSuchJob(job);
  std::vector<int> indices;
  indices.reserve(tasks->size());
  for (const auto& entry : *tasks) indices.push_back(entry.first);
  return indices;
}

Result<std::string> ClusterSpec::task_address(std::string_view job, int task_index) const {
  const TaskMap* tasks = FindJob(job);
  if (tasks == nullptr) return NoSuchJob(job);
  auto it = tasks->find(task_index);
  if (it == tasks->end()) {
    return Status::NotFound("No task with index " + std::to_string(task_index) + " in job " +
                            PythonRepr(job));
  }
  return it->second;
}

Result<std::vector<std::optional<std::string>>> ClusterSpec::job_tasks(std::string_view job) const {
  const TaskMap* tasks = FindJob(job);
  if (tasks == nullptr) return NoSuchJob(job);
  std::vector<std::optional<std::string>> out;
  if (tasks->empty()) return out;  // TensorFlow raises on max() of nothing.
  out.resize(static_cast<size_t>(tasks->rbegin()->first) + 1);
  for (const auto& [index, address] : *tasks) out[index] = address;
  return out;
}

Result<ClusterSpec::TaskMap> ClusterSpec::job_task_map(std::string_view job) const {
  const TaskMap* tasks = FindJob(job);
  if (tasks == nullptr) return NoSuchJob(job);
  return *tasks;
}

bool ClusterSpec::is_dense(std::string_view job) const {
  const TaskMap* tasks = FindJob(job);
  // Indices are distinct and non-negative, so max + 1 == size means 0..n-1.
  return tasks != nullptr && !tasks->empty() &&
         tasks->rbegin()->first + 1 == static_cast<int>(tasks->size());
}

int ClusterSpec::total_tasks() const {
  size_t total = 0;
  for (const Job& entry : jobs_) total += entry.second.size();
  return static_cast<int>(std::min<size_t>(total, std::numeric_limits<int>::max()));
}

std::string ClusterSpec::DebugString() const {
  std::vector<const Job*> sorted;
  sorted.reserve(jobs_.size());
  for (const Job& entry : jobs_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(),
            [](const Job* a, const Job* b) { return a->first < b->first; });
  std::string out = "ClusterSpec({";
  bool first = true;
  for (const Job* job : sorted) {
    if (!first) out += ", ";
    first = false;
    out += PythonRepr(job->first) + ": " + JobRepr(job->second);
  }
  out += "})";
  return out;
}

bool operator==(const ClusterSpec& a, const ClusterSpec& b) {
  if (a.jobs_.size() != b.jobs_.size()) return false;
  for (const auto& [name, tasks] : a.jobs_) {
    const ClusterSpec::TaskMap* other = b.FindJob(name);
    if (other == nullptr || *other != tasks) return false;
  }
  return true;
}

}  // namespace drover

#include "spec/cluster_spec_json.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "spec/python_repr.h"
#include "spec/strict_json.h"

namespace drover {
namespace {

using Json = nlohmann::ordered_json;

// TensorFlow raises these TypeErrors from ClusterSpec.__init__ and
// _make_cluster_def (compat.as_bytes on the address).
Status AddressTypeError(const Json& address, std::string_view job, const std::string& where) {
  return Status::WrongType("Task address " + PythonReprOfJson(address) +
                           " must be bytes or unicode (" + where + " of job " + PythonRepr(job) +
                           ", got " + JsonTypeName(address) + ")");
}

Result<int> ParseTaskIndex(const std::string& key, std::string_view job) {
  long long index;
  if (!ParsePythonInt(key, &index)) {
    // Python's own ValueError from int(key).
    return Status::InvalidArgument("invalid literal for int() with base 10: " + PythonRepr(key) +
                                   " (task index in job " + PythonRepr(job) + ")");
  }
  if (index < 0) {
    return Status::InvalidArgument("Task index must be non-negative, got " + std::to_string(index) +
                                   " in job " + PythonRepr(job));
  }
  if (index > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument("Task index " + std::to_string(index) + " in job " +
                                   PythonRepr(job) + " does not fit ClusterDef's int32 key");
  }
  return static_cast<int>(index);
}

}  // namespace

Result<ClusterSpec> ClusterSpecFromJsonValue(const Json& cluster) {
  if (!cluster.is_object()) {
    return Status::WrongType(
        "`cluster` must be a dictionary mapping one or more job names to lists of network "
        "addresses, or a `ClusterDef` protocol buffer (got " +
        JsonTypeName(cluster) + ")");
  }
  ClusterSpec spec;
  for (const auto& [job, tasks] : cluster.items()) {
    if (tasks.is_array()) {
      std::vector<std::string> addresses;
      addresses.reserve(tasks.size());
      for (size_t i = 0; i < tasks.size(); ++i) {
        if (!tasks[i].is_string()) {
          return AddressTypeError(tasks[i], job, "task " + std::to_string(i));
        }
        addresses.push_back(tasks[i].get<std::string>());
      }
      DROVER_RETURN_IF_ERROR(spec.AddJob(job, std::move(addresses)));
    } else if (tasks.is_object()) {
      ClusterSpec::TaskMap map;
      for (const auto& [key, address] : tasks.items()) {
        DROVER_ASSIGN_OR_RETURN(int index, ParseTaskIndex(key, job));
        if (!address.is_string()) {
          return AddressTypeError(address, job, "task " + PythonRepr(key));
        }
        // "1" and "01" are different keys but the same task.
        if (!map.emplace(index, address.get<std::string>()).second) {
          return Status::InvalidArgument("Duplicate task index " + std::to_string(index) +
                                         " in job " + PythonRepr(job));
        }
      }
      DROVER_RETURN_IF_ERROR(spec.AddSparseJob(job, std::move(map)));
    } else {
      return Status::WrongType("The tasks for job " + PythonRepr(job) +
                               " must be a list or a dictionary from integers to strings. (got " +
                               JsonTypeName(tasks) + ")");
    }
  }
  return spec;
}

Json ClusterSpecToJsonValue(const ClusterSpec& spec) {
  Json out = Json::object();
  for (const std::string& job : spec.jobs()) {
    // The job exists, so these cannot fail.
    ClusterSpec::TaskMap tasks = spec.job_task_map(job).value();
    if (spec.is_dense(job)) {
      Json list = Json::array();
      for (auto& entry : tasks) list.push_back(std::move(entry.second));
      out[job] = std::move(list);
    } else {
      Json map = Json::object();
      for (auto& [index, address] : tasks) map[std::to_string(index)] = std::move(address);
      out[job] = std::move(map);
    }
  }
  return out;
}

Result<ClusterSpec> ClusterSpec::FromJson(std::string_view json) {
  auto parsed = ParseStrictJson(json);
  if (!parsed.ok()) return parsed.status().WithContext("ClusterSpec JSON");
  return ClusterSpecFromJsonValue(*parsed);
}

std::string ClusterSpec::ToJson(int indent) const {
  return ClusterSpecToJsonValue(*this).dump(indent);
}

}  // namespace drover

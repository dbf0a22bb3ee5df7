#include "drover/node_context.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

namespace drover {
namespace {

using Json = nlohmann::ordered_json;

Status FieldError(const char* field, const char* expected, const Json& got) {
  return Status::WrongType(std::string("context field '") + field + "' must be " + expected +
                           "; got " + got.dump());
}

// Reads one field into *out; kInvalidArgument when it is missing.
template <typename T>
Status Get(const Json& object, const char* field, T* out) {
  auto it = object.find(field);
  if (it == object.end()) {
    return Status::InvalidArgument(std::string("context has no field '") + field + "'");
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return FieldError(field, "a string", *it);
    *out = it->template get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return FieldError(field, "a boolean", *it);
    *out = it->template get<bool>();
  } else if constexpr (std::is_same_v<T, int>) {
    if (!it->is_number_integer()) return FieldError(field, "an integer", *it);
    *out = it->template get<int>();
  } else {
    static_assert(std::is_same_v<T, std::vector<int>>);
    if (!it->is_array()) return FieldError(field, "an array of integers", *it);
    out->clear();
    for (const Json& port : *it) {
      if (!port.is_number_integer()) return FieldError(field, "an array of integers", *it);
      out->push_back(port.get<int>());
    }
  }
  return Status::Ok();
}

bool HasScheme(const std::string& path) {
  size_t colon = path.find("://");
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    char c = path[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<NodeContext> NodeContext::Load(const Environment& env) {
  const std::optional<std::string> path = env.Get(kContextFileVariable);
  if (!path || path->empty()) {
    return Status::NotFound(std::string(kContextFileVariable) +
                            " is not set: this process was not started by `drover agent`");
  }
  return LoadFile(*path);
}

Result<NodeContext> NodeContext::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open the context file " + path);
  std::stringstream text;
  text << in.rdbuf();
  Result<NodeContext> context = FromJson(text.str());
  if (!context.ok()) return context.status().WithContext("context file " + path);
  return context;
}

Result<NodeContext> NodeContext::FromJson(std::string_view json) {
  Json object = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return Status::InvalidArgument("the context is not valid JSON");
  if (!object.is_object()) return Status::InvalidArgument("the context is not a JSON object");
  NodeContext context;
  DROVER_RETURN_IF_ERROR(Get(object, "executor_id", &context.executor_id));
  DROVER_RETURN_IF_ERROR(Get(object, "job_name", &context.job_name));
  DROVER_RETURN_IF_ERROR(Get(object, "task_index", &context.task_index));
  auto spec = object.find("cluster_spec");
  if (spec == object.end()) return Status::InvalidArgument("context has no field 'cluster_spec'");
  Result<ClusterSpec> cluster = ClusterSpec::FromJson(spec->dump());
  if (!cluster.ok()) return cluster.status().WithContext("context field 'cluster_spec'");
  context.cluster_spec = std::move(cluster).value();
  DROVER_RETURN_IF_ERROR(Get(object, "cluster_id", &context.cluster_id));
  DROVER_RETURN_IF_ERROR(Get(object, "port", &context.port));
  DROVER_RETURN_IF_ERROR(Get(object, "ports", &context.ports));
  DROVER_RETURN_IF_ERROR(Get(object, "default_fs", &context.default_fs));
  DROVER_RETURN_IF_ERROR(Get(object, "working_dir", &context.working_dir));
  DROVER_RETURN_IF_ERROR(Get(object, "log_dir", &context.log_dir));
  DROVER_RETURN_IF_ERROR(Get(object, "restart_count", &context.restart_count));
  DROVER_RETURN_IF_ERROR(Get(object, "num_workers", &context.num_workers));
  DROVER_RETURN_IF_ERROR(Get(object, "is_chief", &context.is_chief));
  if (object.contains("restart_reason")) {
    DROVER_RETURN_IF_ERROR(Get(object, "restart_reason", &context.restart_reason));
  }
  return context;
}

std::string NodeContext::ToJson(int indent) const {
  Json object;
  object["executor_id"] = executor_id;
  object["job_name"] = job_name;
  object["task_index"] = task_index;
  object["cluster_spec"] = Json::parse(cluster_spec.ToJson());
  object["cluster_id"] = cluster_id;
  object["port"] = port;
  object["ports"] = ports;
  object["default_fs"] = default_fs;
  object["working_dir"] = working_dir;
  object["log_dir"] = log_dir;
  object["restart_count"] = restart_count;
  object["num_workers"] = num_workers;
  object["is_chief"] = is_chief;
  if (!restart_reason.empty()) object["restart_reason"] = restart_reason;
  return object.dump(indent);
}

std::string NodeContext::absolute_path(const std::string& path) const {
  if (HasScheme(path)) return path;
  std::string fs = default_fs;
  while (!fs.empty() && fs.back() == '/' && !fs.ends_with("://")) fs.pop_back();
  if (!path.empty() && path.front() == '/') return fs + path;
  std::string dir = working_dir;
  if (dir.empty()) {
    std::error_code error;
    dir = std::filesystem::current_path(error).string();
  }
  if (dir.empty() || dir.front() != '/') dir = "/" + dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return fs + (dir == "/" ? "" : dir) + "/" + path;
}

}  // namespace drover

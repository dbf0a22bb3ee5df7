#include "drover/tf_config_cluster_resolver.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "spec/cluster_spec_json.h"
#include "spec/strict_json.h"

namespace drover {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kTfConfigVariable[] = "TF_CONFIG";
constexpr size_t kMaxQuotedBytes = 60;

Status Malformed(const std::string& what) {
  return Status::InvalidArgument("TF_CONFIG: " + what);
}

// The value as JSON text for a message: scalars verbatim (shortened on a
// character boundary), containers by kind, so nothing deep is walked.
std::string Quote(const Json& value) {
  if (value.is_array() || value.is_object()) return JsonTypeName(value);
  std::string text = value.dump();
  if (text.size() > kMaxQuotedBytes) {
    size_t cut = kMaxQuotedBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  return text;
}

bool FitsInt(long long value) {
  return value >= std::numeric_limits<int>::min() && value <= std::numeric_limits<int>::max();
}

// TensorFlow's int(task_info['index']).
Result<int> ParseTaskIndex(const Json& index) {
  const Status not_integer = Malformed("task.index must be an integer, got " + Quote(index));
  if (index.is_number_unsigned()) {
    if (index.get<unsigned long long>() >
        static_cast<unsigned long long>(std::numeric_limits<int>::max())) {
      return Malformed("task.index " + Quote(index) + " does not fit in an int");
    }
    return static_cast<int>(index.get<unsigned long long>());
  }
  if (index.is_number_integer()) {
    long long value = index.get<long long>();
    if (!FitsInt(value)) return Malformed("task.index " + Quote(index) + " does not fit in an int");
    return static_cast<int>(value);
  }
  if (index.is_number_float()) {
    // Python would truncate 1.5 to 1; a fractional index is a mistake.
    double value = index.get<double>();
    if (!std::isfinite(value) || std::trunc(value) != value) return not_integer;
    if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
      return Malformed("task.index " + Quote(index) + " does not fit in an int");
    }
    return static_cast<int>(value);
  }
  if (index.is_string()) {
    long long value;
    if (!ParsePythonInt(index.get_ref<const std::string&>(), &value)) return not_integer;
    if (!FitsInt(value)) return Malformed("task.index " + Quote(index) + " does not fit in an int");
    return static_cast<int>(value);
  }
  return not_integer;
}

// TensorFlow's str(task_info['type']), for the JSON types where str() gives a
// sensible job name.
Result<std::string> ParseTaskType(const Json& type) {
  if (type.is_string()) return type.get<std::string>();
  if (type.is_number_integer()) return type.dump();
  return Malformed("task.type must be a string, got " + Quote(type));
}

// rpc_layer, session_master, environment: a string, or null for "not set"
// (TensorFlow tests these against None).
Status ParseOptionalString(const Json& config, const char* key, std::optional<std::string>* out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) {
    return Malformed(std::string(key) + " must be a string, got " + Quote(*it));
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

bool IsBlank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// TF_CONFIG as a JSON object; unset or blank: {} (as TensorFlow reads it).
Result<Json> ReadTfConfigObject(const Environment& env) {
  std::optional<std::string> text = env.Get(kTfConfigVariable);
  if (!text.has_value() || IsBlank(*text)) return Json::object();
  auto parsed = ParseStrictJson(*text);
  if (!parsed.ok()) return parsed.status().WithContext("TF_CONFIG");
  if (!parsed->is_object()) return Malformed("must be a JSON object, got " + Quote(*parsed));
  return std::move(parsed).value();
}

// TensorFlow: task_info = tf_config.get('task', {}); then the one key.
Result<const Json*> TaskEntry(const Json& config, const char* key) {
  auto task = config.find("task");
  if (task == config.end()) return static_cast<const Json*>(nullptr);
  if (!task->is_object()) return Malformed("task must be an object, got " + Quote(*task));
  auto entry = task->find(key);
  return entry == task->end() ? nullptr : &*entry;
}

}  // namespace

Result<TfConfig> ParseTfConfig(std::string_view json) {
  auto parsed = ParseStrictJson(json);
  if (!parsed.ok()) return parsed.status().WithContext("TF_CONFIG");
  const Json& config = *parsed;
  if (!config.is_object()) return Malformed("must be a JSON object, got " + Quote(config));

  TfConfig result;
  if (auto it = config.find("cluster"); it != config.end()) {
    auto cluster = ClusterSpecFromJsonValue(*it);
    if (!cluster.ok()) return cluster.status().WithContext("TF_CONFIG: cluster");
    result.cluster = std::move(cluster).value();
  }
  if (auto it = config.find("task"); it != config.end()) {
    const Json& task = *it;
    if (!task.is_object()) return Malformed("task must be an object, got " + Quote(task));
    if (auto type = task.find("type"); type != task.end()) {
      DROVER_ASSIGN_OR_RETURN(result.task_type, ParseTaskType(*type));
    }
    if (auto index = task.find("index"); index != task.end()) {
      DROVER_ASSIGN_OR_RETURN(result.task_id, ParseTaskIndex(*index));
    }
  }
  DROVER_RETURN_IF_ERROR(ParseOptionalString(config, "rpc_layer", &result.rpc_layer));
  DROVER_RETURN_IF_ERROR(ParseOptionalString(config, "session_master", &result.session_master));
  DROVER_RETURN_IF_ERROR(ParseOptionalString(config, "environment", &result.environment));
  return result;
}

TFConfigClusterResolver::TFConfigClusterResolver(Options options, Environment& env)
    : env_(&env), environment_(std::move(options.environment)) {
  task_type_ = std::move(options.task_type);
  task_id_ = options.task_id;
  rpc_layer_ = std::move(options.rpc_layer);
}

Result<TfConfig> TFConfigClusterResolver::tf_config() const {
  std::optional<std::string> text = env_->Get(kTfConfigVariable);
  // TensorFlow reads an unset variable as '{}'; a blank one (as launchers
  // often export) is taken the same way rather than as broken JSON.
  if (!text.has_value() || IsBlank(*text)) return TfConfig{};
  return ParseTfConfig(*text);
}

Result<ClusterSpec> TFConfigClusterResolver::cluster_spec() const {
  DROVER_ASSIGN_OR_RETURN(TfConfig config, tf_config());
  return std::move(config.cluster);
}

Result<std::string> TFConfigClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  DROVER_ASSIGN_OR_RETURN(TfConfig config, tf_config());
  if (config.session_master.has_value()) return *config.session_master;

  // A single-task cluster has no remote master. TensorFlow counts job_tasks()
  // entries (max index + 1), so a lone sparse task {3: ...} does not qualify;
  // counting from the indices avoids building that list.
  const std::vector<std::string> jobs = config.cluster.jobs();
  if (jobs.empty()) return std::string();
  if (jobs.size() == 1) {
    const std::vector<int> indices = config.cluster.task_indices(jobs[0]).value();
    if (indices.size() == 1 && indices[0] == 0) return std::string();
  }

  const std::optional<std::string> type = task_type.has_value()    ? task_type
                                          : task_type_.has_value() ? task_type_
                                                                   : config.task_type;
  const std::optional<int> id = task_id.has_value()    ? task_id
                                : task_id_.has_value() ? task_id_
                                                       : config.task_id;
  const std::optional<std::string> layer = rpc_layer.has_value()    ? rpc_layer
                                           : rpc_layer_.has_value() ? rpc_layer_
                                                                    : config.rpc_layer;
  if (!type.has_value()) {
    return Malformed("no task.type to find the master by, and no task_type was given");
  }
  if (!id.has_value()) {
    return Malformed("no task.index to find the master by, and no task_id was given");
  }
  DROVER_ASSIGN_OR_RETURN(std::string address, config.cluster.task_address(*type, *id));
  return FormatMasterUrl(address, layer.value_or(""));
}

Result<AcceleratorMap> TFConfigClusterResolver::num_accelerators(
    const std::optional<std::string>& /*task_type*/, std::optional<int> /*task_id*/) const {
  // TensorFlow resolves the task from TF_CONFIG first, so a malformed one fails.
  DROVER_RETURN_IF_ERROR(tf_config().status());
  return LocalAccelerators(*env_);
}

std::string TFConfigClusterResolver::environment() const {
  return environment_.value_or("");
}

std::optional<std::string> TFConfigClusterResolver::task_type() const {
  Result<std::optional<std::string>> type = ReadTaskType();
  return type.ok() ? *type : std::nullopt;
}

std::optional<int> TFConfigClusterResolver::task_id() const {
  Result<std::optional<int>> id = ReadTaskId();
  return id.ok() ? *id : std::nullopt;
}

std::optional<std::string> TFConfigClusterResolver::rpc_layer() const {
  Result<std::optional<std::string>> layer = ReadRpcLayer();
  return layer.ok() ? *layer : std::nullopt;
}

Result<std::optional<std::string>> TFConfigClusterResolver::ReadTaskType() const {
  if (task_type_.has_value()) return task_type_;
  DROVER_ASSIGN_OR_RETURN(Json config, ReadTfConfigObject(*env_));
  DROVER_ASSIGN_OR_RETURN(const Json* type, TaskEntry(config, "type"));
  if (type == nullptr) return std::optional<std::string>();
  DROVER_ASSIGN_OR_RETURN(std::string parsed, ParseTaskType(*type));
  return std::optional<std::string>(std::move(parsed));
}

Result<std::optional<int>> TFConfigClusterResolver::ReadTaskId() const {
  if (task_id_.has_value()) return task_id_;
  DROVER_ASSIGN_OR_RETURN(Json config, ReadTfConfigObject(*env_));
  DROVER_ASSIGN_OR_RETURN(const Json* index, TaskEntry(config, "index"));
  if (index == nullptr) return std::optional<int>();
  DROVER_ASSIGN_OR_RETURN(int parsed, ParseTaskIndex(*index));
  return std::optional<int>(parsed);
}

Result<std::optional<std::string>> TFConfigClusterResolver::ReadRpcLayer() const {
  if (rpc_layer_.has_value()) return rpc_layer_;
  DROVER_ASSIGN_OR_RETURN(Json config, ReadTfConfigObject(*env_));
  std::optional<std::string> layer;
  DROVER_RETURN_IF_ERROR(ParseOptionalString(config, "rpc_layer", &layer));
  return layer;
}

}  // namespace drover

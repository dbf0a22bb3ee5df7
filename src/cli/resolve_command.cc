#include "cli/resolve_command.h"

#include <nlohmann/json.hpp>

#include "drover/auto_resolver.h"
#include "drover/framework_env.h"

namespace drover::cli {
namespace {

using Json = nlohmann::ordered_json;

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kWrongType:
    case Status::Code::kAlreadyExists:
    case Status::Code::kIoError:  // every file resolve reads is one the user named
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int Fail(std::ostream& err, const Status& status) {
  err << "drover resolve: " << status.message() << "\n";
  return ExitCodeFor(status);
}

Json OptionalJson(const std::optional<std::string>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// The current task, which tf-config and env formats need.
Result<std::pair<std::string, int>> CurrentTask(const ClusterResolver& resolver,
                                                std::string_view kind) {
  std::optional<std::string> type = resolver.task_type();
  std::optional<int> id = resolver.task_id();
  if (!type || !id) {
    return Status::InvalidArgument("the " + std::string(kind) +
                                   " resolver does not say which task this process is; pass "
                                   "--task-type and --task-index");
  }
  return std::make_pair(*type, *id);
}

Result<std::string> FormatJson(const ClusterResolver& resolver, const ClusterSpec& cluster,
                               std::string_view kind) {
  Json out;
  out["resolver"] = std::string(kind);
  out["cluster"] = Json::parse(cluster.ToJson());
  out["task_type"] = OptionalJson(resolver.task_type());
  out["task_id"] = resolver.task_id() ? Json(*resolver.task_id()) : Json(nullptr);
  out["rpc_layer"] = OptionalJson(resolver.rpc_layer());
  // The master of this task, as TFConfigClusterResolver gives it; a static
  // cluster (SimpleClusterResolver) only knows it when asked for the task.
  DROVER_ASSIGN_OR_RETURN(std::string master,
                          resolver.master(resolver.task_type(), resolver.task_id(), std::nullopt));
  out["master"] = master;
  DROVER_ASSIGN_OR_RETURN(AcceleratorMap accelerators, resolver.num_accelerators());
  out["num_accelerators"] = accelerators;
  out["environment"] = resolver.environment();
  return out.dump(2) + "\n";
}

}  // namespace

int RunResolve(const ResolveFlags& flags, Environment& env, std::ostream& out, std::ostream& err,
               bool out_is_terminal) {
  auto choice = MakeClusterResolver(flags.resolver, env);
  if (!choice.ok()) return Fail(err, choice.status());
  ClusterResolver& resolver = *choice->resolver;
  if (flags.task_type) resolver.set_task_type(flags.task_type);
  if (flags.task_index) resolver.set_task_id(flags.task_index);
  if (flags.rpc_layer) resolver.set_rpc_layer(flags.rpc_layer);

  auto cluster = resolver.cluster_spec();
  if (!cluster.ok()) return Fail(err, cluster.status());

  if (flags.format == "json") {
    auto text = FormatJson(resolver, *cluster, choice->kind);
    if (!text.ok()) return Fail(err, text.status());
    out << *text;
    return kExitOk;
  }
  if (flags.format == "cluster-def") {
    if (out_is_terminal) {
      return Fail(err, Status::InvalidArgument(
                           "--format cluster-def writes binary protobuf; redirect it to a file"));
    }
    out << cluster->AsClusterDef();
    return kExitOk;
  }
  auto task = CurrentTask(resolver, choice->kind);
  if (!task.ok()) return Fail(err, task.status());
  if (flags.format == "tf-config") {
    auto config = MakeTfConfig(*cluster, task->first, task->second, resolver.rpc_layer());
    if (!config.ok()) return Fail(err, config.status());
    out << *config << "\n";
    return kExitOk;
  }
  if (flags.format == "env") {
    FrameworkEnvOptions options;
    options.rpc_layer = resolver.rpc_layer();
    auto vars = FrameworkEnvironment(*cluster, task->first, task->second, options);
    if (!vars.ok()) return Fail(err, vars.status());
    out << FormatShellExports(*vars);
    return kExitOk;
  }
  return Fail(err, Status::InvalidArgument("unknown --format '" + flags.format +
                                           "' (expected json, tf-config, cluster-def or env)"));
}

}  // namespace drover::cli

#include "drover/auto_resolver.h"

#include <nlohmann/json.hpp>

#include "drover/kubernetes_cluster_resolver.h"
#include "drover/mpi_cluster_resolver.h"
#include "drover/resource_spec_cluster_resolver.h"
#include "drover/slurm_cluster_resolver.h"
#include "drover/tf_config_cluster_resolver.h"
#include "drover/torch_env_cluster_resolver.h"

namespace drover {
namespace {

constexpr std::string_view kResourceSpecPrefix = "resource-spec=";
constexpr std::string_view kStaticPrefix = "static=";

bool IsSet(const Environment& env, std::string_view name) {
  std::optional<std::string> value = env.Get(name);
  return value.has_value() && !value->empty();
}

template <typename Resolver>
Result<ResolverChoice> Choose(std::string kind, Result<std::unique_ptr<Resolver>> made) {
  if (!made.ok()) return made.status();
  return ResolverChoice{std::move(kind), std::move(made).value()};
}

// static=JSON: a cluster dict, or an object shaped like TF_CONFIG.
Result<ResolverChoice> MakeStatic(std::string_view json) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Status::InvalidArgument("--resolver static=JSON: not a JSON object: " +
                                   std::string(json.substr(0, 80)));
  }
  SimpleClusterResolver::Options options;
  ClusterSpec cluster;
  if (parsed.contains("cluster")) {
    auto config = ParseTfConfig(json);
    if (!config.ok()) return config.status().WithContext("--resolver static=JSON");
    cluster = config->cluster;
    options.task_type = config->task_type;
    options.task_id = config->task_id;
    options.rpc_layer = config->rpc_layer;
  } else {
    auto spec = ClusterSpec::FromJson(json);
    if (!spec.ok()) return spec.status().WithContext("--resolver static=JSON");
    cluster = std::move(spec).value();
  }
  return ResolverChoice{
      "static", std::make_unique<SimpleClusterResolver>(std::move(cluster), std::move(options))};
}

Result<ResolverChoice> MakeNamed(std::string_view name, Environment& env) {
  if (name == "tfconfig") {
    return ResolverChoice{"tfconfig", std::make_unique<TFConfigClusterResolver>(
                                          TFConfigClusterResolver::Options{}, env)};
  }
  if (name == "slurm") return Choose("slurm", SlurmClusterResolver::Create({}, env));
  if (name == "mpi") return Choose("mpi", MPIClusterResolver::CreateWithMpi({}, env));
  if (name == "torch") return Choose("torch", TorchEnvClusterResolver::Create({}, env));
  if (name == "k8s") return Choose("k8s", KubernetesClusterResolver::Create({}, env));
  if (name.starts_with(kResourceSpecPrefix)) {
    std::string path(name.substr(kResourceSpecPrefix.size()));
    return Choose("resource-spec", ResourceSpecClusterResolver::Create(path, {}, env));
  }
  if (name.starts_with(kStaticPrefix)) return MakeStatic(name.substr(kStaticPrefix.size()));
  return Status::InvalidArgument(
      "unknown resolver '" + std::string(name) +
      "' (expected auto, tfconfig, slurm, mpi, torch, k8s, resource-spec=FILE or static=JSON)");
}

std::optional<std::string> Detect(const Environment& env) {
  if (IsSet(env, "TF_CONFIG")) return "tfconfig";
  if (IsSet(env, "RANK") && IsSet(env, "WORLD_SIZE") && IsSet(env, "MASTER_ADDR")) return "torch";
  if (IsSet(env, "OMPI_COMM_WORLD_RANK") || IsSet(env, "PMI_RANK")) return "mpi";
  if (IsSet(env, "SLURM_PROCID") &&
      (IsSet(env, "SLURM_STEP_NODELIST") || IsSet(env, "SLURM_JOB_NODELIST") ||
       IsSet(env, "SLURM_NODELIST"))) {
    return "slurm";
  }
  if (IsSet(env, "JOB_COMPLETION_INDEX")) return "k8s";
  if (IsSet(env, "DROVER_RESOURCE_SPEC")) {
    return std::string(kResourceSpecPrefix) + *env.Get("DROVER_RESOURCE_SPEC");
  }
  return std::nullopt;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& AutoResolverOrder() {
  static const auto* order = new std::vector<std::pair<std::string, std::string>>{
      {"tfconfig", "TF_CONFIG is set and not empty"},
      {"torch", "RANK, WORLD_SIZE and MASTER_ADDR are set (torchrun)"},
      {"mpi", "OMPI_COMM_WORLD_RANK or PMI_RANK is set (mpirun, mpiexec)"},
      {"slurm", "SLURM_PROCID and SLURM_STEP_NODELIST/SLURM_JOB_NODELIST are set (srun)"},
      {"k8s", "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job)"},
      {"resource-spec", "DROVER_RESOURCE_SPEC names an AutoDist resource spec file"},
  };
  return *order;
}

Result<ResolverChoice> MakeClusterResolver(std::string_view name, Environment& env) {
  if (name != "auto") return MakeNamed(name, env);
  std::optional<std::string> detected = Detect(env);
  if (!detected) {
    std::string checked;
    for (const auto& [kind, looks_for] : AutoResolverOrder()) {
      checked += checked.empty() ? "" : "; ";
      checked += looks_for;
    }
    return Status::NotFound("no cluster found in the environment; checked: " + checked +
                            ". Pass --resolver static=JSON to give one by hand");
  }
  return MakeNamed(*detected, env);
}

}  // namespace drover

#include "drover/torch_env_cluster_resolver.h"

#include <string>
#include <utility>

#include "resolver/resolver_env.h"

namespace drover {
namespace {

constexpr std::string_view kNotUnderTorchrun = "not started by torchrun?";

// The torchrun variables, checked against each other.
struct TorchVars {
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
  int local_world_size = 1;
  std::optional<int> group_rank;
  std::string master_addr;
  int master_port = 0;
};

Result<TorchVars> ReadTorchVars(const Environment& env) {
  using resolver_internal::RequireIntVar;
  TorchVars vars;
  DROVER_ASSIGN_OR_RETURN(vars.rank, RequireIntVar(env, "RANK", kNotUnderTorchrun));
  DROVER_ASSIGN_OR_RETURN(vars.world_size, RequireIntVar(env, "WORLD_SIZE", kNotUnderTorchrun, 1));
  if (vars.rank >= vars.world_size) {
    return Status::InvalidArgument("RANK=" + std::to_string(vars.rank) +
                                   " must be < WORLD_SIZE=" + std::to_string(vars.world_size));
  }
  DROVER_ASSIGN_OR_RETURN(std::optional<int> local_rank,
                          resolver_internal::OptionalIntVar(env, "LOCAL_RANK"));
  DROVER_ASSIGN_OR_RETURN(std::optional<int> local_world_size,
                          resolver_internal::OptionalIntVar(env, "LOCAL_WORLD_SIZE", 1));
  // Both unset: one process per host (a plain env:// launch). One without the
  // other is a broken launcher, not a default.
  if (local_rank.has_value() != local_world_size.has_value()) {
    return Status::NotFound(std::string(local_rank ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK") +
                            " is not set but " + (local_rank ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE") +
                            " is");
  }
  vars.local_rank = local_rank.value_or(0);
  vars.local_world_size = local_world_size.value_or(1);
  if (vars.local_rank >= vars.local_world_size) {
    return Status::InvalidArgument(
        "LOCAL_RANK=" + std::to_string(vars.local_rank) +
        " must be < LOCAL_WORLD_SIZE=" + std::to_string(vars.local_world_size));
  }
  if (vars.local_world_size > vars.world_size) {
    return Status::InvalidArgument("LOCAL_WORLD_SIZE=" + std::to_string(vars.local_world_size) +
                                   " must be <= WORLD_SIZE=" + std::to_string(vars.world_size));
  }
  DROVER_ASSIGN_OR_RETURN(vars.group_rank, resolver_internal::OptionalIntVar(env, "GROUP_RANK"));
  DROVER_ASSIGN_OR_RETURN(vars.master_addr,
                          resolver_internal::RequireVar(env, "MASTER_ADDR", kNotUnderTorchrun));
  if (vars.master_addr.empty()) return Status::InvalidArgument("MASTER_ADDR is empty");
  if (vars.master_addr.find_first_of(" \t\n/") != std::string::npos) {
    return Status::InvalidArgument("MASTER_ADDR=" + vars.master_addr + " is not a host name");
  }
  DROVER_ASSIGN_OR_RETURN(std::string port_text,
                          resolver_internal::RequireVar(env, "MASTER_PORT", kNotUnderTorchrun));
  DROVER_ASSIGN_OR_RETURN(vars.master_port,
                          resolver_internal::ParseIntVar("MASTER_PORT", port_text, 1, 65535));
  return vars;
}

// IPv6 literals need brackets in "host:port".
std::string HostPort(const std::string& host, int port) {
  bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

TorchEnvClusterResolver::TorchEnvClusterResolver(Options options, Environment& env)
    : options_(std::move(options)), env_(&env) {
  rpc_layer_ = options_.rpc_layer;
}

Result<std::unique_ptr<TorchEnvClusterResolver>> TorchEnvClusterResolver::Create(Options options,
                                                                                 Environment& env) {
  if (options.job_name.empty()) return Status::InvalidArgument("job_name is empty");
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort("port_base", options.port_base));
  std::unique_ptr<TorchEnvClusterResolver> resolver(
      new TorchEnvClusterResolver(std::move(options), env));
  DROVER_RETURN_IF_ERROR(resolver->cluster_spec().status());
  return resolver;
}

Result<ClusterSpec> TorchEnvClusterResolver::cluster_spec() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  ClusterSpec::TaskMap tasks;
  tasks[0] = HostPort(vars.master_addr, vars.master_port);
  if (vars.rank != 0) {
    long long port = static_cast<long long>(options_.port_base) + vars.local_rank;
    DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort("port_base + LOCAL_RANK", port));
    tasks[vars.rank] = HostPort(env_->HostName(), static_cast<int>(port));
  }
  ClusterSpec spec;
  DROVER_RETURN_IF_ERROR(spec.AddSparseJob(options_.job_name, std::move(tasks)));
  return spec;
}

Result<std::string> TorchEnvClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  return resolver_internal::MasterFor(*this, task_type, task_id, rpc_layer);
}

std::optional<std::string> TorchEnvClusterResolver::task_type() const {
  if (task_type_) return task_type_;
  if (!rank().ok()) return std::nullopt;
  return options_.job_name;
}

std::optional<int> TorchEnvClusterResolver::task_id() const {
  if (task_id_) return task_id_;
  Result<int> own = rank();
  if (!own.ok()) return std::nullopt;
  return *own;
}

Result<AcceleratorMap> TorchEnvClusterResolver::num_accelerators(
    const std::optional<std::string>& /*task_type*/, std::optional<int> /*task_id*/) const {
  return LocalAccelerators(*env_);
}

Result<int> TorchEnvClusterResolver::rank() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  return vars.rank;
}

Result<int> TorchEnvClusterResolver::world_size() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  return vars.world_size;
}

Result<int> TorchEnvClusterResolver::local_rank() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  return vars.local_rank;
}

Result<int> TorchEnvClusterResolver::local_world_size() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  return vars.local_world_size;
}

Result<std::optional<int>> TorchEnvClusterResolver::group_rank() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  return vars.group_rank;
}

Result<std::string> TorchEnvClusterResolver::master_address() const {
  DROVER_ASSIGN_OR_RETURN(TorchVars vars, ReadTorchVars(*env_));
  return HostPort(vars.master_addr, vars.master_port);
}

}  // namespace drover

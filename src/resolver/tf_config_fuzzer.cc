// Fuzzes ParseTfConfig and TFConfigClusterResolver on the same text. Errors
// must be kInvalidArgument or kWrongType and name TF_CONFIG; a parsed config
// must agree with what the resolver reports, and its cluster must survive the
// JSON round trip. Aborts on any violation.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "drover/environment.h"
#include "drover/tf_config_cluster_resolver.h"

namespace {

void Check(bool condition, const char* what, std::string_view input) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\ninput: %.*s\n", what, static_cast<int>(input.size()),
               input.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto parsed = drover::ParseTfConfig(input);

  drover::MapEnvironment env;
  env.Set("TF_CONFIG", input);
  drover::TFConfigClusterResolver resolver({}, env);
  auto read = resolver.tf_config();

  if (!parsed.ok()) {
    drover::Status::Code code = parsed.status().code();
    Check(
        code == drover::Status::Code::kInvalidArgument || code == drover::Status::Code::kWrongType,
        "unexpected error code", input);
    Check(parsed.status().message().rfind("TF_CONFIG", 0) == 0, "error does not name TF_CONFIG",
          input);
    // The resolver only differs for blank text, which it reads as {}.
    Check(!read.ok() || read->cluster.empty(), "resolver accepted what the parser refused", input);
    Check(!resolver.cluster_spec().ok() || read.ok(), "cluster_spec hid a parse error", input);
    return 0;
  }
  const drover::TfConfig& config = *parsed;
  Check(read.ok(), "resolver refused what the parser accepted", input);
  auto cluster = resolver.cluster_spec();
  Check(cluster.ok() && *cluster == config.cluster, "resolver cluster differs", input);
  Check(resolver.task_type() == config.task_type, "task_type differs", input);
  Check(resolver.task_id() == config.task_id, "task_id differs", input);
  Check(resolver.rpc_layer() == config.rpc_layer, "rpc_layer differs", input);

  auto master = resolver.master();
  if (master.ok()) {
    if (config.session_master.has_value()) {
      Check(*master == *config.session_master, "session_master not verbatim", input);
    }
  } else {
    drover::Status::Code code = master.status().code();
    Check(code == drover::Status::Code::kInvalidArgument || code == drover::Status::Code::kNotFound,
          "unexpected master() error code", input);
  }

  auto again = drover::ClusterSpec::FromJson(config.cluster.ToJson());
  Check(again.ok() && *again == config.cluster, "cluster JSON round trip", input);
  return 0;
}

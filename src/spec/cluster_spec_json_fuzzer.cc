// Fuzzes ClusterSpec::FromJson. Errors must be kInvalidArgument or
// kWrongType; whatever parses must survive the JSON and ClusterDef round
// trips unchanged (job order included for JSON). Aborts on any violation.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "drover/cluster_spec.h"

namespace {

void Check(bool condition, const char* what, const drover::ClusterSpec& spec) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\nspec: %s\n", what, spec.DebugString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto parsed = drover::ClusterSpec::FromJson(input);
  if (!parsed.ok()) {
    drover::Status::Code code = parsed.status().code();
    if (code != drover::Status::Code::kInvalidArgument &&
        code != drover::Status::Code::kWrongType) {
      std::abort();
    }
    return 0;
  }
  const drover::ClusterSpec& spec = *parsed;

  const std::string json = spec.ToJson();
  auto again = drover::ClusterSpec::FromJson(json);
  Check(again.ok(), "ToJson output does not parse", spec);
  Check(*again == spec, "JSON round trip changed the spec", spec);
  Check(again->jobs() == spec.jobs(), "JSON round trip changed the job order", spec);
  Check(again->ToJson() == json, "ToJson is not stable", spec);
  auto indented = drover::ClusterSpec::FromJson(spec.ToJson(2));
  Check(indented.ok() && *indented == spec, "indented JSON differs", spec);

  const std::string bytes = spec.AsClusterDef();
  auto from_def = drover::ClusterSpec::FromClusterDef(bytes);
  Check(from_def.ok(), "AsClusterDef output does not parse", spec);
  Check(*from_def == spec, "ClusterDef round trip changed the spec", spec);
  Check(from_def->AsClusterDef() == bytes, "ClusterDef bytes are not deterministic", spec);
  (void)spec.DebugString();
  return 0;
}

// Fuzzes ClusterSpec::FromClusterDef. Whatever parses must survive the round
// trips: ClusterDef bytes are deterministic and decode to the same spec, and
// the JSON form gives the same spec back. Aborts on any violation.

#include <google/protobuf/stubs/logging.h>

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
  // Invalid UTF-8 is an expected rejection; keep protobuf from logging it.
  static const bool kSilenced = (google::protobuf::SetLogHandler(nullptr), true);
  (void)kSilenced;

  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto parsed = drover::ClusterSpec::FromClusterDef(input);
  if (!parsed.ok()) {
    if (parsed.status().code() != drover::Status::Code::kInvalidArgument) std::abort();
    return 0;
  }
  const drover::ClusterSpec& spec = *parsed;

  int total = 0;
  for (const std::string& job : spec.jobs()) {
    auto indices = spec.task_indices(job);
    Check(indices.ok(), "a listed job is missing", spec);
    for (size_t i = 1; i < indices->size(); ++i) {
      Check((*indices)[i - 1] < (*indices)[i], "indices not ascending", spec);
    }
    const bool dense =
        !indices->empty() && indices->back() + 1 == static_cast<int>(indices->size());
    Check(spec.is_dense(job) == dense, "is_dense disagrees with the indices", spec);
    total += static_cast<int>(indices->size());
  }
  Check(spec.total_tasks() == total, "total_tasks is not the sum", spec);
  Check(spec.DebugString().rfind("ClusterSpec({", 0) == 0, "DebugString shape", spec);

  const std::string bytes = spec.AsClusterDef();
  auto again = drover::ClusterSpec::FromClusterDef(bytes);
  Check(again.ok(), "AsClusterDef output does not parse", spec);
  Check(*again == spec, "ClusterDef round trip changed the spec", spec);
  Check(again->AsClusterDef() == bytes, "ClusterDef bytes are not deterministic", spec);

  const std::string json = spec.ToJson();
  auto from_json = drover::ClusterSpec::FromJson(json);
  Check(from_json.ok(), "ToJson output does not parse", spec);
  Check(*from_json == spec, "JSON round trip changed the spec", spec);
  Check(from_json->jobs() == spec.jobs(), "JSON round trip changed the job order", spec);
  return 0;
}

// libFuzzer target: LoadResourceSpec must accept or reject any file without
// crashing. The input is written to a file so the loader, not only the
// parser, is exercised; a parsed spec must satisfy the invariants the
// resolver relies on.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "drover/resource_spec_cluster_resolver.h"

namespace {

std::string ScratchPath() {
  static const std::string path = "/tmp/drover_resource_spec_fuzz_" + std::to_string(getpid());
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  drover::Result<drover::ResourceSpec> spec = drover::LoadResourceSpec(path);
  if (!spec.ok()) return 0;
  // Invariants of a valid spec: nodes, exactly one chief, known ssh configs.
  if (spec->nodes.empty() || spec->FindNode(spec->chief) == nullptr) __builtin_trap();
  int chiefs = 0;
  for (const drover::ResourceNode& node : spec->nodes) {
    chiefs += node.chief ? 1 : 0;
    if (!node.chief && !spec->ssh_configs.count(node.ssh_config)) __builtin_trap();
  }
  if (chiefs != 1) __builtin_trap();
  return 0;
}

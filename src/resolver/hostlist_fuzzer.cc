// libFuzzer target: ExpandHostlist and ExpandTasksPerNode must return a value
// or an error for any input, never crash, hang or exhaust memory.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "drover/hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  drover::Result<std::vector<std::string>> hosts = drover::ExpandHostlist(input);
  if (hosts.ok() && hosts->size() > drover::kMaxHostlistEntries) __builtin_trap();
  drover::Result<std::vector<int>> counts = drover::ExpandTasksPerNode(input);
  if (counts.ok() && counts->size() > drover::kMaxHostlistEntries) __builtin_trap();
  return 0;
}

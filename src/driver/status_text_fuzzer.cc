// Fuzzes the terminal views of a run (RenderStatus, RenderSummary): they read
// JSON from another driver's status server or a run.json on disk, so any JSON
// must render without throwing, crashing or undefined behaviour.

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "driver/status_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  nlohmann::json cluster = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  try {
    (void)drover::RenderStatus(cluster);
    (void)drover::RenderSummary(cluster);
  } catch (...) {
    std::abort();
  }
  return 0;
}

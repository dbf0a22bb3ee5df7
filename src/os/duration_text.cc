#include "os/duration_text.h"

#include <cstdint>
#include <cstdio>

namespace drover::os {

std::string SecondsValue(std::chrono::milliseconds duration) {
  const int64_t ms = duration.count();
  // Negated as unsigned, so even the most negative count has a magnitude.
  const uint64_t magnitude = ms < 0 ? 0 - static_cast<uint64_t>(ms) : static_cast<uint64_t>(ms);
  std::string text = (ms < 0 ? "-" : "") + std::to_string(magnitude / 1000);
  if (const unsigned fraction = static_cast<unsigned>(magnitude % 1000); fraction != 0) {
    char digits[8];
    std::snprintf(digits, sizeof(digits), ".%03u", fraction);
    std::string decimals = digits;
    while (decimals.back() == '0') decimals.pop_back();
    text += decimals;
  }
  return text;
}

std::string SecondsText(std::chrono::milliseconds duration) {
  return SecondsValue(duration) + " s";
}

}  // namespace drover::os

#include "rendezvous/log_text.h"

#include <cstdint>
#include <cstdio>

#include "wire/frame.h"

namespace drover::rendezvous_internal {

std::string FormatSeconds(Milliseconds ms) {
  double seconds = ms.count() / 1000.0;
  char buffer[32];
  if (seconds == static_cast<double>(static_cast<int64_t>(seconds))) {
    std::snprintf(buffer, sizeof(buffer), "%lld s", static_cast<long long>(seconds));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3g s", seconds);
  }
  return buffer;
}

std::string Printable(std::string_view bytes) {
  return wire::PrintableBytes(bytes, 64);
}

std::string JoinLimited(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListedItems; ++i) {
    if (i > 0) out += ", ";
    out += items[i];
  }
  if (items.size() > kMaxListedItems) {
    out += " and " + std::to_string(items.size() - kMaxListedItems) + " more";
  }
  return out;
}

}  // namespace drover::rendezvous_internal

#include "rendezvous/log_text.h"

#include "wire/frame.h"

namespace drover::rendezvous_internal {

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

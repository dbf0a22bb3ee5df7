// libFuzzer target: ParseHostfile and ParseHostList must accept or reject any
// bytes without crashing, and what they accept must satisfy the invariants
// the ssh engine relies on: at least one host, each with an address ssh can
// take as one argument, at least one slot, and no address twice.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ssh/ssh_hosts.h"

namespace {

void Check(const drover::Result<std::vector<drover::ssh::SshHost>>& hosts) {
  if (!hosts.ok()) {
    if (hosts.status().code() != drover::Status::Code::kInvalidArgument) __builtin_trap();
    return;
  }
  if (hosts->empty()) __builtin_trap();
  std::set<std::string> addresses;
  long long total = 0;
  for (const drover::ssh::SshHost& host : *hosts) {
    if (host.slots < 1 || host.address.empty() || host.address.front() == '-') __builtin_trap();
    for (char c : host.address) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == ',' || c == '#') __builtin_trap();
    }
    if (!addresses.insert(host.address).second) __builtin_trap();
    total += host.slots;
  }
  if (total > 2147483647LL ? drover::ssh::TotalSlots(*hosts) != 2147483647
                           : drover::ssh::TotalSlots(*hosts) != total) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Check(drover::ssh::ParseHostfile(text, "fuzz"));
  Check(drover::ssh::ParseHostList(text));
  return 0;
}

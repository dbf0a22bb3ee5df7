// How the rendezvous server writes values into its log lines and error
// messages: peer bytes and long lists (durations: os::SecondsText). Pure
// functions; thread-safe.

#ifndef DROVER_SRC_RENDEZVOUS_LOG_TEXT_H_
#define DROVER_SRC_RENDEZVOUS_LOG_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "drover/rendezvous.h"

namespace drover::rendezvous_internal {

// Long lists in error messages (4,000 executors) are cut to this many items.
inline constexpr size_t kMaxListedItems = 32;

// Key bytes are arbitrary: what does not print is escaped, and long ones cut
// at 64 bytes.
std::string Printable(std::string_view bytes);

// "a, b, c", or the first kMaxListedItems and " and N more".
std::string JoinLimited(const std::vector<std::string>& items);

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_LOG_TEXT_H_

// "host:port" network addresses, as cluster specs and the rendezvous write
// them: names, IPv4, and IPv6 literals in brackets ("[fe80::1]:2222").
// Pure functions; thread-safe.

#ifndef DROVER_HOST_PORT_H_
#define DROVER_HOST_PORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "drover/status.h"

namespace drover {

// Splits "host:port" (also "[v6::addr]:port"). kInvalidArgument naming the
// address when the host is empty or the port is missing or not in 1..65535.
Result<std::pair<std::string, int>> SplitHostPort(std::string_view address);

// "host:port", bracketing an IPv6 literal that is not bracketed already.
std::string JoinHostPort(std::string_view host, uint32_t port);

}  // namespace drover

#endif  // DROVER_HOST_PORT_H_

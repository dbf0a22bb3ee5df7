#include "drover/host_port.h"

#include <charconv>

namespace drover {

Result<std::pair<std::string, int>> SplitHostPort(std::string_view address) {
  std::string_view host;
  std::string_view port_text;
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return Status::InvalidArgument("address '" + std::string(address) +
                                     "' is not of the form [host]:port");
    }
    host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument("address '" + std::string(address) +
                                     "' has no port (expected host:port)");
    }
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  int port = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      port < 1 || port > 65535) {
    return Status::InvalidArgument("address '" + std::string(address) +
                                   "' needs a host and a port in 1..65535");
  }
  return std::make_pair(std::string(host), port);
}

std::string JoinHostPort(std::string_view host, uint32_t port) {
  bool bare_ipv6 = host.find(':') != std::string_view::npos && !host.starts_with('[');
  std::string joined = bare_ipv6 ? "[" + std::string(host) + "]" : std::string(host);
  return joined + ":" + std::to_string(port);
}

}  // namespace drover

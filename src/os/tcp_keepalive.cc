#include "os/tcp_keepalive.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>

namespace drover::os {

bool SetTcpKeepalive(int fd, std::chrono::milliseconds interval, int probes) {
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(interval).count();
  const int probe_seconds = static_cast<int>(std::clamp<long long>(seconds, 1, 32'767));
  const int count = std::clamp(probes, 1, 127);
  const int on = 1;
  // Without it, data in flight to a dead host is retransmitted for about
  // 15 minutes, and no keepalive probe goes out meanwhile.
  const unsigned user_timeout_ms =
      static_cast<unsigned>(probe_seconds) * 1000u * static_cast<unsigned>(count + 1);
  return ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_seconds, sizeof(probe_seconds)) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_seconds, sizeof(probe_seconds)) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
                      sizeof(user_timeout_ms)) == 0;
}

}  // namespace drover::os

// Liveness from the kernel: TCP keepalive probes on an idle connection and
// a cap on how long sent data may stay unacknowledged, so a peer whose host
// died or was cut off ends the connection (ETIMEDOUT) without either side's
// program waking up to send anything. A peer that is alive answers the
// probes from its kernel, whether its program is busy, idle or stopped.

#ifndef DROVER_OS_TCP_KEEPALIVE_H_
#define DROVER_OS_TCP_KEEPALIVE_H_

#include <chrono>

namespace drover::os {

// On TCP socket `fd`: the first probe after `interval` without traffic,
// then one each `interval` (whole seconds, at least 1), and the connection
// ends once `probes` have gone unanswered, or once data sent has waited
// that long (interval x (probes + 1)) for its acknowledgement. False, with
// errno, when the socket refused an option.
bool SetTcpKeepalive(int fd, std::chrono::milliseconds interval, int probes);

}  // namespace drover::os

#endif  // DROVER_OS_TCP_KEEPALIVE_H_

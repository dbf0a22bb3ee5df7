// PortReservation: TCP ports a node holds while its cluster forms, so nothing
// else on the host can take them (docs/run.md, step 1). Each port is a socket
// bound to 0.0.0.0:0, close-on-exec, not listening and without SO_REUSEADDR
// (so no other socket can share it, with or without that option); the
// program can bind the same port right after Release().
//
// Move-only; owns its sockets and closes them on Release() or destruction.
// Not thread-safe.

#ifndef DROVER_AGENT_PORT_RESERVATION_H_
#define DROVER_AGENT_PORT_RESERVATION_H_

#include <vector>

#include "drover/status.h"
#include "os/unique_fd.h"

namespace drover {

class PortReservation {
 public:
  // Binds `count` sockets to ephemeral ports. kInvalidArgument for count < 1,
  // kIoError naming the call that failed.
  static Result<PortReservation> Reserve(int count);

  PortReservation() = default;
  PortReservation(PortReservation&& other) noexcept = default;
  PortReservation& operator=(PortReservation&& other) noexcept = default;

  // The reserved ports, in reservation order; still valid after Release().
  const std::vector<int>& ports() const { return ports_; }
  bool held() const { return !fds_.empty(); }
  // Closes the sockets; the ports are free for the program to bind.
  void Release();

 private:
  std::vector<int> ports_;
  std::vector<os::UniqueFd> fds_;
};

}  // namespace drover

#endif  // DROVER_AGENT_PORT_RESERVATION_H_

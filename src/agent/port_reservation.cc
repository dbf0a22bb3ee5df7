#include "agent/port_reservation.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace drover {
namespace {

Status Errno(const std::string& what) {
  return Status::IoError("cannot reserve a port: " + what + ": " + std::strerror(errno));
}

}  // namespace

Result<PortReservation> PortReservation::Reserve(int count) {
  if (count < 1) {
    return Status::InvalidArgument("a node reserves at least 1 port; asked for " +
                                   std::to_string(count));
  }
  PortReservation reservation;
  for (int i = 0; i < count; ++i) {
    os::UniqueFd socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!socket.valid()) return Errno("socket");
    const int fd = socket.get();
    reservation.fds_.push_back(std::move(socket));
    // No SO_REUSEADDR: on Linux two non-listening sockets that both set it
    // may share a port, so a program binding with SO_REUSEADDR (most servers)
    // could take a held port. An unconnected socket leaves no TIME_WAIT, so
    // the program can bind the port at once after Release().
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Errno("bind(0.0.0.0:0)");
    }
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return Errno("getsockname");
    }
    reservation.ports_.push_back(ntohs(addr.sin_port));
  }
  return reservation;
}

void PortReservation::Release() {
  fds_.clear();
}

}  // namespace drover

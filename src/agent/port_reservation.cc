#include "agent/port_reservation.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket");
    reservation.fds_.push_back(fd);
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

PortReservation::PortReservation(PortReservation&& other) noexcept
    : ports_(std::move(other.ports_)), fds_(std::exchange(other.fds_, {})) {}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
  if (this != &other) {
    Release();
    ports_ = std::move(other.ports_);
    fds_ = std::exchange(other.fds_, {});
  }
  return *this;
}

PortReservation::~PortReservation() {
  Release();
}

void PortReservation::Release() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

}  // namespace drover

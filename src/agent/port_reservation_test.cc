#include "agent/port_reservation.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include "testing/status_matchers.h"

namespace drover {
namespace {

// Binds a fresh socket to `port` (SO_REUSEADDR as most servers set it).
bool CanBind(int port, bool reuse_address) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (reuse_address) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool bound =
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return bound;
}

TEST(PortReservationTest, HoldsPortsUntilReleased) {
  ASSERT_OK_AND_ASSIGN(PortReservation reservation, PortReservation::Reserve(3));
  ASSERT_EQ(reservation.ports().size(), 3u);
  EXPECT_EQ(std::set<int>(reservation.ports().begin(), reservation.ports().end()).size(), 3u);
  for (int port : reservation.ports()) {
    EXPECT_GT(port, 0);
    EXPECT_FALSE(CanBind(port, false)) << port;
    EXPECT_FALSE(CanBind(port, true)) << port;
  }
  EXPECT_TRUE(reservation.held());
  reservation.Release();
  EXPECT_FALSE(reservation.held());
  ASSERT_EQ(reservation.ports().size(), 3u);
  for (int port : reservation.ports()) EXPECT_TRUE(CanBind(port, true)) << port;
}

TEST(PortReservationTest, MoveKeepsTheHold) {
  ASSERT_OK_AND_ASSIGN(PortReservation first, PortReservation::Reserve(1));
  int port = first.ports()[0];
  PortReservation second = std::move(first);
  EXPECT_FALSE(first.held());  // NOLINT: testing the moved-from state
  EXPECT_FALSE(CanBind(port, true));
  second = PortReservation();
  EXPECT_TRUE(CanBind(port, true));
}

TEST(PortReservationTest, RefusesZeroPorts) {
  EXPECT_EQ(PortReservation::Reserve(0).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover

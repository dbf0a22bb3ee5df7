#include "os/tcp_keepalive.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

#include "os/unique_fd.h"

namespace drover::os {
namespace {

int IntOption(int fd, int level, int name) {
  int value = -1;
  socklen_t size = sizeof(value);
  EXPECT_EQ(::getsockopt(fd, level, name, &value, &size), 0);
  return value;
}

TEST(SetTcpKeepaliveTest, ProbesEachIntervalAndCapsUnacknowledgedData) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(SetTcpKeepalive(fd.get(), std::chrono::milliseconds(1'500), 5));
  EXPECT_EQ(IntOption(fd.get(), SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_KEEPIDLE), 2);  // whole seconds, rounded up
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_KEEPINTVL), 2);
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_KEEPCNT), 5);
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_USER_TIMEOUT), 12'000);
}

TEST(SetTcpKeepaliveTest, ASubSecondIntervalProbesEverySecond) {
  UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) GTEST_SKIP() << "no IPv6 here";
  ASSERT_TRUE(SetTcpKeepalive(fd.get(), std::chrono::milliseconds(10), 3));
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_KEEPIDLE), 1);
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_KEEPCNT), 3);
}

TEST(SetTcpKeepaliveTest, ANonSocketIsRefused) {
  Result<Pipe> pipe = MakePipe(O_CLOEXEC);
  ASSERT_TRUE(pipe.ok());
  errno = 0;
  EXPECT_FALSE(SetTcpKeepalive(pipe->read.get(), std::chrono::milliseconds(1'000), 5));
  EXPECT_EQ(errno, ENOTSOCK);
}

}  // namespace
}  // namespace drover::os

#include "os/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

#include "testing/status_matchers.h"

namespace drover::os {
namespace {

bool IsOpen(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

TEST(UniqueFdTest, ClosesWhatItOwnsWhenItGoes) {
  int raw;
  {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    raw = fd.get();
    ASSERT_TRUE(fd.valid());
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, MovingHandsTheDescriptorOver) {
  UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_EQ(a.get(), -1);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  EXPECT_EQ(b.get(), raw);
  UniqueFd c(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int replaced = c.get();
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_FALSE(IsOpen(replaced));
  EXPECT_TRUE(IsOpen(raw));
}

TEST(UniqueFdTest, ReleaseGivesUpOwnershipAndResetCloses) {
  UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = fd.Release();
  EXPECT_FALSE(fd.valid());
  EXPECT_TRUE(IsOpen(raw));
  fd.Reset(raw);
  EXPECT_EQ(fd.get(), raw);
  fd.Reset();
  EXPECT_FALSE(IsOpen(raw));
  EXPECT_EQ(fd.get(), -1);
}

TEST(MakePipeTest, WhatIsWrittenCanBeRead) {
  ASSERT_OK_AND_ASSIGN(Pipe pipe, MakePipe());
  ASSERT_EQ(::write(pipe.write.get(), "x", 1), 1);
  char got = 0;
  ASSERT_EQ(::read(pipe.read.get(), &got, 1), 1);
  EXPECT_EQ(got, 'x');
  EXPECT_NE(::fcntl(pipe.read.get(), F_GETFD) & FD_CLOEXEC, 0);
}

}  // namespace
}  // namespace drover::os

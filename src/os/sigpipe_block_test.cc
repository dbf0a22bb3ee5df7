#include "os/sigpipe_block.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "os/unique_fd.h"
#include "testing/status_matchers.h"

namespace drover::os {
namespace {

bool SigpipeBlocked() {
  sigset_t mask;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

bool SigpipePending() {
  sigset_t pending;
  ::sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

// With SIGPIPE at its default action, a write to a pipe nobody reads would
// kill the test; inside the block it is EPIPE, and nothing is left pending.
TEST(SigpipeBlockTest, AWriteToAClosedPipeIsEpipeAndLeavesNothingPending) {
  // An ignored SIGPIPE (inherited from whoever started the test) would never
  // be pending: the default action is the case that matters.
  struct sigaction default_action {
  }, old_action{};
  default_action.sa_handler = SIG_DFL;
  ASSERT_EQ(::sigaction(SIGPIPE, &default_action, &old_action), 0);
  ASSERT_FALSE(SigpipeBlocked());
  ASSERT_OK_AND_ASSIGN(Pipe pipe, MakePipe());
  pipe.read.Reset();
  {
    SigpipeBlock block;
    EXPECT_TRUE(SigpipeBlocked());
    errno = 0;
    EXPECT_EQ(::write(pipe.write.get(), "x", 1), -1);
    EXPECT_EQ(errno, EPIPE);
    EXPECT_TRUE(SigpipePending());
  }
  EXPECT_FALSE(SigpipeBlocked());
  EXPECT_FALSE(SigpipePending());
  ::sigaction(SIGPIPE, &old_action, nullptr);
}

}  // namespace
}  // namespace drover::os

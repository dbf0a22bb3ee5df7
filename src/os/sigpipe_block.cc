#include "os/sigpipe_block.h"

#include <pthread.h>
#include <time.h>

namespace drover::os {

SigpipeBlock::SigpipeBlock() {
  sigemptyset(&pipe_set_);
  sigaddset(&pipe_set_, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_set_);
}

SigpipeBlock::~SigpipeBlock() {
  // A SIGPIPE left pending would be delivered, and kill us, as soon as the
  // old mask is back.
  struct timespec zero {};
  while (::sigtimedwait(&pipe_set_, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_set_, nullptr);
}

}  // namespace drover::os

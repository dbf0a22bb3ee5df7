// SigpipeBlock: while it lives, SIGPIPE is blocked on the calling thread, so
// a write to a pipe or socket whose reader is gone fails with EPIPE instead
// of killing the process; on destruction it drops any SIGPIPE that came
// meanwhile and restores the thread's mask. For code that feeds a child's
// stdin (the child may exit without reading it) in a process that keeps
// SIGPIPE's default action, such as the Python module's host.
//
// Scoped to one thread and one stack frame; neither copyable nor movable.

#ifndef DROVER_OS_SIGPIPE_BLOCK_H_
#define DROVER_OS_SIGPIPE_BLOCK_H_

#include <signal.h>

namespace drover::os {

class SigpipeBlock {
 public:
  SigpipeBlock();
  ~SigpipeBlock();
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_set_;
  sigset_t old_set_;
};

}  // namespace drover::os

#endif  // DROVER_OS_SIGPIPE_BLOCK_H_

// Reading and writing what a non-blocking descriptor takes now, for loops
// that poll several pipes at once (a child's stdin, stdout and stderr) and
// must never block on one of them; an eventfd as a wake-up; poll()'s timeout
// for a deadline. Functions only; the caller owns the fds.

#ifndef DROVER_OS_FD_IO_H_
#define DROVER_OS_FD_IO_H_

#include <chrono>
#include <cstddef>
#include <string>

#include "os/unique_fd.h"

namespace drover::os {

// Appends to `out` what `fd` has to give now. False at end of file or on an
// error (the caller closes it); true while more may come.
bool ReadAvailable(int fd, std::string* out);

// Writes what the descriptor takes now of `data`, from `*done` on, and
// advances `*done`. False when the reader is gone (EPIPE: block SIGPIPE
// around it, see sigpipe_block.h) or on another error.
bool WriteAvailable(int fd, const std::string& data, size_t* done);

// Sets O_NONBLOCK on `fd`'s open file description, which every duplicate
// of it shares.
void SetNonBlocking(int fd);

// A close-on-exec, non-blocking eventfd; kIoError when none could be made.
Result<UniqueFd> MakeEventFd();
// Adds one to an eventfd (wakes whoever polls it); never fails loudly.
void SignalEventFd(int fd);
// Reads an eventfd (not a semaphore) back to zero, in one read.
void DrainEventFd(int fd);

// Milliseconds until `deadline` for poll(), rounded up, 0 once it has
// passed; capped at 60 s so a far deadline still fits an int (the caller
// polls again while time is left).
int PollTimeoutMs(std::chrono::steady_clock::time_point deadline);

}  // namespace drover::os

#endif  // DROVER_OS_FD_IO_H_

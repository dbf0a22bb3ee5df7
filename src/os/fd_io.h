// Reading and writing what a non-blocking descriptor takes now, for loops
// that poll several pipes at once (a child's stdin, stdout and stderr) and
// must never block on one of them. Functions only; the caller owns the fds.

#ifndef DROVER_OS_FD_IO_H_
#define DROVER_OS_FD_IO_H_

#include <cstddef>
#include <string>

namespace drover::os {

// Appends to `out` what `fd` has to give now. False at end of file or on an
// error (the caller closes it); true while more may come.
bool ReadAvailable(int fd, std::string* out);

// Writes what the descriptor takes now of `data`, from `*done` on, and
// advances `*done`. False when the reader is gone (EPIPE: block SIGPIPE
// around it, see sigpipe_block.h) or on another error.
bool WriteAvailable(int fd, const std::string& data, size_t* done);

}  // namespace drover::os

#endif  // DROVER_OS_FD_IO_H_

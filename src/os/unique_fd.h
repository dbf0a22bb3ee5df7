// UniqueFd: the one owner of a file descriptor (a file, pipe end, socket,
// pidfd), closed when the owner goes. Move-only, like unique_ptr: moving
// hands the descriptor over and leaves -1 behind. Not thread-safe; borrowers
// take get() and must not close it.
//
// MakePipe opens both ends of a pipe as two UniqueFds, so an error path that
// returns early closes whatever was already opened.

#ifndef DROVER_OS_UNIQUE_FD_H_
#define DROVER_OS_UNIQUE_FD_H_

#include <fcntl.h>

#include <utility>

#include "drover/status.h"

namespace drover::os {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }  // -1 when it holds none
  bool valid() const { return fd_ >= 0; }
  // Closes the descriptor held, if any, and takes `fd` instead.
  void Reset(int fd = -1);
  // Gives the descriptor up without closing it; the caller owns it now.
  [[nodiscard]] int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// pipe2(2) with `flags` (O_CLOEXEC, O_NONBLOCK); kIoError with the OS's reason.
Result<Pipe> MakePipe(int flags = O_CLOEXEC);

}  // namespace drover::os

#endif  // DROVER_OS_UNIQUE_FD_H_

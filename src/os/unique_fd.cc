#include "os/unique_fd.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace drover::os {

void UniqueFd::Reset(int fd) {
  // close(2) is not retried on EINTR: Linux has released the descriptor by
  // then, and a retry could close one another thread just opened.
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

Result<Pipe> MakePipe(int flags) {
  int fds[2];
  if (::pipe2(fds, flags) != 0)
    return Status::IoError(std::string("pipe2: ") + std::strerror(errno));
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace drover::os

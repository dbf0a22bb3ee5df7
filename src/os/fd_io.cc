#include "os/fd_io.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace drover::os {

bool ReadAvailable(int fd, std::string* out) {
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got > 0) {
      out->append(buffer, static_cast<size_t>(got));
      // A short read took all there was; the next poll says when more comes.
      if (got < static_cast<ssize_t>(sizeof(buffer))) return true;
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

bool WriteAvailable(int fd, const std::string& data, size_t* done) {
  while (*done < data.size()) {
    const ssize_t wrote = ::write(fd, data.data() + *done, data.size() - *done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    *done += static_cast<size_t>(wrote);
  }
  return true;
}

void SetNonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

Result<UniqueFd> MakeEventFd() {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd.valid()) return Status::IoError(std::string("eventfd: ") + std::strerror(errno));
  return fd;
}

void SignalEventFd(int fd) {
  uint64_t one = 1;
  ssize_t ignored = ::write(fd, &one, sizeof(one));
  (void)ignored;
}

void DrainEventFd(int fd) {
  uint64_t count;
  ssize_t ignored = ::read(fd, &count, sizeof(count));
  (void)ignored;
}

int PollTimeoutMs(std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (deadline <= now) return 0;
  int64_t ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<int64_t>(ms, 60'000));
}

}  // namespace drover::os

#include "os/fd_io.h"

#include <unistd.h>

#include <cerrno>

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

}  // namespace drover::os

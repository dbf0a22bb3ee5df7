#include "os/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "os/unique_fd.h"

namespace drover::os {

Result<std::string> ReadFileCapped(const std::string& path, size_t max_bytes,
                                   std::string_view what) {
  const std::string named = std::string(what) + " '" + path + "'";
  int opened;
  do {
    opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (opened < 0 && errno == EINTR);
  if (opened < 0) return Status::IoError("cannot open " + named + ": " + std::strerror(errno));
  const UniqueFd fd(opened);
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::IoError("cannot read " + named + ": " + std::strerror(errno));
    if (got == 0) return text;
    text.append(buffer, static_cast<size_t>(got));
    if (text.size() > max_bytes) {
      return Status::InvalidArgument(named + " is larger than " + std::to_string(max_bytes) +
                                     " bytes");
    }
  }
}

}  // namespace drover::os

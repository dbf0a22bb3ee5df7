// ReadFileCapped: the whole of a small file a user hands drover (a hosts
// file, a resource spec), read with a size cap so that a wrong path (a disk
// image, /dev/zero) fails at once instead of filling memory. Thread-safe.

#ifndef DROVER_OS_READ_FILE_H_
#define DROVER_OS_READ_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::os {

// The bytes of the file at `path`. `what` names it in messages ("hosts
// file", "resource spec"):
//   kIoError          "cannot open <what> '<path>': <reason>"
//                     "cannot read <what> '<path>': <reason>"
//   kInvalidArgument  "<what> '<path>' is larger than <max_bytes> bytes"
// Reading stops at max_bytes + 1, however large the file is.
Result<std::string> ReadFileCapped(const std::string& path, size_t max_bytes,
                                   std::string_view what);

}  // namespace drover::os

#endif  // DROVER_OS_READ_FILE_H_

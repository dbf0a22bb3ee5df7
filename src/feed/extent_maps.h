// ExtentMaps: the program's side of a feed that carries file extents
// (kFileExtent batches, `--feed-ingest extent`): the records are not copied
// into the queue but read in place from a read-only mapping of the input
// file, which the program's process makes itself (docs/feed.md,
// "Performance"). One mapping per file, of the whole file, kept while views
// into it may be in use.

#ifndef DROVER_FEED_EXTENT_MAPS_H_
#define DROVER_FEED_EXTENT_MAPS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "drover/status.h"
#include "feed/shm_channel.h"
#include "os/unique_fd.h"

namespace drover::feed {

class ExtentMaps {
 public:
  ExtentMaps() = default;
  ExtentMaps(const ExtentMaps&) = delete;
  ExtentMaps& operator=(const ExtentMaps&) = delete;
  ~ExtentMaps();

  // The first of `batch`'s records (a kFileExtent batch with records) in a
  // mapping of its file, valid until KeepOnlyLast drops that mapping. The
  // file's size is checked and the pages populated (MADV_POPULATE_READ)
  // each time, so that a file cut short shows here as kInvalidArgument, not
  // as SIGBUS or zeros later. kInvalidArgument when the path is no longer
  // the file the feeder read (same device and inode); kIoError when it
  // cannot be opened or mapped.
  Result<const char*> Records(const BatchView& batch);

  // Unmaps every file but the one Records used last: call when the views
  // handed out before are given up.
  void KeepOnlyLast();

  size_t mapped_files() const { return maps_.size(); }

 private:
  struct Mapping {
    uint64_t device = 0;
    uint64_t inode = 0;
    os::UniqueFd fd;  // to see the file's size now
    const char* base = nullptr;
    size_t size = 0;
  };
  Result<Mapping> Map(const FileExtent& extent, uint64_t end) const;
  static void Unmap(const Mapping& mapping);

  std::vector<Mapping> maps_;  // the one used last at the back
};

}  // namespace drover::feed

#endif  // DROVER_FEED_EXTENT_MAPS_H_

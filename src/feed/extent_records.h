// ExtentRecords: the program's side of a feed that carries file extents
// (kFileExtent batches, `--feed-ingest extent|extent-read`): the records are
// not copied into the queue but taken by the program's process from the
// input file itself, in place from a read-only mapping of it, or (with
// kReadExtent) read with pread(2) into memory of its own that it reuses
// (docs/feed.md, "Performance"). One mapping per file, of the whole file,
// kept while views into it may be in use.

#ifndef DROVER_FEED_EXTENT_RECORDS_H_
#define DROVER_FEED_EXTENT_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/status.h"
#include "feed/shm_channel.h"
#include "os/unique_fd.h"

namespace drover::feed {

class ExtentRecords {
 public:
  ExtentRecords() = default;
  ExtentRecords(const ExtentRecords&) = delete;
  ExtentRecords& operator=(const ExtentRecords&) = delete;
  ~ExtentRecords();

  // The first of `batch`'s records (a kFileExtent batch with records),
  // valid until KeepOnlyLast drops the mapping or buffer they are in. A
  // file cut short shows here as kInvalidArgument, not as SIGBUS or zeros
  // later: a mapped file's size is checked and the pages populated
  // (MADV_POPULATE_READ) each time, a read stops short. kInvalidArgument
  // when the path is no longer the file the feeder read (same device and
  // inode); kIoError when it cannot be opened or read. A file its file
  // system will not map is read, as with kReadExtent.
  Result<const char*> Records(const BatchView& batch);

  // Unmaps every file but the one used last, and keeps only the buffer read
  // into last: call when the views handed out before are given up. The
  // buffers kept for reuse are as many as the most one call used over the
  // last kTrimEvery calls: one large batch does not hold its memory for the
  // rest of the run.
  void KeepOnlyLast();

  size_t mapped_files() const { return maps_.size(); }
  // Read buffers held, in use or kept for reuse.
  size_t read_buffers() const { return buffers_.size(); }

  static constexpr int kTrimEvery = 64;

 private:
  struct Mapping {
    uint64_t device = 0;
    uint64_t inode = 0;
    os::UniqueFd fd;  // to see the file's size now
    const char* base = nullptr;
    size_t size = 0;
  };
  struct Buffer {
    std::unique_ptr<char[]> data;
    size_t capacity = 0;
  };
  Result<const char*> Mapped(const FileExtent& extent, uint64_t end);
  Result<const char*> Read(const FileExtent& extent, uint64_t end);
  // nullopt when the file's file system will not map it.
  Result<std::optional<Mapping>> Map(const FileExtent& extent, uint64_t end) const;
  static void Unmap(const Mapping& mapping);

  std::vector<Mapping> maps_;  // the one used last at the back
  // (device, inode) of files that could not be mapped: read instead.
  std::vector<std::pair<uint64_t, uint64_t>> unmappable_;
  // kReadExtent: the file read last, open, and the buffers read into since
  // KeepOnlyLast (the first buffers_used_), reused after it.
  uint64_t read_device_ = 0;
  uint64_t read_inode_ = 0;
  os::UniqueFd read_fd_;
  std::vector<Buffer> buffers_;
  size_t buffers_used_ = 0;
  size_t peak_used_ = 0;  // the most buffers one call used since the last trim
  int calls_since_trim_ = 0;
};

}  // namespace drover::feed

#endif  // DROVER_FEED_EXTENT_RECORDS_H_

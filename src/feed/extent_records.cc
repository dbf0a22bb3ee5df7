#include "feed/extent_records.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "os/unique_fd.h"

namespace drover::feed {
namespace {

Status FileError(int error, const std::string& what) {
  return Status::IoError(what + ": " + std::strerror(error));
}

// Prefaults [offset, end) of the mapping; a page past the file's end is
// EFAULT here instead of SIGBUS at the program's first touch. A kernel
// before 5.14 knows no MADV_POPULATE_READ (EINVAL): the pages then fault in
// as the program reads them.
Status Populate(const char* base, uint64_t offset, uint64_t end, const std::string& path) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = offset / page * page;
  if (::madvise(const_cast<char*>(base) + first, end - first, MADV_POPULATE_READ) == 0 ||
      errno == EINVAL || errno == EINTR) {
    return Status::Ok();
  }
  if (errno == EFAULT) {
    return Status::InvalidArgument("cannot read " + path + " up to offset " + std::to_string(end) +
                                   ": it was cut short during the run");
  }
  return FileError(errno, "cannot read " + path);
}

Status CheckSize(const std::string& path, uint64_t size, uint64_t end) {
  if (size >= end) return Status::Ok();
  return Status::InvalidArgument(path + " ends at offset " + std::to_string(size) + ", before " +
                                 std::to_string(end) +
                                 ", where the records fed from it end (was it cut short during "
                                 "the run?)");
}

// Opens the file the feeder read `extent` from, checked to be still that
// file; *info is its state now.
Result<os::UniqueFd> OpenFedFile(const FileExtent& extent, struct stat* info) {
  const std::string path(extent.path);
  // O_NONBLOCK: a path that names a FIFO now (the feeder read a regular
  // file) must not block the open.
  os::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return FileError(errno, "cannot open " + path + ", which the feeder read");
  if (::fstat(fd.get(), info) != 0) return FileError(errno, "cannot stat " + path);
  if (!S_ISREG(info->st_mode) || static_cast<uint64_t>(info->st_dev) != extent.device ||
      static_cast<uint64_t>(info->st_ino) != extent.inode) {
    return Status::InvalidArgument(path +
                                   " is no longer the file the feeder read from (it was replaced "
                                   "during the run)");
  }
  return fd;
}

}  // namespace

ExtentRecords::~ExtentRecords() {
  for (const Mapping& mapping : maps_) Unmap(mapping);
}

void ExtentRecords::Unmap(const Mapping& mapping) {
  ::munmap(const_cast<char*>(mapping.base), mapping.size);
}

Result<const char*> ExtentRecords::Records(const BatchView& batch) {
  const FileExtent& extent = batch.extent;
  const uint64_t end = extent.offset + uint64_t{batch.info.record_count} * batch.info.record_bytes;
  const bool unmappable = std::find(unmappable_.begin(), unmappable_.end(),
                                    std::pair{extent.device, extent.inode}) != unmappable_.end();
  return (batch.info.flags & kReadExtent) || unmappable ? Read(extent, end) : Mapped(extent, end);
}

Result<const char*> ExtentRecords::Read(const FileExtent& extent, uint64_t end) {
  const std::string path(extent.path);
  if (!read_fd_.valid() || read_device_ != extent.device || read_inode_ != extent.inode) {
    struct stat info {};
    DROVER_ASSIGN_OR_RETURN(read_fd_, OpenFedFile(extent, &info));
    read_device_ = extent.device;
    read_inode_ = extent.inode;
  }
  const size_t length = static_cast<size_t>(end - extent.offset);
  if (buffers_used_ == buffers_.size()) buffers_.emplace_back();
  Buffer& buffer = buffers_[buffers_used_];
  if (buffer.capacity < length) {
    buffer.data = std::make_unique_for_overwrite<char[]>(length);
    buffer.capacity = length;
  }
  for (size_t done = 0; done < length;) {
    const ssize_t n = ::pread(read_fd_.get(), buffer.data.get() + done, length - done,
                              static_cast<off_t>(extent.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileError(errno, "cannot read " + path);
    if (n == 0) return CheckSize(path, extent.offset + done, end);
    done += static_cast<size_t>(n);
  }
  ++buffers_used_;
  return static_cast<const char*>(buffer.data.get());
}

Result<const char*> ExtentRecords::Mapped(const FileExtent& extent, uint64_t end) {
  const std::string path(extent.path);
  // The newest mapping of the file: an older one may still hold views.
  auto newest = std::find_if(maps_.rbegin(), maps_.rend(), [&](const Mapping& mapping) {
    return mapping.device == extent.device && mapping.inode == extent.inode;
  });
  auto found = newest == maps_.rend() ? maps_.end() : std::prev(newest.base());
  if (found != maps_.end()) {
    // Cut short since: past the end a mapping reads zeros, then SIGBUS.
    struct stat info {};
    if (::fstat(found->fd.get(), &info) != 0) return FileError(errno, "cannot stat " + path);
    DROVER_RETURN_IF_ERROR(CheckSize(path, static_cast<uint64_t>(info.st_size), end));
  }
  // A file that grew since it was mapped is mapped again, whole; the old
  // mapping goes at the next KeepOnlyLast, as this call's views may use it.
  if (found == maps_.end() || found->size < end) {
    DROVER_ASSIGN_OR_RETURN(std::optional<Mapping> mapping, Map(extent, end));
    if (!mapping) {
      unmappable_.emplace_back(extent.device, extent.inode);
      return Read(extent, end);
    }
    maps_.push_back(std::move(*mapping));
    found = maps_.end() - 1;
  } else if (found != maps_.end() - 1) {
    std::rotate(found, found + 1, maps_.end());
    found = maps_.end() - 1;
  }
  DROVER_RETURN_IF_ERROR(Populate(found->base, extent.offset, end, path));
  return found->base + extent.offset;
}

Result<std::optional<ExtentRecords::Mapping>> ExtentRecords::Map(const FileExtent& extent,
                                                                 uint64_t end) const {
  const std::string path(extent.path);
  struct stat info {};
  DROVER_ASSIGN_OR_RETURN(os::UniqueFd fd, OpenFedFile(extent, &info));
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  DROVER_RETURN_IF_ERROR(CheckSize(path, size, end));
  // Private: FUSE with direct I/O refuses shared mappings (ENODEV). Nothing
  // writes through it, so it is the page cache's pages all the same.
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  // A file system that maps no files at all: the records are read instead.
  if (base == MAP_FAILED) return std::optional<Mapping>();
  return std::optional(Mapping{extent.device, extent.inode, std::move(fd),
                               static_cast<const char*>(base), static_cast<size_t>(size)});
}

void ExtentRecords::KeepOnlyLast() {
  peak_used_ = std::max(peak_used_, buffers_used_);
  if (buffers_used_ > 1) std::swap(buffers_.front(), buffers_[buffers_used_ - 1]);
  buffers_used_ = std::min<size_t>(buffers_used_, 1);
  if (++calls_since_trim_ >= kTrimEvery) {
    // Past the first, none holds views now.
    buffers_.resize(std::min(buffers_.size(), std::max<size_t>(peak_used_, 1)));
    peak_used_ = 0;
    calls_since_trim_ = 0;
  }
  if (maps_.size() <= 1) return;
  for (auto it = maps_.begin(); it != maps_.end() - 1; ++it) Unmap(*it);
  maps_.erase(maps_.begin(), maps_.end() - 1);
}

}  // namespace drover::feed

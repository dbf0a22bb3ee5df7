// Record I/O for feeding: the input formats drover reads (docs/feed.md), how
// input files are split into partitions on record boundaries, and a reader
// that yields the records of one partition.
//
// Formats:
//  - kCsv, kJsonl: one record per line, without its '\n' (a "\r\n" ending
//    loses the '\r' too). A last line without '\n' is a record; empty lines
//    are skipped (not records).
//  - kTfRecord: TensorFlow's record format: uint64 length, uint32 masked
//    CRC-32C of the length, data, uint32 masked CRC-32C of the data (all
//    little-endian). A bad CRC or a truncated record is kInvalidArgument naming
//    the file, the offset and the record.
//  - kRaw: fixed-length records of `record_bytes` each (Spark's
//    binaryRecords); with record_bytes == 0, each file is one record (Spark's
//    binaryFiles). A file whose size is not a multiple is kInvalidArgument.
//  - kPickle: opaque records (pickled Python objects) that drover.Cluster.train
//    and inference push into a node's queue (external feeding, docs/feed.md).
//    They never come from files: planning or reading them is kInvalidArgument.
//
// A partition is a byte range [begin, end) of one file that starts and ends on
// record boundaries, so readers never look outside their range. The planner
// finds the boundaries: for CSV/JSONL the first '\n' at or after each split
// point, for TFRecord by walking the length headers, for raw by arithmetic.
// Each partition but the last ends at the first record boundary at or after
// begin + split_bytes (for lines: just past the first '\n' at or after
// begin + split_bytes - 1, so a chunk that ends on a newline stays whole).
//
// Thread-compatible: a reader is used by one thread.

#ifndef DROVER_FEED_RECORD_IO_H_
#define DROVER_FEED_RECORD_IO_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover::feed {

enum class RecordFormat { kCsv, kJsonl, kTfRecord, kRaw, kPickle };

// The largest record a reader returns (and so the most it buffers): a longer
// line, TFRecord length or raw record size is kInvalidArgument, never an
// allocation, so a corrupt length cannot exhaust memory.
inline constexpr uint64_t kMaxRecordBytes = 1ull << 30;

// "csv", "jsonl", "tfrecord", "raw", "pickle"; kInvalidArgument listing them.
Result<RecordFormat> ParseRecordFormat(std::string_view name);
std::string_view RecordFormatName(RecordFormat format);

// The error for the pickle format where files would be read.
inline constexpr char kPickleFromFiles[] =
    "the pickle format is fed by drover.Cluster.train, not read from files";

struct Partition {
  std::string path;  // absolute
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive; a record boundary (or the file size)
  // How many records it holds, where the planner counted them (equal shares,
  // feed/share_layout.h).
  std::optional<uint64_t> records;
  // "data/a.csv" for a whole file, "data/a.csv[0:67108864]" for a range.
  std::string Name() const;
  friend bool operator==(const Partition&, const Partition&) = default;
};

struct PlanOptions {
  RecordFormat format = RecordFormat::kCsv;
  uint64_t record_bytes = 0;           // kRaw only
  uint64_t split_bytes = 64ull << 20;  // files larger than this are split; 0: never
  friend bool operator==(const PlanOptions&, const PlanOptions&) = default;
};

// Expands each pattern (glob(3) syntax, relative to the current directory;
// a directory stands for every regular file in it, sorted, but for names
// starting with '.' or '_' as Hadoop skips them: _SUCCESS, .crc), makes paths
// absolute, and splits every file into partitions of about split_bytes on
// record boundaries. Files keep the order of the patterns, then of glob's
// sorted output; a file matched twice is fed once. kNotFound naming the
// pattern when one matches nothing; kInvalidArgument for a bad raw size, an
// unreadable TFRecord header walk or the pickle format (kPickleFromFiles);
// empty files give no partition.
Result<std::vector<Partition>> PlanPartitions(const std::vector<std::string>& patterns,
                                              const PlanOptions& options);

// How a reader takes its partition's file in, a window at a time: mapped
// (records parsed in place: one copy, into the queue, but every page faulted
// in) or read(2) into a buffer it reuses (two copies, no faults). Mapping
// wins where faults are cheap, reading where they are dear: some virtual
// machines map page-cache pages at a fifth of read()'s rate (bench/
// RESULTS.md; bench/host_figures.py prints both). `drover run --feed-ingest
// map|read` pins it for CSV, JSONL, TFRecord and whole-file raw records (a
// file a window); fixed-size raw records have ways of their own (Ingest).
enum class WindowWay { kMap, kRead };

// Chooses the way of each window as a reader fills it, and hears how much of
// each was consumed: a feeder measuring which way costs it less on the host
// it runs on (WindowChoice, feed/ingest_choice.h). A window ends when the
// next is filled (after the last one's mapping is gone, so unmapping it is
// its cost) or when the reader is destroyed.
class WindowPolicy {
 public:
  virtual ~WindowPolicy() = default;
  // A window is about to be filled: the way to take it in.
  virtual WindowWay BeginWindow() = 0;
  // The window begun last ended, `bytes` of it consumed.
  virtual void EndWindow(uint64_t bytes) = 0;
};

// Reads the records of one partition in order, from `start_offset` (a record
// boundary inside the partition: the partition's begin, or an offset a
// previous reader returned from next_offset()), its windows taken in
// `windows`' way (a file system that maps nothing is read either way). The
// pickle format is kInvalidArgument (kPickleFromFiles).
class RecordReader {
 public:
  static Result<std::unique_ptr<RecordReader>> Open(const Partition& partition,
                                                    const PlanOptions& options,
                                                    uint64_t start_offset,
                                                    WindowWay windows = WindowWay::kMap);
  // The same, with `policy` choosing each window's way (CSV, JSONL,
  // TFRecord, whole-file raw; fixed-size raw records have ways of their own
  // and ignore it). `policy` must outlive the reader.
  static Result<std::unique_ptr<RecordReader>> Open(const Partition& partition,
                                                    const PlanOptions& options,
                                                    uint64_t start_offset, WindowPolicy& policy);
  virtual ~RecordReader() = default;

  // The next record, valid until the next call; kOutOfRange-like end is
  // reported as ok() with *record unset: returns false at the end of the
  // partition. Errors (I/O, CRC, truncation) come back as a Status naming the
  // file, the offset and the record (counted from start_offset); they are
  // sticky: every later call returns the same error.
  virtual Result<bool> Next(std::string_view* record) = 0;
  // The file offset just after the last record returned (start_offset
  // before the first; empty lines skipped count as read): where a reader
  // resumes.
  virtual uint64_t next_offset() const = 0;

  // Fixed-length raw records only: up to `max_records` consecutive records as
  // one run of bytes (valid until the next call), so a feeder copies them at
  // once. Returns how many (0 at the end of the partition). Other formats
  // return one record at a time.
  virtual Result<size_t> NextRun(size_t max_records, std::string_view* run);

  // Fixed-length raw records only: reads up to `max_records` records into
  // `out` (room for that many) with pread(2), straight from the page cache,
  // without mapping the file. Returns how many (0 at the end). Where mapping
  // page-cache pages is slow (some virtual machines) this is twice as fast
  // as NextRun and a copy; where it is not, NextRun wins (bench/RESULTS.md).
  // Other formats: kFailedPrecondition.
  virtual Result<size_t> ReadRunInto(size_t max_records, char* out);
};

// CRC-32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2.
// `crc` is the CRC of the data before, so Crc32c(b, n, Crc32c(a, m)) is the
// CRC of a followed by b.
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
// TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskCrc(uint32_t crc);

namespace internal {
// The table-driven CRC-32C that Crc32c falls back to without SSE4.2; exposed
// so tests cover it on machines that have SSE4.2.
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc = 0);
}  // namespace internal

// Appends one TFRecord-framed record to *out (for writers of test data and
// benchmarks).
void AppendTfRecord(std::string_view data, std::string* out);

}  // namespace drover::feed

#endif  // DROVER_FEED_RECORD_IO_H_

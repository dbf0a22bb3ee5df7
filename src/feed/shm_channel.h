// ShmChannel: one fed node's shared-memory channel (docs/shm_queue_format.md):
// a header with the run state and an error text, an input ring (feeder ->
// program) and an output ring (program -> agent, inference results). The
// agent creates it in a sealed memfd, so nothing lands in /dev/shm to leak,
// and hands the descriptor to the feeder and the program over its Unix
// socket (socket_fd.h).
//
// Each ring has one writer and one reader (different processes). Records are
// length-prefixed and travel in batches; positions are published once per
// batch. A waiting side spins briefly, then sleeps on a futex in the shared
// page; every wait is bounded and re-checks the run state.
//
// The writer also records, with every batch, which feed the batch belongs to
// and how far into it the batch goes (a commit point in two alternating
// slots), so a writer that dies mid-batch is resumed exactly after the last
// batch it published: what was published stays in the ring, what was not
// is invisible.

#ifndef DROVER_FEED_SHM_CHANNEL_H_
#define DROVER_FEED_SHM_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "drover/feed_progress.h"
#include "drover/status.h"
#include "os/unique_fd.h"

namespace drover::feed {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

enum class RunState : uint32_t { kRunning = 0, kTerminating = 1, kStopped = 2 };
std::string_view RunStateName(RunState state);

// BatchInfo::flags
inline constexpr uint32_t kEndOfPartition = 1;
// The records all have record_bytes bytes and carry no length prefix (raw
// fixed-length input): one copy per batch instead of one per record.
inline constexpr uint32_t kFixedSizeRecords = 2;
// The records are not in the ring: record_count records of record_bytes
// bytes each lie in a file, at an offset the batch names (FileExtent). The
// program reads them from its own mapping of the file (ExtentRecords), so
// the feeder copies nothing (raw fixed-length input, `--feed-ingest
// extent`).
inline constexpr uint32_t kFileExtent = 4;
// With kFileExtent: the program reads the records with pread(2) into memory
// it reuses instead of mapping the file (`--feed-ingest extent-read`). A
// reader that does not know it maps the file: the records are the same.
inline constexpr uint32_t kReadExtent = 8;

struct BatchInfo {
  uint32_t feed_seq = 0;   // the writer's feed number (FeedsOfShare order)
  uint32_t partition = 0;  // index in the plan
  uint32_t epoch = 0;
  uint32_t flags = 0;
  uint64_t first_record = 0;  // index in the partition of the first record
  uint32_t record_count = 0;
  uint32_t record_bytes = 0;  // with kFixedSizeRecords
};

// Where a kFileExtent batch's records are: `offset` in the file at `path`,
// which must be the file (device and inode) the feeder read.
struct FileExtent {
  std::string_view path;  // absolute
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t offset = 0;  // of the batch's first record
};
// The payload of a kFileExtent batch: u64 offset, u64 device, u64 inode,
// u32 path length, u32 zero, then the path.
size_t FileExtentBytes(std::string_view path);
// Writes the payload (FileExtentBytes(extent.path) bytes) at `out`.
void EncodeFileExtent(const FileExtent& extent, char* out);

// A published batch, read in place.
struct BatchView {
  BatchInfo info;
  // record_count x [uint32 length][bytes], or with kFixedSizeRecords
  // record_count x [record_bytes bytes]; with kFileExtent the extent's
  // encoding (see `extent`).
  const char* records = nullptr;
  size_t bytes = 0;
  uint64_t begin = 0;  // the ring position of the batch's header
  uint64_t end = 0;    // the ring position after this batch (for Release)
  FileExtent extent;   // kFileExtent: where the records are (path in the ring)
};

// Calls fn(std::string_view record) for each record of `batch`. The records
// were checked when the batch was read. Not for kFileExtent batches: their
// records are in a file (ExtentRecords).
template <typename Fn>
void ForEachRecord(const BatchView& batch, Fn&& fn) {
  if (batch.info.flags & kFileExtent) return;
  const char* p = batch.records;
  if (batch.info.flags & kFixedSizeRecords) {
    for (uint32_t i = 0; i < batch.info.record_count; ++i, p += batch.info.record_bytes) {
      fn(std::string_view(p, batch.info.record_bytes));
    }
    return;
  }
  for (uint32_t i = 0; i < batch.info.record_count; ++i) {
    uint32_t length;
    __builtin_memcpy(&length, p, sizeof(length));
    fn(std::string_view(p + sizeof(length), length));
    p += sizeof(length) + length;
  }
}

// What the writer last published: where a new writer resumes.
struct CommitPoint {
  uint32_t feed_seq = 0;
  uint32_t flags = 0;            // the last batch's flags (kEndOfPartition: feed done)
  uint64_t records_through = 0;  // records of feed_seq published so far
  uint64_t source_offset = 0;    // the input offset after them
};

struct RingHeader;
struct ChannelHeader;

class ShmChannel {
 public:
  // A new channel with two rings of `ring_bytes` each (rounded up to a
  // multiple of 4 KiB, at least 64 KiB).
  static Result<ShmChannel> Create(uint64_t ring_bytes);
  // Maps a channel received from the agent; takes `fd`. kInvalidArgument
  // when it is not a channel (bad magic, version, size or seals).
  static Result<ShmChannel> Map(os::UniqueFd fd);

  ShmChannel(ShmChannel&& other) noexcept;
  ShmChannel& operator=(ShmChannel&& other) noexcept;
  ~ShmChannel();

  int fd() const { return fd_.get(); }
  // Checked once, when created or mapped, and kept here: the header's copy
  // is in memory the other processes can write.
  uint64_t ring_bytes() const { return ring_bytes_; }
  // The largest batch a ring takes (header included): half the ring.
  uint64_t max_batch_bytes() const { return ring_bytes_ / 2; }

  RunState state() const;
  // Moves the state forward (running -> terminating -> stopped; never back)
  // and wakes every waiter on both rings. Returns the state now.
  RunState AdvanceState(RunState to);
  // Why the channel was stopped, for the reader's error. The first error set
  // wins; call before AdvanceState(kStopped).
  void SetError(std::string_view message);
  std::string error() const;

  RingHeader* input() const;
  RingHeader* output() const;
  char* input_data() const;
  char* output_data() const;

 private:
  ShmChannel(os::UniqueFd fd, void* base, size_t size, uint64_t ring_bytes)
      : fd_(std::move(fd)), base_(base), size_(size), ring_bytes_(ring_bytes) {}
  ChannelHeader* header() const;

  os::UniqueFd fd_;
  void* base_ = nullptr;
  size_t size_ = 0;
  uint64_t ring_bytes_ = 0;
};

// The writing side of one ring. Not thread-safe; one writer per ring at a
// time (a new one only after the old one's process is gone).
//
// The writer keeps its position in its own memory, from the header's at
// construction on; positions the other side writes (read_pos) are checked
// before use, and one out of range is kInternal "the reader corrupted the
// queue header: ...", never a write outside the ring.
class RingWriter {
 public:
  RingWriter(ShmChannel& channel, bool input_ring);

  // Space for a batch of up to `payload_bytes` of records, contiguous in the
  // ring. Waits for the reader to free space: kDeadlineExceeded at
  // `deadline`; kUnavailable once the channel is no longer running;
  // kInvalidArgument when the batch can never fit (more than
  // max_batch_bytes()); kInternal when the header's positions are corrupt.
  Result<char*> Reserve(size_t payload_bytes, Deadline deadline);
  // Publishes the records written at the reserved place (`payload_bytes`
  // <= the reserved size) and the commit point after them.
  void Commit(const BatchInfo& info, size_t payload_bytes, uint64_t source_offset);
  // No more batches: the reader sees the end once it has read everything.
  void Close();
  // Says in the ring header how this writer takes fixed-size records in (a
  // feed::Ingest plus one), for the agent's heartbeats (ReadRingIngest).
  void SayIngest(uint32_t word);

  // Bytes published and not yet released by the reader (at most the ring's
  // size, whatever the header says).
  uint64_t unread_bytes() const;
  // Where the next batch goes: once the reader released up to here it is
  // done with everything published before.
  uint64_t write_position() const { return write_pos_; }
  // Where the reader released up to (as the header says: the reader may
  // have written anything there).
  uint64_t released_position() const;
  // Waits until the reader released everything before `position` (a
  // write_position() of this writer). The reader is told a writer waits
  // (RingReader::writer_waiting), so it hands out what it holds instead of
  // waiting for more. kDeadlineExceeded when the reader released nothing for
  // `timeout` (the wait starts again whenever it releases some);
  // kUnavailable once the channel is no longer running; kInternal when the
  // header's positions are corrupt.
  Status WaitForRelease(uint64_t position, std::chrono::milliseconds timeout);

  // The last commit point; nullopt when nothing was ever published.
  // kInternal when the ring's header is inconsistent.
  Result<std::optional<CommitPoint>> LastCommit() const;

 private:
  // Ok, or why the header's positions cannot be written after.
  Status CheckPositions(uint64_t read_pos) const;

  ShmChannel* channel_;
  RingHeader* ring_;
  char* data_;
  uint64_t capacity_;
  uint64_t write_pos_;        // this writer's own copy
  Status corrupt_;            // the header's write_pos, as found, was not usable
  uint64_t batch_start_ = 0;  // where the reserved batch's header goes
  size_t reserved_ = 0;
  bool wrap_ = false;  // the reserved batch starts at the next lap
};

// The reading side of one ring. Not thread-safe; one reader per ring.
//
// The reader keeps its cursor and what it released in its own memory; the
// writer's position is checked before use (at most one ring ahead of the
// cursor), and so is every batch header, so a corrupt header is kInternal
// ("corrupt feed queue ..."), never a read outside the ring nor an endless
// walk.
class RingReader {
 public:
  RingReader(ShmChannel& channel, bool input_ring);

  // The next published batch, valid until released. nullopt when the writer
  // closed the ring and every batch was read, or when the channel is no
  // longer running (check state()). kDeadlineExceeded at `deadline`;
  // kInternal for a corrupt batch header or write position.
  Result<std::optional<BatchView>> Next(Deadline deadline);
  // Like Next but never waits: nullopt when nothing is published yet.
  Result<std::optional<BatchView>> TryNext();

  // Records, for a reader that may come after this one, that the program was
  // handed `batch`'s records before `next` (`batch.records + batch.bytes`:
  // all of them). Call when a batch is taken from Next, and after handing
  // out records of it.
  void MarkHanded(const BatchView& batch, const char* next);
  // The same for a kFileExtent batch, of which the program was handed the
  // records before index `next_record` of the partition.
  void MarkHandedExtent(const BatchView& batch, uint64_t next_record);
  // Called once by a new reader of a ring that may have had one before
  // (docs/shm_queue_format.md, "A new reader"): skips what the previous
  // reader was handed, releasing the batches it had wholly, so that the next
  // batch starts at the first record nobody was handed. kInternal when the
  // previous reader's mark is outside the published batches.
  Status Resume();
  // Frees every batch before ring position `end` for the writer.
  void Release(uint64_t end);
  // Frees everything read so far.
  void ReleaseAll() { Release(cursor_); }
  // Drops every published batch, read or not (a terminated feed).
  void DiscardAll();
  bool closed_and_drained() const;
  // Bytes read (handed out) and not yet released.
  uint64_t held_bytes() const;
  // Whether the writer sleeps waiting for space.
  bool writer_waiting() const;

 private:
  Result<std::optional<BatchView>> Read();
  // What Next and TryNext hand out: Read's batch, counted, or the rest of
  // the batch a previous reader was partly handed (counted by it).
  Result<std::optional<BatchView>> Deliver(Result<std::optional<BatchView>> next);
  void CountRead(const BatchView& batch);

  ShmChannel* channel_;
  RingHeader* ring_;
  const char* data_;
  uint64_t capacity_;
  uint64_t cursor_;    // the next batch's position
  uint64_t released_;  // the read_pos this reader last stored
  // After Resume: the batch at skip_at_ is handed out without its records
  // before ring position skip_to_ (0: none).
  uint64_t skip_at_ = 0;
  uint64_t skip_to_ = 0;
  // A kFileExtent batch at skip_at_ starts at this record of its partition.
  uint64_t skip_to_record_ = 0;
};

// What a ring's reader has been handed so far, and how full the ring is.
// Any process that maps the channel may read it (the agent, for heartbeats);
// the counters lag the reader by at most one batch.
// Fills the queue's part of a FeedProgress (records, bytes, partitions_done,
// epoch, queue_bytes, queue_capacity); the rest stays 0.
FeedProgress ReadRingProgress(const ShmChannel& channel, bool input_ring);
// The input ring's writer's RingWriter::SayIngest word; 0 before it said.
// The program could have written anything there: check the range.
uint32_t ReadRingIngest(const ShmChannel& channel);

}  // namespace drover::feed

#endif  // DROVER_FEED_SHM_CHANNEL_H_

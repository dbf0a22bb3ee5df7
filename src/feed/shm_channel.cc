#include "feed/shm_channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <type_traits>

namespace drover::feed {

// The layout is docs/shm_queue_format.md; the structs below are it, and are
// only ever reached through these offsets.
namespace {

constexpr char kMagic[8] = {'D', 'R', 'V', 'F', 'E', 'E', 'D', '1'};
constexpr uint32_t kVersion = 2;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kHeaderBytes = kPage;      // ChannelHeader page
constexpr uint64_t kRingHeaderBytes = kPage;  // one page per RingHeader
constexpr uint64_t kMinRingBytes = 64 * 1024;
constexpr uint64_t kMaxRingBytes = 16ull << 30;
constexpr size_t kErrorCapacity = 2048;
constexpr uint32_t kBatchMarker = 0x48544142;  // "BATH"
constexpr uint32_t kPadMarker = 0x44444150;    // "PADD": skip to the next lap
constexpr int kSpins = 2000;
// A sleeping side wakes at least this often to re-check deadline and state.
constexpr auto kMaxSleep = std::chrono::milliseconds(100);

uint64_t AlignUp(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

template <typename T>
std::atomic_ref<T> Atomic(T& value) {
  return std::atomic_ref<T>(value);
}

}  // namespace

struct CommitSlot {
  uint64_t seq;  // 0: being written
  uint64_t write_pos;
  uint32_t feed_seq;
  uint32_t flags;
  uint64_t records_through;
  uint64_t source_offset;
};

struct RingHeader {
  // Written by the writer.
  alignas(64) uint64_t write_pos;
  uint32_t data_seq;         // futex: bumped on every publish and state change
  uint32_t readers_waiting;  // a reader sleeps on data_seq
  uint32_t closed;
  uint32_t ingest;  // RingWriter::SayIngest
  uint64_t commit_count;
  CommitSlot slots[2];
  // Record bytes published, ever (in the ring or named by file extents), for
  // the agent's heartbeats: with the reader's payload_bytes_read, how far the
  // writer is ahead when its records are not in the ring.
  uint64_t payload_bytes_written;
  // Written by the reader.
  alignas(64) uint64_t read_pos;
  uint32_t space_seq;        // futex: bumped on every release and state change
  uint32_t writers_waiting;  // a writer sleeps on space_seq
  // Progress, for the agent's heartbeats: what the reader was handed. Its
  // own line: the writer polls read_pos's, and these change every batch.
  alignas(64) uint64_t records_read;
  uint64_t payload_bytes_read;  // record bytes, without length prefixes
  uint32_t partitions_read;     // batches flagged end-of-partition
  uint32_t last_epoch;
  // Just past the last record handed to the program: where a new reader
  // starts (RingReader::Resume).
  uint64_t handed_pos;
  // With handed_pos inside a kFileExtent batch: the record of its partition
  // the next reader starts at.
  uint64_t handed_record;
};
static_assert(sizeof(RingHeader) <= kRingHeaderBytes);
static_assert(offsetof(RingHeader, payload_bytes_written) == 112);
static_assert(offsetof(RingHeader, read_pos) == 128);

struct ChannelHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t ring_bytes;
  uint64_t input_offset;  // RingHeader; its data follows one page later
  uint64_t output_offset;
  alignas(64) uint32_t state;
  uint32_t error_length;
  char error[kErrorCapacity];
};
static_assert(sizeof(ChannelHeader) <= kHeaderBytes);

struct BatchHeader {
  uint32_t marker;
  uint32_t bytes;  // header included, a multiple of 8
  uint32_t feed_seq;
  uint32_t partition;
  uint32_t epoch;
  uint32_t flags;
  uint32_t record_count;
  uint32_t record_bytes;  // with kFixedSizeRecords or kFileExtent; 0 otherwise
  uint64_t first_record;
};
static_assert(sizeof(BatchHeader) == 40);

namespace {

// The bytes of the records a batch of `payload_bytes` holds or names: without
// length prefixes, and for a file extent the records in the file.
uint64_t RecordBytesOf(const BatchInfo& info, uint64_t payload_bytes) {
  if (info.flags & kFileExtent) return uint64_t{info.record_count} * info.record_bytes;
  const uint64_t prefixes = (info.flags & kFixedSizeRecords) ? 0 : uint64_t{info.record_count} * 4;
  return payload_bytes >= prefixes ? payload_bytes - prefixes : 0;
}

struct FileExtentHeader {
  uint64_t offset;
  uint64_t device;
  uint64_t inode;
  uint32_t path_bytes;
  uint32_t zero;
};
static_assert(sizeof(FileExtentHeader) == 32);

// The extent a kFileExtent batch's payload [p, limit) names, checked: the
// records end within 2^63 bytes and the path is absolute and has no NUL.
// Returns the end of the payload.
Result<const char*> ReadFileExtent(const BatchHeader& header, const char* p, const char* limit,
                                   FileExtent* extent) {
  FileExtentHeader fields;
  if (static_cast<size_t>(limit - p) < sizeof(fields)) {
    return Status::Internal("corrupt feed queue: a file extent overruns its batch");
  }
  std::memcpy(&fields, p, sizeof(fields));
  p += sizeof(fields);
  if (fields.path_bytes > static_cast<size_t>(limit - p)) {
    return Status::Internal("corrupt feed queue: a file extent's path overruns its batch");
  }
  const std::string_view path(p, fields.path_bytes);
  if (path.empty() || path.front() != '/' || path.find('\0') != std::string_view::npos) {
    return Status::Internal("corrupt feed queue: a file extent's path is not an absolute path");
  }
  const unsigned __int128 end =
      static_cast<unsigned __int128>(header.record_count) * header.record_bytes + fields.offset;
  if (header.record_bytes == 0 || end > (uint64_t{1} << 63)) {
    return Status::Internal("corrupt feed queue: a file extent of " +
                            std::to_string(header.record_count) + " records of " +
                            std::to_string(header.record_bytes) + " bytes at offset " +
                            std::to_string(fields.offset));
  }
  *extent = FileExtent{path, fields.device, fields.inode, fields.offset};
  return p + fields.path_bytes;
}

}  // namespace

size_t FileExtentBytes(std::string_view path) {
  return sizeof(FileExtentHeader) + path.size();
}

void EncodeFileExtent(const FileExtent& extent, char* out) {
  const FileExtentHeader fields{extent.offset, extent.device, extent.inode,
                                static_cast<uint32_t>(extent.path.size()), 0};
  std::memcpy(out, &fields, sizeof(fields));
  std::memcpy(out + sizeof(fields), extent.path.data(), extent.path.size());
}

std::string_view RunStateName(RunState state) {
  switch (state) {
    case RunState::kRunning:
      return "running";
    case RunState::kTerminating:
      return "terminating";
    case RunState::kStopped:
      return "stopped";
  }
  return "unknown";
}

namespace {

uint64_t TotalBytes(uint64_t ring_bytes) {
  return kHeaderBytes + 2 * (kRingHeaderBytes + ring_bytes);
}

// Faults the input ring in up front (pages when creating, page tables when
// mapping), so its first lap is not paid for by the records. The output ring
// is left to fault in on use: it only carries data in inference. Best effort:
// an older kernel without MADV_POPULATE_WRITE just faults lazily.
void PrefaultInputRing(void* base, uint64_t ring_bytes) {
#ifdef MADV_POPULATE_WRITE
  ::madvise(static_cast<char*>(base) + kHeaderBytes, kRingHeaderBytes + ring_bytes,
            MADV_POPULATE_WRITE);
#endif
}

}  // namespace

Result<ShmChannel> ShmChannel::Create(uint64_t ring_bytes) {
  ring_bytes = std::clamp(AlignUp(ring_bytes, kPage), kMinRingBytes, kMaxRingBytes);
  os::UniqueFd fd(::memfd_create("drover-feed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Status::IoError(std::string("memfd_create: ") + std::strerror(errno));
  const uint64_t total = TotalBytes(ring_bytes);
  if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0 ||
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Status::IoError(std::string("cannot size the feed channel: ") + std::strerror(errno));
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    return Status::IoError(std::string("cannot map the feed channel: ") + std::strerror(errno));
  }
  PrefaultInputRing(base, ring_bytes);
  auto* header = new (base) ChannelHeader{};
  std::memcpy(header->magic, kMagic, sizeof(kMagic));
  header->version = kVersion;
  header->header_bytes = kHeaderBytes;
  header->ring_bytes = ring_bytes;
  header->input_offset = kHeaderBytes;
  header->output_offset = kHeaderBytes + kRingHeaderBytes + ring_bytes;
  new (static_cast<char*>(base) + header->input_offset) RingHeader{};
  new (static_cast<char*>(base) + header->output_offset) RingHeader{};
  return ShmChannel(std::move(fd), base, total, ring_bytes);
}

Result<ShmChannel> ShmChannel::Map(os::UniqueFd fd) {
  auto fail = [](std::string message) {
    return Status::InvalidArgument("not a drover feed channel: " + message);
  };
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(std::strerror(errno));
  int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return fail("the memfd is not sealed");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) return fail("too small");
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return fail(std::string("mmap: ") + std::strerror(errno));
  // Another process may write the header while we look: each field is read
  // once, checked, and only the checked copy is used from here on.
  const auto* header = static_cast<const ChannelHeader*>(base);
  char magic[sizeof(kMagic)];
  std::memcpy(magic, header->magic, sizeof(magic));
  const uint32_t version = Atomic(const_cast<uint32_t&>(header->version)).load();
  const uint64_t ring_bytes = Atomic(const_cast<uint64_t&>(header->ring_bytes)).load();
  const uint64_t input_offset = Atomic(const_cast<uint64_t&>(header->input_offset)).load();
  const uint64_t output_offset = Atomic(const_cast<uint64_t&>(header->output_offset)).load();
  std::string problem;
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    problem = "bad magic";
  } else if (version != kVersion) {
    problem = "version " + std::to_string(version) + ", expected " + std::to_string(kVersion);
  } else if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes || ring_bytes % kPage != 0 ||
             TotalBytes(ring_bytes) != size || input_offset != kHeaderBytes ||
             output_offset != kHeaderBytes + kRingHeaderBytes + ring_bytes) {
    problem = "inconsistent sizes";
  }
  if (!problem.empty()) {
    ::munmap(base, size);
    return fail(problem);
  }
  PrefaultInputRing(base, ring_bytes);
  return ShmChannel(std::move(fd), base, size, ring_bytes);
}

ShmChannel::ShmChannel(ShmChannel&& other) noexcept
    : fd_(std::move(other.fd_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      ring_bytes_(std::exchange(other.ring_bytes_, 0)) {}

ShmChannel& ShmChannel::operator=(ShmChannel&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, size_);
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    ring_bytes_ = std::exchange(other.ring_bytes_, 0);
  }
  return *this;
}

ShmChannel::~ShmChannel() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

// The rings' places follow from ring_bytes_ alone (checked when created or
// mapped), never from the header's offsets, which anyone may overwrite.
ChannelHeader* ShmChannel::header() const {
  return static_cast<ChannelHeader*>(base_);
}
RingHeader* ShmChannel::input() const {
  return reinterpret_cast<RingHeader*>(static_cast<char*>(base_) + kHeaderBytes);
}
RingHeader* ShmChannel::output() const {
  return reinterpret_cast<RingHeader*>(static_cast<char*>(base_) + kHeaderBytes + kRingHeaderBytes +
                                       ring_bytes_);
}
char* ShmChannel::input_data() const {
  return static_cast<char*>(base_) + kHeaderBytes + kRingHeaderBytes;
}
char* ShmChannel::output_data() const {
  return reinterpret_cast<char*>(output()) + kRingHeaderBytes;
}

RunState ShmChannel::state() const {
  uint32_t value = Atomic(header()->state).load(std::memory_order_acquire);
  return value <= 2 ? static_cast<RunState>(value) : RunState::kStopped;
}

RunState ShmChannel::AdvanceState(RunState to) {
  auto state = Atomic(header()->state);
  uint32_t current = state.load(std::memory_order_acquire);
  while (
      current < static_cast<uint32_t>(to) &&
      !state.compare_exchange_weak(current, static_cast<uint32_t>(to), std::memory_order_acq_rel)) {
  }
  for (RingHeader* ring : {input(), output()}) {
    Atomic(ring->data_seq).fetch_add(1, std::memory_order_acq_rel);
    Atomic(ring->space_seq).fetch_add(1, std::memory_order_acq_rel);
    FutexWakeAll(&ring->data_seq);
    FutexWakeAll(&ring->space_seq);
  }
  return this->state();
}

void ShmChannel::SetError(std::string_view message) {
  if (message.empty()) message = "stopped";
  ChannelHeader* h = header();
  if (Atomic(h->error_length).load(std::memory_order_acquire) != 0) return;
  size_t length = std::min(message.size(), kErrorCapacity);
  std::memcpy(h->error, message.data(), length);
  Atomic(h->error_length)
      .store(static_cast<uint32_t>(std::max<size_t>(length, 1)), std::memory_order_release);
}

std::string ShmChannel::error() const {
  const ChannelHeader* h = header();
  uint32_t length = Atomic(const_cast<uint32_t&>(h->error_length)).load(std::memory_order_acquire);
  return std::string(h->error, std::min<size_t>(length, kErrorCapacity));
}

namespace {

// Spins, then sleeps on `seq` until ready() or the deadline; false on timeout
// or when the channel left the running state.
template <typename Ready>
bool WaitFor(const ShmChannel& channel, uint32_t& seq, uint32_t& waiting, Deadline deadline,
             Ready ready) {
  for (int i = 0; i < kSpins; ++i) {
    if (ready()) return true;
    CpuRelax();
  }
  for (;;) {
    uint32_t observed = Atomic(seq).load(std::memory_order_acquire);
    if (ready()) return true;
    if (channel.state() != RunState::kRunning) return false;
    auto now = Clock::now();
    if (now >= deadline) return false;
    Atomic(waiting).store(1, std::memory_order_seq_cst);
    if (ready()) {
      Atomic(waiting).store(0, std::memory_order_relaxed);
      return true;
    }
    auto sleep = std::min<Clock::duration>(deadline - now, kMaxSleep);
    FutexWait(&seq, observed, std::chrono::duration_cast<std::chrono::nanoseconds>(sleep));
    Atomic(waiting).store(0, std::memory_order_relaxed);
  }
}

void Publish(uint32_t& seq, uint32_t& waiting) {
  Atomic(seq).fetch_add(1, std::memory_order_seq_cst);
  if (Atomic(waiting).load(std::memory_order_seq_cst) != 0) FutexWakeAll(&seq);
}

}  // namespace

RingWriter::RingWriter(ShmChannel& channel, bool input_ring)
    : channel_(&channel),
      ring_(input_ring ? channel.input() : channel.output()),
      data_(input_ring ? channel.input_data() : channel.output_data()),
      capacity_(channel.ring_bytes()),
      write_pos_(Atomic(ring_->write_pos).load(std::memory_order_acquire)) {
  // Batches start at multiples of 8, so the pad marker always fits before
  // the end of the data area.
  if (write_pos_ % 8 != 0) {
    corrupt_ = Status::Internal("the reader corrupted the queue header: write_pos " +
                                std::to_string(write_pos_) + " is not a multiple of 8");
  }
}

Status RingWriter::CheckPositions(uint64_t read_pos) const {
  if (!corrupt_.ok()) return corrupt_;
  if (read_pos > write_pos_ || write_pos_ - read_pos > capacity_) {
    return Status::Internal("the reader corrupted the queue header: read_pos " +
                            std::to_string(read_pos) + " is not within the " +
                            std::to_string(capacity_) + " bytes before write_pos " +
                            std::to_string(write_pos_));
  }
  return Status::Ok();
}

Result<char*> RingWriter::Reserve(size_t payload_bytes, Deadline deadline) {
  const uint64_t need = AlignUp(sizeof(BatchHeader) + payload_bytes, 8);
  if (need > channel_->max_batch_bytes()) {
    return Status::InvalidArgument("a batch of " + std::to_string(need) +
                                   " bytes does not fit the queue, which takes batches of up to " +
                                   std::to_string(channel_->max_batch_bytes()) +
                                   " bytes (raise --queue-bytes)");
  }
  if (channel_->state() != RunState::kRunning) {
    return Status::Unavailable(std::string("the feed is ") +
                               std::string(RunStateName(channel_->state())));
  }
  const uint64_t write_pos = write_pos_;
  const uint64_t offset = write_pos % capacity_;
  wrap_ = capacity_ - offset < need;
  // A batch never straddles the end: it starts the next lap instead.
  const uint64_t span = (wrap_ ? capacity_ - offset : 0) + need;
  Status positions;
  auto has_room = [&] {
    uint64_t read_pos = Atomic(ring_->read_pos).load(std::memory_order_acquire);
    positions = CheckPositions(read_pos);
    return !positions.ok() || capacity_ - (write_pos - read_pos) >= span;
  };
  const bool ready =
      WaitFor(*channel_, ring_->space_seq, ring_->writers_waiting, deadline, has_room);
  if (!positions.ok()) return positions;
  if (!ready) {
    if (channel_->state() != RunState::kRunning) {
      return Status::Unavailable(std::string("the feed is ") +
                                 std::string(RunStateName(channel_->state())));
    }
    return Status::DeadlineExceeded("the queue stayed full: the reader took nothing");
  }
  batch_start_ = wrap_ ? write_pos + (capacity_ - offset) : write_pos;
  reserved_ = payload_bytes;
  return data_ + batch_start_ % capacity_ + sizeof(BatchHeader);
}

void RingWriter::Commit(const BatchInfo& info, size_t payload_bytes, uint64_t source_offset) {
  payload_bytes = std::min(payload_bytes, reserved_);
  const uint64_t write_pos = write_pos_;
  if (wrap_) {
    uint32_t pad = kPadMarker;
    std::memcpy(data_ + write_pos % capacity_, &pad, sizeof(pad));
  }
  BatchHeader header{};
  header.marker = kBatchMarker;
  header.bytes = static_cast<uint32_t>(AlignUp(sizeof(BatchHeader) + payload_bytes, 8));
  header.feed_seq = info.feed_seq;
  header.partition = info.partition;
  header.epoch = info.epoch;
  header.flags = info.flags;
  header.record_count = info.record_count;
  header.record_bytes = (info.flags & (kFixedSizeRecords | kFileExtent)) ? info.record_bytes : 0;
  header.first_record = info.first_record;
  std::memcpy(data_ + batch_start_ % capacity_, &header, sizeof(header));
  const uint64_t new_pos = batch_start_ + header.bytes;

  // The commit point goes into the older slot, marked invalid while written,
  // before the position that makes it current is published. The count comes
  // from the slot that describes the published position, not from
  // commit_count: a writer killed between storing commit_count and
  // write_pos leaves commit_count one ahead, and (commit_count + 1) % 2 is
  // then the one slot a resuming writer needs; a second writer killed while
  // overwriting it would leave no valid commit point.
  uint64_t current = 0;
  for (const CommitSlot& other : ring_->slots) {
    const uint64_t seq = Atomic(const_cast<uint64_t&>(other.seq)).load(std::memory_order_relaxed);
    if (seq != 0 && other.write_pos == write_pos) current = std::max(current, seq);
  }
  const uint64_t count = current + 1;
  CommitSlot& slot = ring_->slots[count % 2];
  Atomic(slot.seq).store(0, std::memory_order_release);
  slot.write_pos = new_pos;
  slot.feed_seq = info.feed_seq;
  slot.flags = info.flags;
  slot.records_through = info.first_record + info.record_count;
  slot.source_offset = source_offset;
  Atomic(slot.seq).store(count, std::memory_order_release);
  ring_->commit_count = count;
  Atomic(ring_->payload_bytes_written)
      .store(Atomic(ring_->payload_bytes_written).load(std::memory_order_relaxed) +
                 RecordBytesOf(info, payload_bytes),
             std::memory_order_relaxed);
  write_pos_ = new_pos;
  Atomic(ring_->write_pos).store(new_pos, std::memory_order_release);
  Publish(ring_->data_seq, ring_->readers_waiting);
  reserved_ = 0;
  wrap_ = false;
}

void RingWriter::SayIngest(uint32_t word) {
  Atomic(ring_->ingest).store(word, std::memory_order_relaxed);
}

void RingWriter::Close() {
  Atomic(ring_->closed).store(1, std::memory_order_release);
  Publish(ring_->data_seq, ring_->readers_waiting);
}

Status RingWriter::WaitForRelease(uint64_t position, std::chrono::milliseconds timeout) {
  uint64_t seen = Atomic(ring_->read_pos).load(std::memory_order_acquire);
  for (;;) {
    uint64_t read_pos = seen;
    Status positions;
    auto released = [&] {
      read_pos = Atomic(ring_->read_pos).load(std::memory_order_acquire);
      positions = CheckPositions(read_pos);
      return !positions.ok() || read_pos >= position || read_pos != seen;
    };
    const bool ready = WaitFor(*channel_, ring_->space_seq, ring_->writers_waiting,
                               Clock::now() + timeout, released);
    DROVER_RETURN_IF_ERROR(positions);
    if (!ready) {
      if (channel_->state() != RunState::kRunning) {
        return Status::Unavailable(std::string("the feed is ") +
                                   std::string(RunStateName(channel_->state())));
      }
      return Status::DeadlineExceeded("the reader released nothing");
    }
    if (read_pos >= position) return Status::Ok();
    seen = read_pos;  // progress: the timeout starts again
  }
}

uint64_t RingWriter::released_position() const {
  return Atomic(ring_->read_pos).load(std::memory_order_acquire);
}

uint64_t RingWriter::unread_bytes() const {
  const uint64_t write_pos = Atomic(ring_->write_pos).load(std::memory_order_acquire);
  const uint64_t read_pos = Atomic(ring_->read_pos).load(std::memory_order_acquire);
  return write_pos >= read_pos ? std::min(write_pos - read_pos, capacity_) : 0;
}

Result<std::optional<CommitPoint>> RingWriter::LastCommit() const {
  const uint64_t write_pos = Atomic(ring_->write_pos).load(std::memory_order_acquire);
  const CommitSlot* best = nullptr;
  for (const CommitSlot& slot : ring_->slots) {
    uint64_t seq = Atomic(const_cast<uint64_t&>(slot.seq)).load(std::memory_order_acquire);
    if (seq == 0 || slot.write_pos != write_pos) continue;
    if (best == nullptr || seq > best->seq) best = &slot;
  }
  if (best == nullptr) {
    if (write_pos == 0) return std::optional<CommitPoint>();
    return Status::Internal("the feed queue's commit record does not match its position " +
                            std::to_string(write_pos));
  }
  CommitPoint point;
  point.feed_seq = best->feed_seq;
  point.flags = best->flags;
  point.records_through = best->records_through;
  point.source_offset = best->source_offset;
  return std::optional<CommitPoint>(point);
}

RingReader::RingReader(ShmChannel& channel, bool input_ring)
    : channel_(&channel),
      ring_(input_ring ? channel.input() : channel.output()),
      data_(input_ring ? channel.input_data() : channel.output_data()),
      capacity_(channel.ring_bytes()),
      cursor_(Atomic(ring_->read_pos).load(std::memory_order_acquire)),
      released_(cursor_) {}

Result<std::optional<BatchView>> RingReader::Read() {
  for (;;) {
    const uint64_t write_pos = Atomic(ring_->write_pos).load(std::memory_order_acquire);
    if (cursor_ == write_pos) return std::optional<BatchView>();
    // Checked on every pass: it bounds the walk to one lap, whatever the
    // pad markers say.
    if (write_pos < cursor_ || write_pos - cursor_ > capacity_ || cursor_ % 8 != 0) {
      return Status::Internal("corrupt feed queue header: write_pos " + std::to_string(write_pos) +
                              " is not within the " + std::to_string(capacity_) +
                              " bytes after the reader's position " + std::to_string(cursor_));
    }
    const uint64_t offset = cursor_ % capacity_;
    uint32_t marker;
    std::memcpy(&marker, data_ + offset, sizeof(marker));
    if (marker == kPadMarker) {
      cursor_ += capacity_ - offset;
      continue;
    }
    BatchHeader header;
    if (capacity_ - offset < sizeof(header)) {
      return Status::Internal("corrupt feed queue: a batch header crosses the end at " +
                              std::to_string(cursor_));
    }
    std::memcpy(&header, data_ + offset, sizeof(header));
    if (header.marker != kBatchMarker || header.bytes < sizeof(header) || header.bytes % 8 != 0 ||
        header.bytes > capacity_ - offset || cursor_ + header.bytes > write_pos) {
      return Status::Internal("corrupt feed queue: bad batch header at " + std::to_string(cursor_));
    }
    BatchView view;
    view.info.feed_seq = header.feed_seq;
    view.info.partition = header.partition;
    view.info.epoch = header.epoch;
    view.info.flags = header.flags;
    view.info.first_record = header.first_record;
    view.info.record_count = header.record_count;
    view.info.record_bytes = header.record_bytes;
    view.records = data_ + offset + sizeof(header);
    const char* p = view.records;
    const char* limit = data_ + offset + header.bytes;
    if (header.flags & kFileExtent) {
      DROVER_ASSIGN_OR_RETURN(p, ReadFileExtent(header, p, limit, &view.extent));
    } else if (header.flags & kFixedSizeRecords) {
      const uint64_t payload = uint64_t{header.record_count} * header.record_bytes;
      // Records of no bytes would let a small batch claim billions of them.
      if (header.record_count > 0 && header.record_bytes == 0) {
        return Status::Internal("corrupt feed queue: fixed-size records of 0 bytes");
      }
      if (payload > static_cast<uint64_t>(limit - p)) {
        return Status::Internal("corrupt feed queue: records overrun their batch");
      }
      p += payload;
    }
    // Check the record lengths once, so ForEachRecord can trust them.
    const bool prefixed = !(header.flags & (kFixedSizeRecords | kFileExtent));
    for (uint32_t i = 0; i < header.record_count && prefixed; ++i) {
      uint32_t length;
      if (limit - p < static_cast<ptrdiff_t>(sizeof(length))) {
        return Status::Internal("corrupt feed queue: records overrun their batch");
      }
      std::memcpy(&length, p, sizeof(length));
      if (static_cast<uint64_t>(limit - p) - sizeof(length) < length) {
        return Status::Internal("corrupt feed queue: records overrun their batch");
      }
      p += sizeof(length) + length;
    }
    view.bytes = static_cast<size_t>(p - view.records);
    view.begin = cursor_;
    cursor_ += header.bytes;
    view.end = cursor_;
    return std::optional<BatchView>(view);
  }
}

Result<std::optional<BatchView>> RingReader::Deliver(Result<std::optional<BatchView>> next) {
  if (!next.ok() || !next->has_value()) return next;
  BatchView& batch = **next;
  if (skip_to_ == 0 || batch.begin != skip_at_) {
    CountRead(batch);
    return next;
  }
  if (batch.info.flags & kFileExtent) {
    const uint64_t skipped = std::clamp(skip_to_record_, batch.info.first_record,
                                        batch.info.first_record + batch.info.record_count) -
                             batch.info.first_record;
    batch.extent.offset += skipped * batch.info.record_bytes;
    batch.info.first_record += skipped;
    batch.info.record_count -= static_cast<uint32_t>(skipped);
    skip_to_ = 0;
    return next;
  }
  // The records were checked by Read; skip those the previous reader had.
  const char* p = batch.records;
  const char* const limit = batch.records + batch.bytes;
  const uint64_t records_at = batch.begin + sizeof(BatchHeader);
  uint32_t skipped = 0;
  while (skipped < batch.info.record_count &&
         records_at + static_cast<uint64_t>(p - batch.records) < skip_to_ && p < limit) {
    if (batch.info.flags & kFixedSizeRecords) {
      p += batch.info.record_bytes;
    } else {
      uint32_t length;
      std::memcpy(&length, p, sizeof(length));
      p += sizeof(length) + length;
    }
    ++skipped;
  }
  batch.bytes -= static_cast<size_t>(p - batch.records);
  batch.records = p;
  batch.info.first_record += skipped;
  batch.info.record_count -= skipped;
  skip_to_ = 0;
  return next;
}

Result<std::optional<BatchView>> RingReader::TryNext() {
  return Deliver(Read());
}

void RingReader::MarkHanded(const BatchView& batch, const char* next) {
  const uint64_t handed =
      next >= batch.records + batch.bytes
          ? batch.end
          : batch.begin + sizeof(BatchHeader) + static_cast<uint64_t>(next - batch.records);
  Atomic(ring_->handed_pos).store(handed, std::memory_order_release);
}

void RingReader::MarkHandedExtent(const BatchView& batch, uint64_t next_record) {
  if (next_record >= batch.info.first_record + batch.info.record_count) {
    Atomic(ring_->handed_pos).store(batch.end, std::memory_order_release);
    return;
  }
  // Any position inside the batch says "partly handed"; the record says how far.
  Atomic(ring_->handed_record).store(next_record, std::memory_order_relaxed);
  Atomic(ring_->handed_pos).store(batch.begin + 1, std::memory_order_release);
}

Status RingReader::Resume() {
  const uint64_t handed = Atomic(ring_->handed_pos).load(std::memory_order_acquire);
  if (handed <= cursor_) return Status::Ok();
  const uint64_t write_pos = Atomic(ring_->write_pos).load(std::memory_order_acquire);
  if (handed > write_pos) {
    return Status::Internal("corrupt feed queue header: the last reader was handed records up to " +
                            std::to_string(handed) + ", past the published " +
                            std::to_string(write_pos));
  }
  for (;;) {
    Result<std::optional<BatchView>> next = Read();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    const BatchView& batch = **next;
    if (batch.end <= handed) continue;  // it had all of it
    cursor_ = batch.begin;
    if (handed > batch.begin) {
      skip_at_ = batch.begin;
      skip_to_ = handed;
      skip_to_record_ = Atomic(ring_->handed_record).load(std::memory_order_relaxed);
    }
    break;
  }
  Release(cursor_);
  return Status::Ok();
}

Result<std::optional<BatchView>> RingReader::Next(Deadline deadline) {
  auto ready = [&] {
    return Atomic(ring_->write_pos).load(std::memory_order_acquire) > cursor_ ||
           Atomic(ring_->closed).load(std::memory_order_acquire) != 0;
  };
  if (!WaitFor(*channel_, ring_->data_seq, ring_->readers_waiting, deadline, ready)) {
    if (channel_->state() != RunState::kRunning) return std::optional<BatchView>();
    return Status::DeadlineExceeded("no batch arrived");
  }
  return Deliver(Read());
}

void RingReader::Release(uint64_t end) {
  end = std::min(end, cursor_);
  if (end <= released_) return;
  released_ = end;
  Atomic(ring_->read_pos).store(end, std::memory_order_release);
  Publish(ring_->space_seq, ring_->writers_waiting);
}

void RingReader::DiscardAll() {
  const uint64_t write_pos = Atomic(ring_->write_pos).load(std::memory_order_acquire);
  // A write position out of range is not followed: nothing is released then.
  if (write_pos > cursor_ && write_pos - cursor_ <= capacity_) cursor_ = write_pos;
  skip_to_ = 0;
  Atomic(ring_->handed_pos).store(cursor_, std::memory_order_release);
  Release(cursor_);
}

void RingReader::CountRead(const BatchView& batch) {
  // Only this reader writes these; relaxed stores suffice for a progress view.
  const uint64_t payload = RecordBytesOf(batch.info, batch.bytes);
  auto add = [](auto& field, uint64_t delta) {
    using Field = std::remove_reference_t<decltype(field)>;
    Atomic(field).store(static_cast<Field>(Atomic(field).load(std::memory_order_relaxed) + delta),
                        std::memory_order_relaxed);
  };
  add(ring_->records_read, batch.info.record_count);
  add(ring_->payload_bytes_read, payload);
  if (batch.info.flags & kEndOfPartition) add(ring_->partitions_read, 1);
  Atomic(ring_->last_epoch).store(batch.info.epoch, std::memory_order_relaxed);
}

uint32_t ReadRingIngest(const ShmChannel& channel) {
  return Atomic(channel.input()->ingest).load(std::memory_order_relaxed);
}

FeedProgress ReadRingProgress(const ShmChannel& channel, bool input_ring) {
  RingHeader* ring = input_ring ? channel.input() : channel.output();
  FeedProgress progress;
  progress.records = Atomic(ring->records_read).load(std::memory_order_relaxed);
  progress.bytes = Atomic(ring->payload_bytes_read).load(std::memory_order_relaxed);
  progress.partitions_done = Atomic(ring->partitions_read).load(std::memory_order_relaxed);
  progress.epoch = Atomic(ring->last_epoch).load(std::memory_order_relaxed);
  const uint64_t read_pos = Atomic(ring->read_pos).load(std::memory_order_acquire);
  const uint64_t write_pos = Atomic(ring->write_pos).load(std::memory_order_acquire);
  const uint64_t in_ring = write_pos > read_pos ? write_pos - read_pos : 0;
  // Records queued as file extents take little of the ring, but the writer
  // keeps up to a ring's worth of their bytes ahead: count those.
  const uint64_t written = Atomic(ring->payload_bytes_written).load(std::memory_order_relaxed);
  const uint64_t not_handed = written > progress.bytes ? written - progress.bytes : 0;
  // All of these may have been written by the program: show at most the ring.
  progress.queue_bytes = std::min(std::max(in_ring, not_handed), channel.ring_bytes());
  progress.queue_capacity = channel.ring_bytes();
  return progress;
}

uint64_t RingReader::held_bytes() const {
  return cursor_ - released_;
}

bool RingReader::writer_waiting() const {
  return Atomic(ring_->writers_waiting).load(std::memory_order_acquire) != 0;
}

bool RingReader::closed_and_drained() const {
  return Atomic(ring_->closed).load(std::memory_order_acquire) != 0 &&
         cursor_ >= Atomic(ring_->write_pos).load(std::memory_order_acquire);
}

}  // namespace drover::feed

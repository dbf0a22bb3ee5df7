// Fuzzes attaching to a feed channel the way the feeder, the program and an
// external writer do (docs/shm_queue_format.md): the input is laid over a
// channel of the smallest ring in a sealed memfd (or, with the first byte 0,
// is the whole memfd), ShmChannel::Map checks it, and then every operation
// of both sides of both rings runs over whatever the headers and batches
// say. Nothing may crash, hang or touch memory outside the mapping (ASan).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "feed/shm_channel.h"

namespace {

using namespace drover::feed;

constexpr uint64_t kRing = 64 * 1024;
constexpr uint64_t kTotal = 4096 + 2 * (4096 + kRing);
// Where the input's pieces go: the channel header, both ring headers (their
// first 256 bytes: every field) and the start of both data areas.
constexpr uint64_t kInputRing = 4096;
constexpr uint64_t kOutputRing = 8192 + kRing;

// A sealed memfd holding `bytes`; -1 on failure.
int SealedMemfd(const std::string& bytes) {
  int fd = ::memfd_create("drover-feed-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0 ||
      (!bytes.empty() &&
       ::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void Exercise(ShmChannel& channel, bool input_ring, uint64_t* sink) {
  {
    RingReader reader(channel, input_ring);
    if (reader.Resume().ok()) {
      for (int i = 0; i < 64; ++i) {
        auto next = reader.TryNext();
        if (!next.ok() || !next->has_value()) break;
        const BatchView& batch = **next;
        ForEachRecord(batch, [&](std::string_view record) {
          *sink += record.size() + (record.empty() ? 0 : static_cast<uint8_t>(record.front()));
        });
        reader.MarkHanded(batch, batch.records + batch.bytes / 2);
        reader.Release(batch.end);
      }
    }
    *sink += reader.held_bytes() + reader.closed_and_drained() + reader.writer_waiting();
    reader.DiscardAll();
  }
  RingWriter writer(channel, input_ring);
  auto commit = writer.LastCommit();
  if (commit.ok() && commit->has_value()) *sink += (*commit)->records_through;
  *sink += writer.unread_bytes();
  for (size_t bytes : {size_t{0}, size_t{100}, size_t{20'000}}) {
    auto space = writer.Reserve(bytes, Clock::now());
    if (!space.ok()) break;
    std::memset(*space, 'f', bytes);
    BatchInfo info;
    info.record_count = 0;
    writer.Commit(info, bytes, 0);
  }
  const drover::FeedProgress progress = ReadRingProgress(channel, input_ring);
  *sink += progress.records + progress.queue_bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes;
  if (data[0] == 0) {
    bytes.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    bytes.assign(kTotal, '\0');
    const uint8_t* p = data + 1;
    size_t left = size - 1;
    for (uint64_t at : {uint64_t{0}, kInputRing, kOutputRing}) {
      const size_t n = std::min<size_t>(left, 256);
      std::memcpy(bytes.data() + at, p, n);
      p += n;
      left -= n;
    }
    const size_t half = left / 2;
    std::memcpy(bytes.data() + kInputRing + 4096, p, std::min<size_t>(half, kRing));
    std::memcpy(bytes.data() + kOutputRing + 4096, p + half, std::min<size_t>(left - half, kRing));
  }
  int fd = SealedMemfd(bytes);
  if (fd < 0) return 0;
  auto channel = ShmChannel::Map(drover::os::UniqueFd(fd));
  if (!channel.ok()) return 0;
  uint64_t sink = channel->ring_bytes() + static_cast<uint32_t>(channel->state());
  sink += channel->error().size();
  Exercise(*channel, /*input_ring=*/true, &sink);
  Exercise(*channel, /*input_ring=*/false, &sink);
  channel->SetError("fuzzed");
  channel->AdvanceState(RunState::kStopped);
  if (sink == 0x5eed) std::abort();  // keeps `sink` alive
  return 0;
}

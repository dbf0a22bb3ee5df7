// Helpers shared by the feed tests (feed_test): a stand-in for the agent's side of the feed socket,
// and publishing a batch of records by hand. Temporary directories: testing/temp_dir.h; child
// processes: testing/child_process.h.
//
// TestAgent serves one ShmChannel on a Unix socket the way the real agent
// (src/agent/feed_service.cc) does: it reads the hello, refuses a second
// reader while the first one's connection is open, and answers everybody
// else with the grant and the channel's descriptor. One thread; it keeps the
// connections it granted until it is destroyed.

#ifndef DROVER_FEED_FEED_TEST_UTIL_H_
#define DROVER_FEED_FEED_TEST_UTIL_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drover/status.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "os/unique_fd.h"
#include "testing/temp_dir.h"

namespace drover::feed::testing {

// A deadline `duration` from now.
inline Deadline In(Clock::duration duration) {
  return Clock::now() + duration;
}

inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Publishes `records` as one batch (info.record_count is set here).
inline Status PublishBatch(RingWriter& writer, BatchInfo info,
                           const std::vector<std::string>& records, uint64_t source_offset = 0,
                           Deadline deadline = Clock::now() + std::chrono::seconds(10)) {
  size_t bytes = 0;
  for (const std::string& record : records) bytes += sizeof(uint32_t) + record.size();
  Result<char*> space = writer.Reserve(bytes, deadline);
  if (!space.ok()) return space.status();
  char* out = *space;
  for (const std::string& record : records) {
    uint32_t length = static_cast<uint32_t>(record.size());
    std::memcpy(out, &length, sizeof(length));
    std::memcpy(out + sizeof(length), record.data(), record.size());
    out += sizeof(length) + record.size();
  }
  info.record_count = static_cast<uint32_t>(records.size());
  writer.Commit(info, bytes, source_offset);
  return Status::Ok();
}

// Offsets in the channel (docs/shm_queue_format.md), for tests that write
// over a header the way a misbehaving program could.
inline constexpr uint64_t kRingBytesOffset = 16;
inline constexpr uint64_t kInputOffsetOffset = 24;
inline constexpr uint64_t kOutputOffsetOffset = 32;
inline constexpr uint64_t kInputRingHeader = 4096;
inline uint64_t OutputRingHeader(const ShmChannel& channel) {
  return 8192 + channel.ring_bytes();
}
inline constexpr uint64_t kWritePos = 0;          // in a ring header
inline constexpr uint64_t kDataSeq = 8;           // u32
inline constexpr uint64_t kReadPos = 128;         // in a ring header
inline constexpr uint64_t kSpaceSeq = 136;        // u32
inline constexpr uint64_t kWritersWaiting = 140;  // u32

// Writes `value` at `offset` of the channel's memory through its descriptor
// (the same pages every mapping sees). False when the write failed.
template <typename T>
inline bool Scribble(int channel_fd, uint64_t offset, T value) {
  return ::pwrite(channel_fd, &value, sizeof(value), static_cast<off_t>(offset)) ==
         static_cast<ssize_t>(sizeof(value));
}
template <typename T>
inline T Peek(int channel_fd, uint64_t offset) {
  T value{};
  if (::pread(channel_fd, &value, sizeof(value), static_cast<off_t>(offset)) !=
      static_cast<ssize_t>(sizeof(value))) {
    return T{};
  }
  return value;
}

// Publishes `count` records of `record_bytes` bytes at `extent` as one
// kFileExtent batch (info.record_count and record_bytes are set here).
inline Status PublishExtent(RingWriter& writer, BatchInfo info, const FileExtent& extent,
                            uint32_t count, uint32_t record_bytes,
                            Deadline deadline = Clock::now() + std::chrono::seconds(10)) {
  const size_t bytes = FileExtentBytes(extent.path);
  Result<char*> space = writer.Reserve(bytes, deadline);
  if (!space.ok()) return space.status();
  EncodeFileExtent(extent, *space);
  info.flags |= kFileExtent;
  info.record_count = count;
  info.record_bytes = record_bytes;
  writer.Commit(info, bytes, extent.offset + uint64_t{count} * record_bytes);
  return Status::Ok();
}

// The extent of the file at `path` (absolute) from `offset`.
inline FileExtent ExtentOf(const std::string& path, uint64_t offset) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return FileExtent{};
  return FileExtent{path, static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino),
                    offset};
}

// The batch's records; a kFileExtent batch's are read from its file (empty
// strings where it cannot be read).
inline std::vector<std::string> RecordsOf(const BatchView& batch) {
  std::vector<std::string> records;
  if (batch.info.flags & kFileExtent) {
    const std::string path(batch.extent.path);
    os::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    for (uint32_t i = 0; i < batch.info.record_count; ++i) {
      std::string record(batch.info.record_bytes, '\0');
      const off_t at = static_cast<off_t>(batch.extent.offset + uint64_t{i} * record.size());
      if (!fd.valid() || ::pread(fd.get(), record.data(), record.size(), at) !=
                             static_cast<ssize_t>(record.size())) {
        record.clear();
      }
      records.push_back(std::move(record));
    }
    return records;
  }
  ForEachRecord(batch, [&](std::string_view record) { records.emplace_back(record); });
  return records;
}

inline bool ExitedWith(std::optional<int> status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

// Joins `thread` when the test leaves its scope early (a failed ASSERT),
// stopping `channel` first so that whatever the thread waits for in it
// returns at once. A thread joined normally is left alone.
class StopAndJoin {
 public:
  StopAndJoin(ShmChannel& channel, std::thread& thread) : channel_(channel), thread_(thread) {}
  ~StopAndJoin() {
    if (thread_.joinable()) {
      channel_.AdvanceState(RunState::kStopped);
      thread_.join();
    }
  }
  StopAndJoin(const StopAndJoin&) = delete;
  StopAndJoin& operator=(const StopAndJoin&) = delete;

 private:
  ShmChannel& channel_;
  std::thread& thread_;
};

class TestAgent {
 public:
  struct Hello {
    FeedRole role;
    bool train_mode;
  };

  // Serves `channel` (borrowed; it must outlive the agent) at <dir>/feed.sock.
  TestAgent(const ShmChannel& channel, FeedGrant grant, const std::string& dir)
      : channel_fd_(channel.fd()), grant_(std::move(grant)), path_(dir + "/feed.sock") {
    Result<os::UniqueFd> listening = ListenUnix(path_);
    if (!listening.ok()) {
      error_ = listening.status().ToString();
      return;
    }
    listen_fd_ = std::move(listening).value();
    Result<os::Pipe> stop_pipe = os::MakePipe(O_CLOEXEC);
    if (!stop_pipe.ok()) {
      error_ = stop_pipe.status().ToString();
      return;
    }
    stop_pipe_ = std::move(stop_pipe).value();
    thread_ = std::thread([this] { Loop(); });
  }
  ~TestAgent() {
    if (thread_.joinable()) {
      char byte = 'x';
      (void)!::write(stop_pipe_.write.get(), &byte, 1);
      thread_.join();
    }
  }
  TestAgent(const TestAgent&) = delete;
  TestAgent& operator=(const TestAgent&) = delete;

  // Empty when the agent is serving.
  const std::string& error() const { return error_; }
  const std::string& socket_path() const { return path_; }
  std::vector<Hello> hellos() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hellos_;
  }

 private:
  void Loop() {
    for (;;) {
      pollfd fds[2] = {{stop_pipe_.read.get(), POLLIN, 0}, {listen_fd_.get(), POLLIN, 0}};
      if (::poll(fds, 2, 100) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) Accept();
    }
  }

  void Accept() {
    os::UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;
    auto refuse = [&fd](const Status& status) {
      (void)SendMessage(fd.get(), EncodeRefusal(status));
    };
    std::string line;
    os::UniqueFd ignored_fd;
    Status got =
        ReceiveMessage(fd.get(), Clock::now() + std::chrono::seconds(5), &line, &ignored_fd);
    FeedRole role = FeedRole::kReader;
    bool train_mode = true;
    if (got.ok()) got = DecodeHello(line, &role, &train_mode);
    if (!got.ok()) return refuse(got);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hellos_.push_back({role, train_mode});
    }
    if (role == FeedRole::kReader && reader_fd_.valid()) {
      // A reader says nothing after its hello: readable means it is gone.
      pollfd p{reader_fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) > 0 && p.revents != 0) {
        reader_fd_.Reset();
      } else {
        return refuse(
            Status::AlreadyExists("the feed of " + grant_.task + " already has a reader"));
      }
    }
    if (!SendMessage(fd.get(), EncodeGrant(grant_), channel_fd_).ok()) return;
    if (role == FeedRole::kReader) {
      reader_fd_ = std::move(fd);
    } else {
      others_.push_back(std::move(fd));
    }
  }

  const int channel_fd_;
  const FeedGrant grant_;
  const std::string path_;
  std::string error_;
  os::UniqueFd listen_fd_;
  os::Pipe stop_pipe_;
  std::thread thread_;
  // Only the loop thread touches these.
  os::UniqueFd reader_fd_;
  std::vector<os::UniqueFd> others_;
  mutable std::mutex mutex_;
  std::vector<Hello> hellos_;  // GUARDED_BY(mutex_)
};

}  // namespace drover::feed::testing

#endif  // DROVER_FEED_FEED_TEST_UTIL_H_

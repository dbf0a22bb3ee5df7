#include "feed/partition_writer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "feed/record_io.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "os/duration_text.h"
#include "os/unique_fd.h"

namespace drover::feed {
namespace {

using std::chrono::milliseconds;

// The longest one wait runs before it re-checks the channel and the other
// thread (Reserve and Next re-check the run state on their own, too).
constexpr milliseconds kSlice{100};
constexpr size_t kBatchHeaderBytes = 40;  // docs/shm_queue_format.md

size_t RecordBytes(std::string_view record) {
  return sizeof(uint32_t) + record.size();
}

// A batch of `payload` bytes as the ring counts it: header, 8-byte aligned.
uint64_t BatchBytes(uint64_t payload) {
  return (kBatchHeaderBytes + payload + 7) / 8 * 8;
}

class ShmPartitionWriter final : public PartitionWriter {
 public:
  ShmPartitionWriter(PartitionWriterOptions options, JoinedFeed joined)
      : options_(std::move(options)),
        socket_(std::move(joined.socket)),
        task_(joined.grant.task),
        channel_(std::move(joined.channel)),
        input_(channel_, /*input_ring=*/true) {
    // One batch takes at most a quarter of the queue, as the feeder's, so
    // the program can hold one while the next is written.
    batch_bytes_ =
        std::max<size_t>(1, std::min<size_t>(options_.batch_bytes, channel_.max_batch_bytes() / 4));
    // feed_seq keeps counting across writers, so results are matched to
    // this writer's batches only.
    Result<std::optional<CommitPoint>> last = input_.LastCommit();
    if (last.ok() && last->has_value()) next_feed_seq_ = (*last)->feed_seq + 1;
  }
  const std::string& task() const override { return task_; }
  Status Feed(uint32_t partition, uint32_t epoch, const std::vector<std::string_view>& records,
              std::vector<std::string>* results) override;
  Status WaitConsumed() override;
  Status EndFeed() override;
  bool terminated() const override {
    return terminated_ || channel_.state() == RunState::kTerminating;
  }

 private:
  Status Stopped() const {
    const std::string why = channel_.error();
    return Status::Unavailable("feeding " + task_ + " stopped" + (why.empty() ? "" : ": " + why));
  }
  // The channel left the running state: the error to return, or Ok with
  // terminated_ set (training records are dropped).
  Status NotRunning(bool inference, uint32_t partition) {
    if (channel_.state() == RunState::kTerminating) {
      terminated_ = true;
      if (!inference) return Status::Ok();
      return Status::Cancelled("inference: " + task_ + " terminated its feed; partition " +
                               std::to_string(partition) + " has no results");
    }
    return Stopped();
  }
  // Space for a batch of `payload` bytes; waits at most feed_timeout for the
  // program to free it. nullptr with *status Ok: the channel is no longer
  // running or `abort` was set (the caller looks at the state).
  Result<char*> Reserve(size_t payload, const std::atomic<bool>& abort, uint32_t partition,
                        uint32_t epoch);
  // Publishes the records; false when it stopped early (the channel left
  // the running state, or `abort`).
  Result<bool> WriteRecords(uint32_t feed_seq, uint32_t partition, uint32_t epoch,
                            const std::vector<std::string_view>& records,
                            const std::atomic<bool>& abort, std::atomic<int64_t>* progress);
  // The results of feed `feed_seq`, until its end of partition. The feed
  // timeout runs from the last result, or from when every record was
  // published (`written`); until then the writer's own timeout applies.
  Status ReadResults(uint32_t feed_seq, uint32_t partition, size_t expected,
                     const std::atomic<bool>& written, const std::atomic<bool>& writing_failed,
                     std::atomic<int64_t>* progress, std::vector<std::string>* results);

  const PartitionWriterOptions options_;
  // Closing the connection is what tells the agent this writer is gone:
  // declared before the channel, so it closes after the last write to it.
  const os::UniqueFd socket_;
  const std::string task_;
  ShmChannel channel_;
  RingWriter input_;
  size_t batch_bytes_ = 0;
  uint32_t next_feed_seq_ = 0;
  bool terminated_ = false;
  bool ended_ = false;
};

int64_t Now() {
  return Clock::now().time_since_epoch().count();
}

Result<char*> ShmPartitionWriter::Reserve(size_t payload, const std::atomic<bool>& abort,
                                          uint32_t partition, uint32_t epoch) {
  const Deadline deadline = Clock::now() + options_.feed_timeout;
  for (;;) {
    if (abort) return static_cast<char*>(nullptr);
    Result<char*> space = input_.Reserve(payload, std::min(deadline, Clock::now() + kSlice));
    if (space.ok()) return space;
    if (channel_.state() != RunState::kRunning) return static_cast<char*>(nullptr);
    if (space.status().code() != Status::Code::kDeadlineExceeded) return space.status();
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded("feed timeout: " + task_ + " took no records for " +
                                      os::SecondsText(options_.feed_timeout) + " (partition " +
                                      std::to_string(partition) + ", epoch " +
                                      std::to_string(epoch) + ")");
    }
  }
}

Result<bool> ShmPartitionWriter::WriteRecords(uint32_t feed_seq, uint32_t partition, uint32_t epoch,
                                              const std::vector<std::string_view>& records,
                                              const std::atomic<bool>& abort,
                                              std::atomic<int64_t>* progress) {
  BatchInfo info;
  info.feed_seq = feed_seq;
  info.partition = partition;
  info.epoch = epoch;
  char* space = nullptr;
  size_t reserved = 0;
  size_t used = 0;
  auto reserve = [&](size_t bytes) -> Status {
    DROVER_ASSIGN_OR_RETURN(space, Reserve(bytes, abort, partition, epoch));
    reserved = space == nullptr ? 0 : bytes;
    used = 0;
    return Status::Ok();
  };
  auto publish = [&](uint32_t flags) {
    info.flags = flags;
    input_.Commit(info, used, /*source_offset=*/0);
    info.first_record += info.record_count;
    info.record_count = 0;
    progress->store(Now());
  };
  DROVER_RETURN_IF_ERROR(reserve(batch_bytes_));
  for (std::string_view record : records) {
    if (space == nullptr) return false;  // not running, or the reader failed
    const size_t need = RecordBytes(record);
    if (used + need > reserved) {
      if (info.record_count > 0) publish(0);
      DROVER_RETURN_IF_ERROR(reserve(std::max(batch_bytes_, need)));
      if (space == nullptr) return false;
    }
    const auto length = static_cast<uint32_t>(record.size());
    std::memcpy(space + used, &length, sizeof(length));
    std::memcpy(space + used + sizeof(length), record.data(), record.size());
    used += need;
    ++info.record_count;
  }
  if (space == nullptr) return false;
  publish(kEndOfPartition);
  return true;
}

Status ShmPartitionWriter::ReadResults(uint32_t feed_seq, uint32_t partition, size_t expected,
                                       const std::atomic<bool>& written,
                                       const std::atomic<bool>& writing_failed,
                                       std::atomic<int64_t>* progress,
                                       std::vector<std::string>* results) {
  const std::string name = "partition " + std::to_string(partition);
  RingReader output(channel_, /*input_ring=*/false);
  for (;;) {
    if (writing_failed) return Status::Ok();  // the writer's error is the one to report
    if (channel_.state() != RunState::kRunning) return NotRunning(/*inference=*/true, partition);
    // Read once: the writer may finish during this wait, and a deadline
    // taken before that is only a slice, not the feed timeout.
    const bool all_written = written;
    const Deadline deadline =
        all_written ? Clock::time_point(Clock::duration(progress->load())) + options_.feed_timeout
                    : Clock::now() + kSlice;
    Result<std::optional<BatchView>> next = output.Next(std::min(deadline, Clock::now() + kSlice));
    if (!next.ok()) {
      if (next.status().code() != Status::Code::kDeadlineExceeded) {
        return next.status().WithContext("reading the results of " + task_);
      }
      if (all_written && Clock::now() >= deadline) {
        return Status::DeadlineExceeded("feed timeout: " + task_ + " returned no results for " +
                                        os::SecondsText(options_.feed_timeout) + " (" + name +
                                        ", " + std::to_string(results->size()) + " of " +
                                        std::to_string(expected) + " results in)");
      }
      continue;
    }
    if (!next->has_value()) continue;  // the state changed: checked above
    const BatchView& batch = **next;
    // Results of an earlier writer that gave up are not ours.
    if (batch.info.partition == partition && batch.info.feed_seq == feed_seq) {
      if (batch.info.first_record != results->size()) {
        output.Release(batch.end);
        return Status::Internal(
            "the results of " + name + " of " + task_ + " arrived out of order: record " +
            std::to_string(batch.info.first_record) + " after " + std::to_string(results->size()));
      }
      ForEachRecord(batch, [&](std::string_view result) { results->emplace_back(result); });
      progress->store(Now());
      if (batch.info.flags & kEndOfPartition) {
        output.Release(batch.end);
        if (results->size() != expected) {
          return Status::InvalidArgument("inference: " + task_ + " returned " +
                                         std::to_string(results->size()) + " results for the " +
                                         std::to_string(expected) + " records of " + name);
        }
        return Status::Ok();
      }
    }
    output.Release(batch.end);
  }
}

Status ShmPartitionWriter::Feed(uint32_t partition, uint32_t epoch,
                                const std::vector<std::string_view>& records,
                                std::vector<std::string>* results) {
  const bool inference = results != nullptr;
  if (inference) results->clear();
  if (ended_) return Status::FailedPrecondition("the feed of " + task_ + " has ended");
  if (channel_.state() != RunState::kRunning) return NotRunning(inference, partition);
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].size() > kMaxRecordBytes ||
        BatchBytes(RecordBytes(records[i])) > channel_.max_batch_bytes()) {
      return Status::InvalidArgument(
          "record " + std::to_string(i) + " of partition " + std::to_string(partition) + " is " +
          std::to_string(records[i].size()) + " bytes; the queue of " + task_ +
          " takes records of up to " +
          std::to_string(std::min<uint64_t>(
              kMaxRecordBytes, channel_.max_batch_bytes() - kBatchHeaderBytes - sizeof(uint32_t))) +
          " bytes (half the queue, at most 1 GiB)");
    }
  }
  const uint32_t feed_seq = next_feed_seq_++;
  std::atomic<bool> reading_failed{false};
  std::atomic<bool> written{false};
  std::atomic<bool> writing_failed{false};
  std::atomic<int64_t> progress{Now()};
  Status read_status;
  std::thread reader;
  if (inference) {
    reader = std::thread([&] {
      read_status = ReadResults(feed_seq, partition, records.size(), written, writing_failed,
                                &progress, results);
      if (!read_status.ok()) reading_failed = true;
    });
  }
  Result<bool> all_written =
      WriteRecords(feed_seq, partition, epoch, records, reading_failed, &progress);
  if (all_written.ok() && *all_written) {
    progress = Now();
    written = true;
  } else {
    writing_failed = true;
  }
  if (reader.joinable()) reader.join();
  if (!all_written.ok()) return all_written.status();
  if (!read_status.ok()) return read_status;
  // Stopped early without an error of its own (a failed reader returned
  // above): the channel left the running state.
  if (!*all_written) return NotRunning(inference, partition);
  return Status::Ok();
}

Status ShmPartitionWriter::WaitConsumed() {
  // Woken by each release; the timeout restarts whenever the program took
  // something.
  Status released = terminated()
                        ? Status::Ok()
                        : input_.WaitForRelease(input_.write_position(), options_.feed_timeout);
  if (terminated()) {
    terminated_ = true;
    return Status::Ok();
  }
  if (channel_.state() == RunState::kStopped) return Stopped();
  if (released.code() == Status::Code::kDeadlineExceeded) {
    return Status::DeadlineExceeded("feed timeout: " + task_ + " took no records for " +
                                    os::SecondsText(options_.feed_timeout) + " (" +
                                    std::to_string(input_.unread_bytes()) + " bytes still queued)");
  }
  return released;
}

Status ShmPartitionWriter::EndFeed() {
  if (ended_) return Status::Ok();
  input_.Close();
  ended_ = true;
  if (channel_.state() == RunState::kStopped) return Stopped();
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<PartitionWriter>> PartitionWriter::Connect(PartitionWriterOptions options) {
  DROVER_ASSIGN_OR_RETURN(JoinedFeed joined,
                          JoinFeed(options.socket_path, FeedRole::kWriter, /*train_mode=*/true,
                                   Clock::now() + options.connect_timeout, /*external=*/true));
  if (joined.grant.mode != "external") {
    return Status::FailedPrecondition(
        "the feed at " + options.socket_path + " of " + joined.grant.task +
        " is fed from its plan (drover run --input), not from outside");
  }
  return std::unique_ptr<PartitionWriter>(
      new ShmPartitionWriter(std::move(options), std::move(joined)));
}

}  // namespace drover::feed

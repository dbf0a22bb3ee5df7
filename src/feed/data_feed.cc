#include "drover/data_feed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "feed/extent_records.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "os/duration_text.h"
#include "os/unique_fd.h"

namespace drover {
namespace {

using feed::BatchInfo;
using feed::BatchView;
using feed::Clock;
using feed::RunState;

constexpr auto kConnectTimeout = std::chrono::seconds(10);
// The agent records a commit in the driver: one round trip each way.
constexpr auto kCommitTimeout = std::chrono::seconds(60);

// Records handed out in inference mode and not answered yet, per batch.
struct Piece {
  BatchInfo info;  // first_record/record_count: the records handed out
  bool ends_partition = false;
};

class ShmDataFeed final : public DataFeed {
 public:
  ShmDataFeed(feed::JoinedFeed joined, bool train_mode, std::chrono::milliseconds timeout)
      : socket_(std::move(joined.socket)),
        grant_(std::move(joined.grant)),
        channel_(std::move(joined.channel)),
        input_(channel_, /*input_ring=*/true),
        output_(channel_, /*input_ring=*/false),
        inference_(!train_mode),
        external_(grant_.mode == "external"),
        timeout_(timeout) {}
  // Starts after what an earlier reader of this node's feed was handed.
  Status Resume() { return input_.Resume(); }

  using DataFeed::NextBatch;
  Status NextBatch(size_t max_records, RecordBatch* out) override;
  Status BatchResults(const std::vector<std::string_view>& results) override;
  bool ShouldStop() const override;
  void Terminate() override;
  Result<std::optional<FeedPosition>> Commit() override;
  uint64_t records_read() const override { return records_read_; }
  std::string format() const override { return grant_.format; }
  uint64_t record_bytes() const override { return grant_.record_bytes; }

 private:
  std::string PartitionName(uint32_t partition) const {
    return partition < grant_.partitions.size() ? grant_.partitions[partition]
                                                : "#" + std::to_string(partition);
  }
  // `status`, noting whether it reports the feed's stop to the program.
  Status NoteStop(Status status) {
    if (!status.ok() && channel_.state() == RunState::kStopped) stop_reported_ = true;
    return status;
  }
  Status Stopped() const {
    std::string why = channel_.error();
    return Status::Unavailable("feeding " + grant_.task + " stopped" +
                               (why.empty() ? "" : ": " + why));
  }
  // The next batch while this call already holds records. Their queue space
  // is not free for the feeder until the next call, so once the feeder would
  // wait for it (or half the queue is held), *held_back is set and the call
  // returns what it has instead of waiting out its timeout.
  Result<std::optional<BatchView>> NextWhileHolding(Clock::time_point deadline, bool* held_back);
  // Makes the batch just read current_: its records start at next_record_.
  Status Start(const BatchView& view);
  // Records how far current_ was handed out, for a later reader.
  void MarkHanded();
  // Takes up to `wanted` records of current_ into *batch.
  void Take(size_t wanted, RecordBatch* batch);
  Status WriteResults(const Piece& piece, const std::vector<std::string_view>& results,
                      size_t first);
  // Writes what unanswered_ holds when none of it has records: ends of
  // partitions (empty end-of-partition batches), which a program answers
  // nothing for, so nobody else will.
  Status AnswerEnds();
  // NextBatch's work; *out starts empty.
  Status FillBatch(size_t max_records, RecordBatch* out);

  // Closing the connection is what tells the agent this reader is gone:
  // declared before the channel, so it closes after the last use of it.
  os::UniqueFd socket_;
  feed::FeedGrant grant_;
  feed::ShmChannel channel_;
  feed::RingReader input_;
  feed::RingWriter output_;
  // The records of kFileExtent batches, in place or read by this process.
  feed::ExtentRecords extents_;
  bool inference_;
  // Fed from outside (drover.Cluster.train): a writer sends one partition
  // and, in inference, waits for its results before it sends more, so a
  // call never waits for records past the end of a partition.
  bool external_;
  std::chrono::milliseconds timeout_;

  std::optional<BatchView> current_;   // the batch being handed out
  const char* next_record_ = nullptr;  // in current_
  uint32_t taken_ = 0;                 // records of current_ handed out
  uint64_t release_to_ = 0;            // end of the last batch fully handed out
  bool ended_ = false;
  bool terminated_ = false;
  // A call returned the error that stopped the feed: until one has,
  // ShouldStop() is false, so that a `while (!ShouldStop())` loop makes the
  // call that reports it instead of ending as if the feed were over.
  bool stop_reported_ = false;
  uint64_t records_read_ = 0;
  std::vector<Piece> unanswered_;
  // Just past the last record handed out; nullopt before the first.
  std::optional<FeedPosition> handed_;
};

Result<std::optional<BatchView>> ShmDataFeed::NextWhileHolding(Clock::time_point deadline,
                                                               bool* held_back) {
  constexpr auto kSlice = std::chrono::milliseconds(5);
  for (;;) {
    Result<std::optional<BatchView>> next = input_.TryNext();
    if (!next.ok() || next->has_value()) return next;
    if (input_.closed_and_drained() || channel_.state() != RunState::kRunning) return next;
    if (input_.writer_waiting() || input_.held_bytes() >= channel_.ring_bytes() / 2 ||
        Clock::now() >= deadline) {
      *held_back = true;
      return next;
    }
    next = input_.Next(std::min(deadline, Clock::now() + kSlice));
    if (!next.ok() && next.status().code() == Status::Code::kDeadlineExceeded) continue;
    return next;
  }
}

Status ShmDataFeed::Start(const BatchView& view) {
  current_ = view;
  next_record_ = view.records;
  taken_ = 0;
  if ((view.info.flags & feed::kFileExtent) && view.info.record_count > 0) {
    Result<const char*> records = extents_.Records(view);
    if (!records.ok()) {
      // The feed cannot go on past these records: stop it, as a bad record
      // in the feeder does, so the feeder and the agent stop too.
      current_.reset();
      channel_.SetError("reading the records of " + PartitionName(view.info.partition) +
                        " in place: " + records.status().message());
      channel_.AdvanceState(RunState::kStopped);
      return Stopped();
    }
    next_record_ = *records;
  }
  MarkHanded();
  return Status::Ok();
}

void ShmDataFeed::MarkHanded() {
  const BatchView& view = *current_;
  if (view.info.flags & feed::kFileExtent) {
    input_.MarkHandedExtent(view, view.info.first_record + taken_);
  } else {
    input_.MarkHanded(view, next_record_);
  }
}

void ShmDataFeed::Take(size_t wanted, RecordBatch* batch) {
  const BatchView& view = *current_;
  const uint32_t first = taken_;
  // One allocation for the call's views, not a doubling per power of two.
  batch->records.reserve(
      std::min<size_t>(wanted, batch->records.size() + (view.info.record_count - taken_)));
  if (view.info.flags & (feed::kFixedSizeRecords | feed::kFileExtent)) {
    const size_t size = view.info.record_bytes;
    while (taken_ < view.info.record_count && batch->records.size() < wanted) {
      batch->records.emplace_back(next_record_, size);
      next_record_ += size;
      ++taken_;
    }
  }
  while (taken_ < view.info.record_count && batch->records.size() < wanted) {
    uint32_t length;
    std::memcpy(&length, next_record_, sizeof(length));
    batch->records.emplace_back(next_record_ + sizeof(length), length);
    next_record_ += sizeof(length) + length;
    ++taken_;
  }
  const bool finished = taken_ == view.info.record_count;
  MarkHanded();
  handed_ = FeedPosition{view.info.feed_seq, view.info.first_record + taken_,
                         finished && (view.info.flags & feed::kEndOfPartition) != 0};
  if (inference_ && taken_ > first) {
    Piece piece{view.info, finished && (view.info.flags & feed::kEndOfPartition) != 0};
    piece.info.first_record = view.info.first_record + first;
    piece.info.record_count = taken_ - first;
    unanswered_.push_back(piece);
  }
  if (finished) {
    // An empty batch that ends a partition still needs its end answered.
    if (inference_ && view.info.record_count == 0 && (view.info.flags & feed::kEndOfPartition)) {
      Piece piece{view.info, true};
      unanswered_.push_back(piece);
    }
    release_to_ = view.end;
    current_.reset();
  }
}

Status ShmDataFeed::NextBatch(size_t max_records, RecordBatch* out) {
  out->records.clear();
  out->epoch = 0;
  Status filled = FillBatch(max_records, out);
  if (!filled.ok()) out->records.clear();
  return NoteStop(std::move(filled));
}

Status ShmDataFeed::FillBatch(size_t max_records, RecordBatch* out) {
  RecordBatch& batch = *out;
  size_t records_unanswered = 0;
  for (const Piece& piece : unanswered_) records_unanswered += piece.info.record_count;
  if (records_unanswered > 0) {
    return Status::InvalidArgument("next_batch: call batch_results with the " +
                                   std::to_string(records_unanswered) +
                                   " results of the previous batch first (partition " +
                                   PartitionName(unanswered_.front().info.partition) + ")");
  }
  // Left by a call that failed answering them.
  DROVER_RETURN_IF_ERROR(AnswerEnds());
  // The views handed out last time are given up now.
  input_.Release(release_to_);
  extents_.KeepOnlyLast();
  if (channel_.state() == RunState::kStopped) return Stopped();
  if (terminated_ || channel_.state() != RunState::kRunning || max_records == 0) {
    return Status::Ok();
  }

  // Read the clock only for a call that has to wait: most calls take what
  // an earlier call left in current_.
  std::optional<Clock::time_point> deadline_at;
  auto deadline = [&] {
    if (!deadline_at) deadline_at = Clock::now() + timeout_;
    return *deadline_at;
  };
  bool have_epoch = false;
  bool partition_ended = false;  // external: take only what is queued from here
  while (batch.records.size() < max_records && !ended_) {
    if (!current_) {
      bool held_back = false;
      Result<std::optional<BatchView>> next = batch.records.empty() ? input_.Next(deadline())
                                              : partition_ended
                                                  ? input_.TryNext()
                                                  : NextWhileHolding(deadline(), &held_back);
      if (held_back) break;
      if (partition_ended && next.ok() && !next->has_value() &&
          channel_.state() == RunState::kRunning && !input_.closed_and_drained()) {
        break;
      }
      if (!next.ok()) {
        if (!batch.records.empty()) break;  // what arrived in time
        if (next.status().code() == Status::Code::kDeadlineExceeded) {
          return Status::DeadlineExceeded("next_batch: no record arrived for " + grant_.task +
                                          " in " + os::SecondsText(timeout_));
        }
        return next.status();
      }
      if (!next->has_value()) {
        if (channel_.state() == RunState::kStopped) {
          if (batch.records.empty()) return Stopped();
          break;
        }
        if (channel_.state() == RunState::kTerminating) break;
        ended_ = input_.closed_and_drained();
        break;
      }
      if (Status started = Start(**next); !started.ok()) {
        if (!batch.records.empty()) break;  // the next call reports it
        return started;
      }
    }
    if (have_epoch && static_cast<int>(current_->info.epoch) != batch.epoch) break;
    if (!have_epoch && current_->info.record_count > 0) {
      batch.epoch = static_cast<int>(current_->info.epoch);
      have_epoch = true;
    }
    const bool ends_partition = (current_->info.flags & feed::kEndOfPartition) != 0;
    Take(max_records, out);
    // A batch that gave this call nothing (an empty end-of-partition batch)
    // is given back, and its end answered, before waiting for more: a
    // writer waiting for the queue to drain or for the end's answer
    // (PartitionWriter) must not wait for this call, and after the feed's
    // last batch the program calls no more.
    if (!current_ && batch.records.empty()) {
      input_.Release(release_to_);
      DROVER_RETURN_IF_ERROR(AnswerEnds());
    }
    if (external_ && ends_partition && !current_ && !batch.records.empty()) {
      partition_ended = true;
    }
  }
  records_read_ += batch.records.size();
  return Status::Ok();
}

Status ShmDataFeed::WriteResults(const Piece& piece, const std::vector<std::string_view>& results,
                                 size_t first) {
  const size_t limit = channel_.max_batch_bytes() - 64;
  size_t index = 0;
  const size_t count = piece.info.record_count;
  do {
    // As many results as fit one batch.
    size_t bytes = 0, end = index;
    while (end < count && bytes + 4 + results[first + end].size() <= limit) {
      bytes += 4 + results[first + end].size();
      ++end;
    }
    if (end == index && index < count) {
      return Status::InvalidArgument("batch_results: a result of " +
                                     std::to_string(results[first + index].size()) +
                                     " bytes does not fit the queue (raise --queue-bytes)");
    }
    Result<char*> space = output_.Reserve(bytes, Clock::now() + timeout_);
    if (!space.ok()) {
      if (channel_.state() == RunState::kStopped) return Stopped();
      return space.status().WithContext("batch_results");
    }
    char* out = *space;
    for (size_t i = index; i < end; ++i) {
      std::string_view result = results[first + i];
      uint32_t length = static_cast<uint32_t>(result.size());
      std::memcpy(out, &length, sizeof(length));
      std::memcpy(out + sizeof(length), result.data(), result.size());
      out += sizeof(length) + result.size();
    }
    BatchInfo info = piece.info;
    info.first_record = piece.info.first_record + index;
    info.record_count = static_cast<uint32_t>(end - index);
    info.flags = (end == count && piece.ends_partition) ? feed::kEndOfPartition : 0;
    output_.Commit(info, bytes, 0);
    index = end;
  } while (index < count);
  return Status::Ok();
}

Status ShmDataFeed::AnswerEnds() {
  for (const Piece& piece : unanswered_) {
    if (piece.info.record_count > 0) return Status::Ok();  // the program answers these
  }
  for (const Piece& piece : unanswered_) DROVER_RETURN_IF_ERROR(WriteResults(piece, {}, 0));
  unanswered_.clear();
  return Status::Ok();
}

Status ShmDataFeed::BatchResults(const std::vector<std::string_view>& results) {
  if (!inference_) {
    return Status::InvalidArgument(
        "batch_results is for inference (drover run --mode inference); this feed trains");
  }
  size_t expected = 0;
  for (const Piece& piece : unanswered_) expected += piece.info.record_count;
  if (results.size() != expected) {
    std::string partitions;
    for (const Piece& piece : unanswered_) {
      if (piece.info.record_count == 0) continue;
      partitions += (partitions.empty() ? "" : ", ") + PartitionName(piece.info.partition);
    }
    return Status::InvalidArgument("batch_results: " + std::to_string(results.size()) +
                                   " results for the " + std::to_string(expected) +
                                   " records of the last batch" +
                                   (partitions.empty() ? std::string(" (none were read)")
                                                       : " (partition " + partitions + ")"));
  }
  // External feeds return results through the queue only; file output is
  // one result per line.
  for (size_t i = 0; i < results.size() && !external_; ++i) {
    if (results[i].find('\n') != std::string_view::npos) {
      return Status::InvalidArgument("batch_results: result " + std::to_string(i) +
                                     " contains a newline; results are written one per line");
    }
  }
  size_t first = 0;
  for (const Piece& piece : unanswered_) {
    DROVER_RETURN_IF_ERROR(NoteStop(WriteResults(piece, results, first)));
    first += piece.info.record_count;
  }
  unanswered_.clear();
  return Status::Ok();
}

bool ShmDataFeed::ShouldStop() const {
  if (terminated_ || ended_) return true;
  const RunState state = channel_.state();
  // A stop without a reason is the agent's own, after the program's end.
  if (state == RunState::kStopped) return stop_reported_ || channel_.error().empty();
  if (state != RunState::kRunning) return true;
  return !current_ && input_.closed_and_drained();
}

void ShmDataFeed::Terminate() {
  terminated_ = true;
  channel_.AdvanceState(RunState::kTerminating);
  current_.reset();
  unanswered_.clear();
  input_.DiscardAll();
}

Result<std::optional<FeedPosition>> ShmDataFeed::Commit() {
  if (external_) {
    return Status::FailedPrecondition(
        "commit: a feed from drover.Cluster.train has no commit points; they are for "
        "`drover run --input` training");
  }
  if (inference_) {
    return Status::FailedPrecondition(
        "commit: commit points are for training; inference answers every record once");
  }
  if (Status sent = feed::SendMessage(socket_.get(), feed::EncodeCommitRequest(handed_));
      !sent.ok()) {
    return Status::Unavailable("commit: the agent of " + grant_.task +
                               " is gone: " + sent.message());
  }
  std::string line;
  os::UniqueFd none;
  if (Status received =
          feed::ReceiveMessage(socket_.get(), Clock::now() + kCommitTimeout, &line, &none);
      !received.ok()) {
    return Status::Unavailable("commit: the agent of " + grant_.task +
                               " did not answer: " + received.message());
  }
  std::optional<FeedPosition> position;
  DROVER_RETURN_IF_ERROR(feed::DecodeCommitAnswer(line, &position));
  return position;
}

}  // namespace

Result<RecordBatch> DataFeed::NextBatch(size_t max_records) {
  RecordBatch batch;
  DROVER_RETURN_IF_ERROR(NextBatch(max_records, &batch));
  return batch;
}

Result<std::unique_ptr<DataFeed>> DataFeed::Connect(const Environment& env,
                                                    DataFeedOptions options) {
  std::string path = options.socket_path;
  if (path.empty()) {
    std::optional<std::string> value = env.Get(kFeedSocketVariable);
    if (!value || value->empty()) {
      return Status::NotFound(
          std::string(kFeedSocketVariable) +
          " is not set: this program was not started by `drover run --input ...`, or runs on a "
          "node that is not fed (drover feeds chief, master and worker nodes)");
    }
    path = *std::move(value);
  }
  DROVER_ASSIGN_OR_RETURN(feed::JoinedFeed joined,
                          feed::JoinFeed(path, feed::FeedRole::kReader, options.train_mode,
                                         Clock::now() + kConnectTimeout));
  // An external feed (drover.Cluster.train / inference) leaves the mode to
  // the program.
  const bool inference_run = joined.grant.mode == "inference";
  if (joined.grant.mode != "external" && inference_run == options.train_mode) {
    return Status::InvalidArgument(
        inference_run ? "this run feeds for inference (drover run --mode inference): read it "
                        "with train_mode=false and answer with batch_results"
                      : "this run feeds for training: read it with train_mode=true");
  }
  std::chrono::milliseconds timeout = options.timeout.count() > 0
                                          ? options.timeout
                                          : std::chrono::milliseconds(joined.grant.feed_timeout_ms);
  auto feed = std::make_unique<ShmDataFeed>(std::move(joined), options.train_mode, timeout);
  DROVER_RETURN_IF_ERROR(feed->Resume());
  return std::unique_ptr<DataFeed>(std::move(feed));
}

}  // namespace drover

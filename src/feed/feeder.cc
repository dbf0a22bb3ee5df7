#include "feed/feeder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>

#include "feed/ingest_choice.h"
#include "feed/record_index.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "os/duration_text.h"

namespace drover::feed {
namespace {

constexpr auto kJoinTimeout = std::chrono::seconds(30);

// Where to start: the first feed and, in it, the first record and offset.
struct StartPoint {
  size_t feed = 0;
  uint64_t record = 0;
  std::optional<uint64_t> offset;  // nullopt: the partition's begin
};

Result<StartPoint> StartAfter(const std::optional<CommitPoint>& commit, size_t feeds) {
  StartPoint start;
  if (!commit) return start;
  if (commit->feed_seq >= feeds) {
    return Status::Internal("the feed queue's commit point names feed " +
                            std::to_string(commit->feed_seq) + " of " + std::to_string(feeds));
  }
  if (commit->flags & kEndOfPartition) {
    start.feed = commit->feed_seq + 1;
  } else {
    start.feed = commit->feed_seq;
    start.record = commit->records_through;
    start.offset = commit->source_offset;
  }
  return start;
}

// Where a share starts from its program's last commit in an earlier round
// (the plan's start; the queue is new and holds no commit point).
Result<StartPoint> StartAtPosition(const FeedPlan& plan, const std::vector<FeedUnit>& feeds,
                                   const FeedPosition& position) {
  if (position.feed >= feeds.size()) {
    return Status::InvalidArgument("the plan's start names feed " + std::to_string(position.feed) +
                                   " of " + std::to_string(feeds.size()));
  }
  StartPoint start;
  if (position.done) {
    start.feed = position.feed + 1;
    return start;
  }
  const Partition& partition = plan.partitions[static_cast<size_t>(feeds[position.feed].partition)];
  DROVER_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets,
                          RecordOffsets(partition, plan.read, {position.record}));
  start.feed = position.feed;
  start.record = position.record;
  start.offset = offsets.front();
  return start;
}

class BatchWriter {
 public:
  // record_bytes > 0: every record has that size (raw fixed-length input)
  // and goes without a length prefix.
  BatchWriter(ShmChannel& channel, size_t batch_bytes, std::chrono::milliseconds timeout,
              uint32_t record_bytes)
      : ring_(channel, /*input_ring=*/true),
        ring_capacity_(channel.ring_bytes()),
        batch_bytes_(std::min<size_t>(batch_bytes, channel.max_batch_bytes() / 4)),
        timeout_(timeout),
        prefix_bytes_(record_bytes > 0 ? 0 : sizeof(uint32_t)),
        fixed_flags_(record_bytes > 0 ? kFixedSizeRecords : 0) {
    info_.record_bytes = record_bytes;
  }

  // Waits until the queue has room for a batch (and keeps it reserved).
  Status WaitForRoom() { return Reserve(batch_bytes_); }
  // Where the next batch goes in the queue.
  uint64_t position() const { return ring_.write_position(); }
  // Waits until the program is done with every batch before `position`.
  Status WaitForProgram(uint64_t position) { return ring_.WaitForRelease(position, timeout_); }
  // Where the program released the queue up to.
  uint64_t released_position() const { return ring_.released_position(); }
  Status Begin(const BatchInfo& info) {
    const uint32_t record_bytes = info_.record_bytes;
    info_ = info;
    info_.record_bytes = record_bytes;
    info_.record_count = 0;
    used_ = 0;
    return Reserve(batch_bytes_);
  }
  // Appends a record, publishing the batch first when it is full.
  Status Append(std::string_view record, uint64_t offset_before) {
    const size_t need = prefix_bytes_ + record.size();
    if (used_ + need > reserved_) DROVER_RETURN_IF_ERROR(NextBatch(offset_before, need));
    if (prefix_bytes_ > 0) {
      uint32_t length = static_cast<uint32_t>(record.size());
      std::memcpy(space_ + used_, &length, sizeof(length));
    }
    std::memcpy(space_ + used_ + prefix_bytes_, record.data(), record.size());
    used_ += need;
    ++info_.record_count;
    return Status::Ok();
  }
  // Fixed-size records: how many more fit the reserved batch.
  size_t free_records() const {
    return info_.record_bytes == 0 ? 0 : (reserved_ - used_) / info_.record_bytes;
  }
  // Publishes the batch so far (if any) and reserves the next.
  Status NextBatch(uint64_t offset_before, size_t at_least) {
    if (info_.record_count > 0) {
      Publish(0, offset_before);
      info_.first_record += info_.record_count;
      info_.record_count = 0;
    }
    return Reserve(std::max(batch_bytes_, at_least));
  }
  // Appends `count` fixed-size records that fit (count <= free_records()).
  void AppendRun(std::string_view run, size_t count) {
    std::memcpy(space_ + used_, run.data(), run.size());
    AppendedInPlace(count);
  }
  // Where free_records() records can be written in place.
  char* free_space() { return space_ + used_; }
  // Counts `count` fixed-size records written at free_space().
  void AppendedInPlace(size_t count) {
    used_ += count * info_.record_bytes;
    info_.record_count += static_cast<uint32_t>(count);
  }
  void Publish(uint32_t flags, uint64_t source_offset) {
    BatchInfo info = info_;
    info.flags = flags | fixed_flags_;
    ring_.Commit(info, used_, source_offset);
    bytes_ += used_;
    used_ = 0;
    reserved_ = 0;
  }
  // Fixed-size records: how many go in one extent batch.
  size_t extent_records() const {
    return std::max<size_t>(1, batch_bytes_ / std::max<uint32_t>(1, info_.record_bytes));
  }
  // Publishes what the batch holds, then `count` records at `extent` (in
  // the partition, right after them) as one kFileExtent batch, with `flags`
  // (kEndOfPartition for the partition's last records). Waits first while
  // the records the program has not released would exceed the queue's size:
  // in place or not, a node holds at most its queue ahead.
  Status PublishExtent(const FileExtent& extent, uint32_t count, uint32_t flags) {
    const uint64_t record_bytes = uint64_t{count} * info_.record_bytes;
    DROVER_RETURN_IF_ERROR(WaitForExtentRoom(record_bytes));
    if (info_.record_count > 0) {
      Publish(0, extent.offset);
      info_.first_record += info_.record_count;
      info_.record_count = 0;
    }
    const size_t payload = FileExtentBytes(extent.path);
    DROVER_ASSIGN_OR_RETURN(char* space, ring_.Reserve(payload, Clock::now() + timeout_));
    EncodeFileExtent(extent, space);
    BatchInfo info = info_;
    info.record_count = count;
    info.flags = kFileExtent | flags;
    ring_.Commit(info, payload, extent.offset + record_bytes);
    info_.first_record += count;
    bytes_ += record_bytes;
    extents_.push_back({ring_.write_position(), record_bytes});
    extent_bytes_ += record_bytes;
    // The invariant of the bytes path: a batch is reserved.
    return Reserve(batch_bytes_);
  }
  void Close() { ring_.Close(); }
  void SayIngest(Ingest ingest) { ring_.SayIngest(IngestWord(ingest)); }
  // Record bytes published (in the queue or as extents).
  uint64_t bytes() const { return bytes_; }
  const BatchInfo& info() const { return info_; }

 private:
  Status WaitForExtentRoom(uint64_t record_bytes) {
    for (;;) {
      const uint64_t released = ring_.released_position();
      while (!extents_.empty() && extents_.front().end <= released) {
        extent_bytes_ -= extents_.front().record_bytes;
        extents_.pop_front();
      }
      if (extents_.empty() || extent_bytes_ + record_bytes <= ring_capacity_) return Status::Ok();
      DROVER_RETURN_IF_ERROR(ring_.WaitForRelease(extents_.front().end, timeout_));
    }
  }
  Status Reserve(size_t bytes) {
    Result<char*> space = ring_.Reserve(bytes, Clock::now() + timeout_);
    if (!space.ok()) return space.status();
    space_ = *space;
    reserved_ = bytes;
    used_ = 0;
    return Status::Ok();
  }

  // A published extent batch: where it ends in the queue, what it holds.
  struct ExtentInFlight {
    uint64_t end;
    uint64_t record_bytes;
  };

  RingWriter ring_;
  const uint64_t ring_capacity_;
  std::deque<ExtentInFlight> extents_;  // not yet released by the program
  uint64_t extent_bytes_ = 0;           // their records
  size_t batch_bytes_;
  std::chrono::milliseconds timeout_;
  const size_t prefix_bytes_;
  const uint32_t fixed_flags_;
  BatchInfo info_;
  char* space_ = nullptr;
  size_t reserved_ = 0;
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

// Up to free_records() fixed-size records from `reader` into the batch, the
// way `choice` says (map or read); how many (0 at the partition's end).
Result<size_t> IngestRun(RecordReader& reader, BatchWriter& writer, IngestChoice& choice) {
  const Clock::time_point start = Clock::now();
  size_t count;
  if (choice.way() == Ingest::kRead) {
    DROVER_ASSIGN_OR_RETURN(count, reader.ReadRunInto(writer.free_records(), writer.free_space()));
    writer.AppendedInPlace(count);
  } else {
    std::string_view run;
    DROVER_ASSIGN_OR_RETURN(count, reader.NextRun(writer.free_records(), &run));
    if (count > 0) writer.AppendRun(run, count);  // an empty run may have no data()
  }
  choice.Took(Clock::now() - start, count * writer.info().record_bytes);
  return count;
}

// The file a partition's records are in, as a program finds it again: an
// absolute path without symbolic links, and its device and inode.
struct ExtentFile {
  std::string path;
  uint64_t device = 0;
  uint64_t inode = 0;
  os::UniqueFd fd;  // for read-ahead advice
};

Result<ExtentFile> OpenExtentFile(const std::string& path) {
  ExtentFile file;
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) {
    return Status::IoError("cannot resolve " + path + ": " + std::strerror(errno));
  }
  file.path = resolved;
  file.fd = os::UniqueFd(::open(resolved, O_RDONLY | O_CLOEXEC));
  struct stat info {};
  if (!file.fd.valid() || ::fstat(file.fd.get(), &info) != 0) {
    return Status::IoError("cannot open " + file.path + ": " + std::strerror(errno));
  }
  file.device = static_cast<uint64_t>(info.st_dev);
  file.inode = static_cast<uint64_t>(info.st_ino);
  return file;
}

}  // namespace

namespace {

// Where a node's feeds come from: its share of the plan, fixed before the
// run, or claimed one at a time from the driver's queue through the agent
// (a dynamic plan).
class FeedSource {
 public:
  FeedSource(const FeederOptions& options, int socket) : options_(options), socket_(socket) {}

  Status Init() {
    if (dynamic()) return Status::Ok();
    DROVER_ASSIGN_OR_RETURN(feeds_, FeedsOfShare(options_.plan, options_.share, options_.shares));
    return Status::Ok();
  }
  bool dynamic() const { return options_.plan.balance == Balance::kDynamic; }
  // How many feeds the share has; a dynamic share's count is open.
  size_t count() const { return dynamic() ? std::numeric_limits<uint32_t>::max() : feeds_.size(); }
  // Feed `seq`, or nullopt after the last.
  Result<std::optional<FeedUnit>> At(size_t seq) {
    if (!dynamic()) return seq < feeds_.size() ? std::optional(feeds_[seq]) : std::nullopt;
    constexpr auto kClaimTimeout = std::chrono::seconds(60);
    Result<std::optional<FeedUnit>> unit =
        ClaimFeed(socket_, static_cast<uint32_t>(seq), Clock::now() + kClaimTimeout);
    if (!unit.ok()) return unit.status().WithContext("claiming " + options_.task + "'s next feed");
    const FeedPlan& plan = options_.plan;
    if (*unit && ((*unit)->epoch >= plan.epochs ||
                  static_cast<size_t>((*unit)->partition) >= plan.partitions.size())) {
      return Status::Internal("the agent handed out epoch " + std::to_string((*unit)->epoch) +
                              ", partition " + std::to_string((*unit)->partition) +
                              ", which the plan does not have");
    }
    return unit;
  }

 private:
  const FeederOptions& options_;
  const int socket_;
  std::vector<FeedUnit> feeds_;
};

Result<FeederReport> FeedShare(const FeederOptions& options, JoinedFeed& joined) {
  const FeedPlan& plan = options.plan;
  ShmChannel& channel = joined.channel;
  FeedSource source(options, joined.socket.get());
  DROVER_RETURN_IF_ERROR(source.Init());
  RingWriter probe(channel, /*input_ring=*/true);
  DROVER_ASSIGN_OR_RETURN(std::optional<CommitPoint> commit, probe.LastCommit());
  const std::optional<FeedPosition> committed =
      static_cast<size_t>(options.share) < plan.starts.size()
          ? plan.starts[static_cast<size_t>(options.share)]
          : std::nullopt;
  StartPoint start;
  if (commit || !committed) {
    DROVER_ASSIGN_OR_RETURN(start, StartAfter(commit, source.count()));
  } else {
    DROVER_ASSIGN_OR_RETURN(std::vector<FeedUnit> feeds,
                            FeedsOfShare(plan, options.share, options.shares));
    DROVER_ASSIGN_OR_RETURN(start, StartAtPosition(plan, feeds, *committed));
  }

  FeederReport report;
  report.resumed = commit.has_value() || committed.has_value();
  const std::chrono::milliseconds timeout(plan.feed_timeout_ms);
  const bool fixed_size = plan.read.format == RecordFormat::kRaw && plan.read.record_bytes > 0 &&
                          plan.read.record_bytes <= UINT32_MAX;
  BatchWriter writer(channel, options.batch_bytes, timeout,
                     fixed_size ? static_cast<uint32_t>(plan.read.record_bytes) : 0);
  IngestChoice ingest(options.plan.ingest, options.ingest_probe_bytes);
  // CSV, JSONL, TFRecord and whole files: their windows are mapped or read,
  // as measured or as the plan says.
  const bool windowed = !fixed_size;
  WindowChoice windows(windowed ? plan.ingest : Ingest::kMap, options.ingest_probe_bytes);
  // The agent shows the way in its heartbeats: measure until chosen.
  if (fixed_size) writer.SayIngest(ingest.chosen());
  if (windowed) writer.SayIngest(windows.chosen());
  // Said once chosen: while records go (the per-record check is a flag), or
  // after a partition, whose last window ends with its reader.
  bool windows_said = windows.chosen() != Ingest::kMeasure;
  auto say_windows = [&] {
    if (windows_said || windows.chosen() == Ingest::kMeasure) return;
    windows_said = true;
    writer.SayIngest(windows.chosen());
    if (options.notice) options.notice(windows.Describe());
  };
  // After each batch of fixed-size records: the measurement sees how far
  // the program got, and a choice it made is said once.
  bool choice_said = plan.ingest != Ingest::kMeasure;
  auto published_more = [&] {
    ingest.Published(writer.position(), writer.bytes(), writer.released_position(), Clock::now());
    if (choice_said || ingest.Name().empty()) return;
    choice_said = true;
    writer.SayIngest(ingest.chosen());
    if (options.notice) options.notice(ingest.Describe());
  };
  // A failed Reserve: the program terminated the feed, took nothing for the
  // feed timeout (waiting inside a partition or before the next one), or the
  // channel stopped.
  // `what`: the partition being fed, or what the feeder waited for.
  auto stopped = [&](const Status& status, const std::string& what) -> Result<FeederReport> {
    if (channel.state() == RunState::kTerminating) {
      report.terminated = true;
      return report;
    }
    if (status.code() == Status::Code::kDeadlineExceeded) {
      return Status::DeadlineExceeded("feed timeout: " + options.task + " took no record for " +
                                      os::SecondsText(timeout) + " while " + what +
                                      " was being fed");
    }
    return status.WithContext(what);
  };

  // Dynamic: where the last claimed partition begins in the queue.
  std::optional<uint64_t> last_claimed_at;
  for (size_t seq = start.feed;; ++seq) {
    // A dynamic feed claims its next partition only once its program is done
    // with the partitions before the last one it claimed and the queue has
    // room: at most two partitions of a node are queued, so a slow node
    // leaves the rest to the others, and the node whose feeder starts first
    // does not take every small partition before the others start.
    if (source.dynamic()) {
      Status done = last_claimed_at ? writer.WaitForProgram(*last_claimed_at) : Status::Ok();
      if (!done.ok()) return stopped(done, "its next partition");
      Status room = writer.WaitForRoom();
      if (!room.ok()) return stopped(room, "its next partition");
    }
    DROVER_ASSIGN_OR_RETURN(const std::optional<FeedUnit> claimed, source.At(seq));
    if (!claimed) break;
    last_claimed_at = writer.position();
    const FeedUnit& unit = *claimed;
    const Partition& partition = plan.partitions[static_cast<size_t>(unit.partition)];
    const bool resuming = seq == start.feed && start.offset.has_value();
    uint64_t offset = resuming ? *start.offset : partition.begin;
    if (!resuming && unit.first_record > 0) {
      DROVER_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets,
                              RecordOffsets(partition, plan.read, {unit.first_record}));
      offset = offsets.front();
    }
    // The commit point lives in memory the program can write.
    if (offset < partition.begin || offset > partition.end) {
      return Status::Internal("the reader corrupted the queue header: the commit point's offset " +
                              std::to_string(offset) + " is outside " + partition.Name());
    }
    DROVER_ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader,
                            RecordReader::Open(partition, plan.read, offset, windows));
    BatchInfo info;
    info.feed_seq = static_cast<uint32_t>(seq);
    info.partition = static_cast<uint32_t>(unit.partition);
    info.epoch = static_cast<uint32_t>(unit.epoch);
    info.first_record = resuming ? start.record : unit.first_record;
    Status begun = writer.Begin(info);
    if (!begun.ok()) return stopped(begun, partition.Name());
    // Fixed-size records: copied into the queue, or queued as extents of
    // the file. `offset` is where the next record is, whichever way.
    std::optional<ExtentFile> extent_file;
    bool ended = false;  // the last extent carried the partition's end
    while (fixed_size && !ended) {
      const uint64_t whole = (partition.end - offset) / plan.read.record_bytes;
      const Ingest way = ingest.way();
      if ((way == Ingest::kExtent || way == Ingest::kExtentRead) && whole > 0) {
        if (!extent_file) {
          DROVER_ASSIGN_OR_RETURN(extent_file, OpenExtentFile(partition.path));
        }
        const auto count =
            static_cast<uint32_t>(std::min<uint64_t>(whole, writer.extent_records()));
        const uint64_t length = uint64_t{count} * plan.read.record_bytes;
        const Clock::time_point start = Clock::now();
        // The program reads these pages next: have them read in meanwhile.
        ::posix_fadvise(extent_file->fd.get(), static_cast<off_t>(offset),
                        static_cast<off_t>(length), POSIX_FADV_WILLNEED);
        // The partition's last records carry its end: no empty batch after
        // them, which the program would have to answer in inference.
        ended = offset + length == partition.end;
        Status extent_published = writer.PublishExtent(
            {extent_file->path, extent_file->device, extent_file->inode, offset}, count,
            (ended ? kEndOfPartition : 0) | (way == Ingest::kExtentRead ? kReadExtent : 0));
        if (!extent_published.ok()) return stopped(extent_published, partition.Name());
        offset += length;
        report.records += count;
        ingest.Took(Clock::now() - start, length);
        published_more();
        continue;
      }
      // Copied: the reader picks up where the extents left off (and ends
      // the partition, or finds a cut-short record at its end).
      if (reader->next_offset() != offset) {
        DROVER_ASSIGN_OR_RETURN(reader, RecordReader::Open(partition, plan.read, offset));
      }
      if (writer.free_records() == 0) {
        Status next = writer.NextBatch(offset, plan.read.record_bytes);
        if (!next.ok()) return stopped(next, partition.Name());
        published_more();
        continue;
      }
      DROVER_ASSIGN_OR_RETURN(size_t count, IngestRun(*reader, writer, ingest));
      offset = reader->next_offset();
      if (count == 0) break;
      report.records += count;
    }
    while (!fixed_size) {
      std::string_view record;
      const uint64_t before = reader->next_offset();
      Result<bool> more = reader->Next(&record);
      if (!more.ok()) return more.status();
      if (!*more) break;
      Status appended = writer.Append(record, before);
      if (!appended.ok()) return stopped(appended, partition.Name());
      ++report.records;
      say_windows();
    }
    if (!ended) writer.Publish(kEndOfPartition, reader->next_offset());
    reader.reset();
    say_windows();
  }
  writer.Close();
  report.bytes = writer.bytes();
  report.finished = true;
  if (fixed_size) report.ingest = ingest.Name();
  if (windowed) report.ingest = windows.Name();
  return report;
}

}  // namespace

Result<FeederReport> RunFeeder(const FeederOptions& options) {
  DROVER_ASSIGN_OR_RETURN(JoinedFeed joined, JoinFeed(options.socket_path, FeedRole::kWriter, true,
                                                      Clock::now() + kJoinTimeout));
  Result<FeederReport> report = FeedShare(options, joined);
  // A feeding error is the reader's error too; a stop already has its reason.
  if (!report.ok() && joined.channel.state() == RunState::kRunning) {
    joined.channel.SetError(report.status().message());
  }
  return report;
}

}  // namespace drover::feed

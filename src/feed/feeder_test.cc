#include "feed/feeder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "drover/data_feed.h"
#include "feed/feed_plan.h"
#include "feed/feed_test_util.h"
#include "feed/record_io.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "testing/child_process.h"
#include "testing/status_matchers.h"

namespace drover::feed {
namespace {

using ::drover::feed::testing::ExitedWith;
using ::drover::feed::testing::In;
using ::drover::feed::testing::PublishBatch;
using ::drover::feed::testing::RecordsOf;
using ::drover::feed::testing::StopAndJoin;
using ::drover::feed::testing::TestAgent;
using ::drover::feed::testing::WriteFile;
using ::drover::testing::Child;
using ::drover::testing::ChildBody;
using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Code = Status::Code;
using std::chrono::milliseconds;
using std::chrono::seconds;

// CSV lines "<id>,<filler>" with ids first..first+count-1 and lengths that
// vary with the id.
std::string CsvLines(int first, int count) {
  std::string text;
  for (int id = first; id < first + count; ++id) {
    text +=
        std::to_string(id) + "," + std::string(static_cast<size_t>(id * 37 % 90), 'a' + id % 26);
    text += "\n";
  }
  return text;
}

int IdOf(std::string_view record) {
  return std::stoi(std::string(record.substr(0, record.find(','))));
}

// What a reader of the input ring saw.
struct Seen {
  std::vector<BatchInfo> batches;
  // records[feed_seq]: the records of each feed, in order.
  std::map<uint32_t, std::vector<std::string>> records;
  std::map<uint32_t, bool> ended;  // feed_seq -> saw kEndOfPartition
  bool closed = false;
};

// Checks one batch against the plan's feeds; appends its records.
void Accept(const BatchView& batch, const std::vector<FeedUnit>& feeds, Seen* seen) {
  const BatchInfo& info = batch.info;
  ASSERT_LT(info.feed_seq, feeds.size());
  if (!seen->batches.empty()) {
    const BatchInfo& last = seen->batches.back();
    if (info.feed_seq != last.feed_seq) {
      ASSERT_EQ(info.feed_seq, last.feed_seq + 1) << "a feed was skipped";
      ASSERT_TRUE(last.flags & kEndOfPartition) << "feed " << last.feed_seq << " did not end";
    } else {
      ASSERT_FALSE(last.flags & kEndOfPartition) << "a batch after the end of its partition";
    }
  }
  const FeedUnit& unit = feeds[info.feed_seq];
  EXPECT_EQ(info.partition, static_cast<uint32_t>(unit.partition));
  EXPECT_EQ(info.epoch, static_cast<uint32_t>(unit.epoch));
  std::vector<std::string>& records = seen->records[info.feed_seq];
  ASSERT_EQ(info.first_record, records.size()) << "a gap or a repeat in feed " << info.feed_seq;
  for (std::string& record : RecordsOf(batch)) records.push_back(std::move(record));
  if (info.flags & kEndOfPartition) seen->ended[info.feed_seq] = true;
  seen->batches.push_back(info);
}

// Reads the input ring until it is closed and drained, or until
// `stop(idle)` returns true; it is asked after every batch (idle false) and
// whenever nothing arrived for 50 ms (idle true).
template <typename Stop>
void ReadAll(RingReader& reader, const std::vector<FeedUnit>& feeds, Seen* seen, Stop stop) {
  const Deadline give_up = In(seconds(60));
  for (;;) {
    ASSERT_LT(Clock::now(), give_up) << "the feed never ended";
    Result<std::optional<BatchView>> batch = reader.Next(In(milliseconds(50)));
    if (!batch.ok()) {
      ASSERT_THAT(batch, StatusIs(Code::kDeadlineExceeded, ::testing::_));
      if (stop(/*idle=*/true)) return;
      continue;
    }
    if (!batch->has_value()) {
      seen->closed = reader.closed_and_drained();
      return;
    }
    ASSERT_NO_FATAL_FAILURE(Accept(**batch, feeds, seen));
    reader.Release((*batch)->end);
    if (stop(/*idle=*/false)) return;
  }
}

// For ReadAll: what is queued now.
bool WhenIdle(bool idle) {
  return idle;
}

class FeederTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    // 900 records in three files (and an empty one, which gives no partition).
    WriteFile(dir_.File("a.csv"), CsvLines(0, 400));
    std::string b = CsvLines(400, 350);
    b.pop_back();  // a last line without '\n' is a record too
    WriteFile(dir_.File("b.csv"), b);
    WriteFile(dir_.File("c.csv"), CsvLines(750, 150));
    WriteFile(dir_.File("d.csv"), "");
    total_records_ = 900;
  }

  // Plans the CSV files in partitions of about `split_bytes`.
  FeedPlan CsvPlan(uint64_t split_bytes, int epochs) {
    PlanOptions read;
    read.format = RecordFormat::kCsv;
    read.split_bytes = split_bytes;
    Result<std::vector<Partition>> partitions = PlanPartitions({dir_.File("*.csv")}, read);
    EXPECT_OK(partitions);
    FeedPlan plan;
    plan.read = read;
    plan.read.split_bytes = 0;
    plan.epochs = epochs;
    plan.feed_timeout_ms = 20'000;
    if (partitions.ok()) plan.partitions = *partitions;
    return plan;
  }

  // A channel of `ring_bytes` per ring served for `plan`.
  void Serve(const FeedPlan& plan, uint64_t ring_bytes) {
    Result<ShmChannel> channel = ShmChannel::Create(ring_bytes);
    ASSERT_OK(channel);
    channel_ = std::make_unique<ShmChannel>(std::move(channel).value());
    FeedGrant grant;
    grant.mode = plan.mode == FeedMode::kInference ? "inference" : "train";
    grant.format = std::string(RecordFormatName(plan.read.format));
    grant.record_bytes = plan.read.record_bytes;
    grant.feed_timeout_ms = plan.feed_timeout_ms;
    grant.task = "worker:0";
    for (const Partition& partition : plan.partitions) grant.partitions.push_back(partition.Name());
    agent_ = std::make_unique<TestAgent>(*channel_, grant, dir_.path());
    ASSERT_EQ(agent_->error(), "");
  }

  FeederOptions Options(const FeedPlan& plan, int share = 0, int shares = 1) {
    FeederOptions options;
    options.socket_path = agent_->socket_path();
    options.plan = plan;
    options.share = share;
    options.shares = shares;
    options.task = "worker:0";
    options.batch_bytes = 2048;
    return options;
  }

  // Feeds the whole of `plan` into a new queue, its records taken in the
  // `ingest` way (probes of `probe_bytes` to measure), while reading it all
  // into *seen; the feeder's report and notices.
  void FeedOnANewQueue(const FeedPlan& plan, Ingest ingest, size_t probe_bytes, Seen* seen,
                       Result<FeederReport>* report, std::vector<std::string>* notices = nullptr) {
    agent_.reset();  // the last one's, before the channel it serves
    channel_.reset();
    ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
    RingReader reader(*channel_, /*input_ring=*/true);
    FeederOptions options = Options(plan);
    options.plan.ingest = ingest;
    options.ingest_probe_bytes = probe_bytes;
    if (notices != nullptr) {
      options.notice = [notices](const std::string& line) { notices->push_back(line); };
    }
    std::atomic<bool> done{false};
    std::thread feeder([&] {
      *report = RunFeeder(options);
      done = true;
    });
    StopAndJoin stop_and_join(*channel_, feeder);
    ReadAll(reader, FeedsOfShare(plan, 0, 1).value(), seen,
            [&](bool idle) { return idle && done.load(); });
    feeder.join();
  }

  // Every record of `partition`, read directly.
  std::vector<std::string> RecordsOf(const FeedPlan& plan, const Partition& partition) {
    std::vector<std::string> records;
    Result<std::unique_ptr<RecordReader>> reader =
        RecordReader::Open(partition, plan.read, partition.begin);
    EXPECT_OK(reader);
    if (!reader.ok()) return records;
    std::string_view record;
    for (;;) {
      Result<bool> more = (*reader)->Next(&record);
      EXPECT_OK(more);
      if (!more.ok() || !*more) break;
      records.emplace_back(record);
    }
    return records;
  }

  // Every feed of the share arrived whole, in order, exactly once; and each
  // record id of those partitions once per epoch.
  void ExpectExactlyOnce(const FeedPlan& plan, const Seen& seen, int share = 0, int shares = 1) {
    const std::vector<FeedUnit> feeds = FeedsOfShare(plan, share, shares).value();
    EXPECT_TRUE(seen.closed);
    ASSERT_EQ(seen.records.size(), feeds.size());
    std::map<int, std::map<int, int>> ids;  // epoch -> id -> count
    std::set<int> expected_ids;
    for (uint32_t seq = 0; seq < feeds.size(); ++seq) {
      const Partition& partition = plan.partitions[static_cast<size_t>(feeds[seq].partition)];
      EXPECT_TRUE(seen.ended.count(seq)) << "feed " << seq << " never ended";
      ASSERT_TRUE(seen.records.count(seq));
      const std::vector<std::string>& records = seen.records.at(seq);
      EXPECT_EQ(records, RecordsOf(plan, partition)) << partition.Name();
      for (const std::string& record : records) {
        ++ids[feeds[seq].epoch][IdOf(record)];
        expected_ids.insert(IdOf(record));
      }
    }
    EXPECT_EQ(ids.size(), static_cast<size_t>(plan.epochs));
    for (const auto& [epoch, counts] : ids) {
      EXPECT_EQ(counts.size(), expected_ids.size()) << "epoch " << epoch;
      for (const auto& [id, count] : counts) {
        EXPECT_EQ(count, 1) << "record " << id << " in epoch " << epoch;
      }
    }
  }

  TempDir dir_;
  int total_records_ = 0;
  std::unique_ptr<ShmChannel> channel_;
  std::unique_ptr<TestAgent> agent_;
};

TEST_F(FeederTest, FeedsEveryRecordOncePerEpoch) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/4000, /*epochs=*/2);
  ASSERT_GT(plan.partitions.size(), 6u);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  RingReader reader(*channel_, /*input_ring=*/true);

  Result<FeederReport> report = Status::Internal("not run");
  std::atomic<bool> done{false};
  std::thread feeder([&] {
    report = RunFeeder(Options(plan));
    done = true;
  });
  StopAndJoin stop_and_join(*channel_, feeder);
  Seen seen;
  ReadAll(reader, FeedsOfShare(plan, 0, 1).value(), &seen,
          [&](bool idle) { return idle && done.load(); });
  feeder.join();

  ASSERT_OK(report);
  EXPECT_TRUE(report->finished);
  EXPECT_FALSE(report->resumed);
  EXPECT_FALSE(report->terminated);
  EXPECT_EQ(report->records, 2u * total_records_);
  EXPECT_GT(report->bytes, 0u);
  ExpectExactlyOnce(plan, seen);
  EXPECT_EQ(channel_->error(), "");
  ASSERT_EQ(agent_->hellos().size(), 1u);
  EXPECT_EQ(agent_->hellos()[0].role, FeedRole::kWriter);
}

// Fixed-size records reach the queue copied from a mapping or read(2) into
// it, or as extents of their file; each way, and when the feeder measures
// them and switches midway, every record arrives once, in order.
TEST_F(FeederTest, RawRecordsArriveTheSameMappedReadOrMeasured) {
  std::string raw;
  for (int id = 0; id < 3000; ++id) {
    char record[17];
    std::snprintf(record, sizeof(record), "%07d,abcdefgh", id);
    raw.append(record, 16);
  }
  WriteFile(dir_.File("a.raw"), raw.substr(0, 16 * 1000));
  WriteFile(dir_.File("b.raw"), raw.substr(16 * 1000));
  PlanOptions read;
  read.format = RecordFormat::kRaw;
  read.record_bytes = 16;
  read.split_bytes = 4800;  // 300 records per partition
  ASSERT_OK_AND_ASSIGN(std::vector<Partition> partitions,
                       PlanPartitions({dir_.File("*.raw")}, read));
  FeedPlan plan;
  plan.read = read;
  plan.read.split_bytes = 0;
  plan.epochs = 2;
  plan.feed_timeout_ms = 20'000;
  plan.partitions = partitions;
  for (Ingest ingest :
       {Ingest::kMap, Ingest::kRead, Ingest::kExtent, Ingest::kExtentRead, Ingest::kMeasure}) {
    SCOPED_TRACE(static_cast<int>(ingest));
    Seen seen;
    Result<FeederReport> report = Status::Internal("not run");
    // Measured over the first partitions.
    ASSERT_NO_FATAL_FAILURE(FeedOnANewQueue(plan, ingest, 20'000, &seen, &report));
    ASSERT_OK(report);
    EXPECT_EQ(report->records, 2u * 3000);
    ExpectExactlyOnce(plan, seen);
    // The ring's header says the way for the agent's heartbeats: the one
    // chosen, or measure while the probes went on.
    const std::optional<Ingest> said = IngestOfWord(ReadRingIngest(*channel_));
    ASSERT_TRUE(said.has_value());
    EXPECT_EQ(IngestName(*said), report->ingest.empty() ? "measure" : report->ingest);
    if (ingest == Ingest::kMeasure) {
      // Which way won is the host's; that every way delivers the same is
      // this test's point (ingest_choice_test checks the choosing).
      EXPECT_THAT(report->ingest, ::testing::AnyOf("map", "read", "extent", "extent-read", ""));
      continue;
    }
    EXPECT_EQ(report->ingest, IngestName(ingest));
    // Only extents the program is to read itself say so.
    for (const BatchInfo& info : seen.batches) {
      EXPECT_EQ((info.flags & kReadExtent) != 0, ingest == Ingest::kExtentRead);
      EXPECT_EQ((info.flags & kFileExtent) != 0,
                ingest == Ingest::kExtent || ingest == Ingest::kExtentRead);
    }
  }
}

// CSV (and JSONL, TFRecord) windows and whole-file raw records mapped,
// read, or measured: every record arrives once either way; measured, the
// feeder chooses once the probes of each way are done, says so once in its
// notice, and the ring's header says the way chosen.
TEST_F(FeederTest, WindowedFilesArriveTheSameMappedReadOrMeasured) {
  FeedPlan csv = CsvPlan(/*split_bytes=*/4000, /*epochs=*/3);
  // Twelve files of 3,000-5,000 bytes, a record each, named by their first field.
  FeedPlan whole_files;
  whole_files.read.format = RecordFormat::kRaw;
  whole_files.epochs = 3;
  whole_files.feed_timeout_ms = 20'000;
  for (int id = 0; id < 12; ++id) {
    const std::string path = dir_.File("file" + std::to_string(id) + ".bin");
    WriteFile(path, std::to_string(1000 + id) + "," + std::string(3000 + 170 * id, 'a' + id));
    ASSERT_OK_AND_ASSIGN(std::vector<Partition> partitions,
                         PlanPartitions({path}, whole_files.read));
    whole_files.partitions.push_back(partitions.at(0));
  }
  for (const auto& [plan, records] :
       {std::pair(csv, 3u * total_records_), std::pair(whole_files, 3u * 12)}) {
    for (Ingest ingest : {Ingest::kMap, Ingest::kRead, Ingest::kMeasure}) {
      SCOPED_TRACE(std::string(RecordFormatName(plan.read.format)) + " " +
                   std::string(IngestName(ingest)));
      Seen seen;
      Result<FeederReport> report = Status::Internal("not run");
      std::vector<std::string> notices;
      // A partition a probe: chosen after six.
      ASSERT_NO_FATAL_FAILURE(FeedOnANewQueue(plan, ingest, 3000, &seen, &report, &notices));
      ASSERT_OK(report);
      EXPECT_EQ(report->records, records);
      ExpectExactlyOnce(plan, seen);
      const std::optional<Ingest> said = IngestOfWord(ReadRingIngest(*channel_));
      ASSERT_TRUE(said.has_value());
      EXPECT_EQ(IngestName(*said), report->ingest);
      if (ingest != Ingest::kMeasure) {
        EXPECT_EQ(report->ingest, IngestName(ingest));
        EXPECT_THAT(notices, ::testing::IsEmpty());
        continue;
      }
      // Which way is cheaper is the host's (ingest_choice_test checks the
      // choosing); that it was chosen and said is this test's point.
      EXPECT_THAT(report->ingest, ::testing::AnyOf("map", "read"));
      ASSERT_EQ(notices.size(), 1u);
      EXPECT_THAT(notices[0], ::testing::HasSubstr(report->ingest == "map"
                                                       ? "files are mapped a window at a time"
                                                       : "files are read(2) a window at a time"));
    }
  }
}

TEST_F(FeederTest, FeedsOnlyItsShare) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/4000, /*epochs=*/1);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));  // holds everything: read afterwards
  ASSERT_OK_AND_ASSIGN(FeederReport report, RunFeeder(Options(plan, /*share=*/1, /*shares=*/2)));
  EXPECT_TRUE(report.finished);
  RingReader reader(*channel_, true);
  Seen seen;
  ReadAll(reader, FeedsOfShare(plan, 1, 2).value(), &seen, WhenIdle);
  ExpectExactlyOnce(plan, seen, 1, 2);
  for (const BatchInfo& info : seen.batches) EXPECT_EQ(info.partition % 2, 1u);
  EXPECT_LT(report.records, static_cast<uint64_t>(total_records_));
}

// A previous feeder published the first records of feed 0 and died.
TEST_F(FeederTest, ResumesAfterAPartialCommit) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/4000, /*epochs=*/2);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));
  const std::vector<FeedUnit> feeds = FeedsOfShare(plan, 0, 1).value();
  const Partition& first = plan.partitions[static_cast<size_t>(feeds[0].partition)];
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordReader> records,
                         RecordReader::Open(first, plan.read, first.begin));
    std::vector<std::string> published;
    std::string_view record;
    for (int i = 0; i < 7; ++i) {
      ASSERT_OK_AND_ASSIGN(bool more, records->Next(&record));
      ASSERT_TRUE(more);
      published.emplace_back(record);
    }
    RingWriter old_feeder(*channel_, true);
    BatchInfo info;
    info.feed_seq = 0;
    info.partition = static_cast<uint32_t>(feeds[0].partition);
    info.epoch = 0;
    ASSERT_OK(PublishBatch(old_feeder, info, published, records->next_offset()));
  }
  ASSERT_OK_AND_ASSIGN(FeederReport report, RunFeeder(Options(plan)));
  EXPECT_TRUE(report.resumed);
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(report.records, 2u * total_records_ - 7);

  RingReader reader(*channel_, true);
  Seen seen;
  ReadAll(reader, feeds, &seen, WhenIdle);
  ExpectExactlyOnce(plan, seen);
}

// A new round's feeder on a new queue starts at the share's last commit
// (the plan's start): mid-partition, or after a partition that was done.
TEST_F(FeederTest, StartsAtThePlansCommittedPosition) {
  FeedPlan plan = CsvPlan(/*split_bytes=*/4000, /*epochs=*/2);
  const std::vector<FeedUnit> feeds = FeedsOfShare(plan, 0, 1).value();
  ASSERT_GT(feeds.size(), 4u);
  for (const FeedPosition& start : {FeedPosition{3, 17, false}, FeedPosition{3, 0, true}}) {
    SCOPED_TRACE(FeedPositionToJson(start));
    plan.starts = {start};
    ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));
    ASSERT_OK_AND_ASSIGN(FeederReport report, RunFeeder(Options(plan)));
    EXPECT_TRUE(report.resumed);
    EXPECT_TRUE(report.finished);
    RingReader reader(*channel_, true);
    std::vector<BatchInfo> batches;
    std::vector<std::string> records;
    for (;;) {
      ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(5))));
      if (!batch) break;
      batches.push_back(batch->info);
      ForEachRecord(*batch, [&](std::string_view record) { records.emplace_back(record); });
      reader.Release(batch->end);
    }
    ASSERT_FALSE(batches.empty());
    const size_t first_feed = start.done ? start.feed + 1 : start.feed;
    EXPECT_EQ(batches.front().feed_seq, first_feed);
    EXPECT_EQ(batches.front().first_record, start.done ? 0u : start.record);
    std::vector<std::string> expected;
    for (size_t seq = first_feed; seq < feeds.size(); ++seq) {
      std::vector<std::string> all =
          RecordsOf(plan, plan.partitions[static_cast<size_t>(feeds[seq].partition)]);
      const size_t skip = seq == start.feed && !start.done ? start.record : 0;
      expected.insert(expected.end(), all.begin() + static_cast<ptrdiff_t>(skip), all.end());
    }
    EXPECT_EQ(records, expected);
    EXPECT_EQ(report.records, expected.size());
  }
}

TEST_F(FeederTest, RefusesAPlanStartOutsideTheShare) {
  FeedPlan plan = CsvPlan(/*split_bytes=*/4000, /*epochs=*/1);
  plan.starts = {FeedPosition{999, 0, false}};
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));
  EXPECT_THAT(RunFeeder(Options(plan)),
              StatusIs(Code::kInvalidArgument, HasSubstr("the plan's start names feed 999")));
}

// A previous feeder finished feed 0 (and the reader took it already).
TEST_F(FeederTest, ResumesAfterAFinishedPartition) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/4000, /*epochs=*/1);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));
  const std::vector<FeedUnit> feeds = FeedsOfShare(plan, 0, 1).value();
  const Partition& first = plan.partitions[static_cast<size_t>(feeds[0].partition)];
  const std::vector<std::string> first_records = RecordsOf(plan, first);
  RingReader reader(*channel_, true);
  Seen seen;
  {
    RingWriter old_feeder(*channel_, true);
    BatchInfo info;
    info.partition = static_cast<uint32_t>(feeds[0].partition);
    info.flags = kEndOfPartition;
    ASSERT_OK(PublishBatch(old_feeder, info, first_records, first.end));
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
    ASSERT_TRUE(batch.has_value());
    ASSERT_NO_FATAL_FAILURE(Accept(*batch, feeds, &seen));
    reader.Release(batch->end);
  }
  ASSERT_OK_AND_ASSIGN(FeederReport report, RunFeeder(Options(plan)));
  EXPECT_TRUE(report.resumed);
  EXPECT_EQ(report.records, total_records_ - first_records.size());
  ReadAll(reader, feeds, &seen, WhenIdle);
  ExpectExactlyOnce(plan, seen);
}

TEST_F(FeederTest, RefusesACommitPointOutsideThePlan) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/0, /*epochs=*/1);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));
  RingWriter other(*channel_, true);
  BatchInfo info;
  info.feed_seq = 99;
  ASSERT_OK(PublishBatch(other, info, {"x"}));
  EXPECT_THAT(RunFeeder(Options(plan)), StatusIs(Code::kInternal, HasSubstr("feed 99 of 3")));
}

// Issue #15: commit slots are in memory the program can write.
TEST_F(FeederTest, RefusesACommitOffsetOutsideItsPartition) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/0, /*epochs=*/1);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));
  RingWriter other(*channel_, true);
  BatchInfo info;
  info.partition = 0;
  ASSERT_OK(PublishBatch(other, info, {"x"}, /*source_offset=*/plan.partitions[0].end + 1));
  EXPECT_THAT(RunFeeder(Options(plan)),
              StatusIs(Code::kInternal, AllOf(HasSubstr("the reader corrupted the queue header"),
                                              HasSubstr(plan.partitions[0].Name()))));
}

// Issue #15: a reader that writes a read position it cannot have stops the
// feed with that reason (the agent reports it); the feeder never writes
// over unread batches nor outside the ring.
TEST_F(FeederTest, ReaderThatCorruptsItsReadPositionStopsTheFeeder) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/0, /*epochs=*/20);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  Result<FeederReport> report = Status::Internal("not run");
  std::thread feeder([&] { report = RunFeeder(Options(plan)); });
  StopAndJoin stop_and_join(*channel_, feeder);
  RingWriter probe(*channel_, true);
  // Only a feeder asleep on a full queue has stopped writing: the write
  // position read then is the last one before the corruption.
  auto writer_asleep = [&] {
    return testing::Peek<uint32_t>(channel_->fd(),
                                   testing::kInputRingHeader + testing::kWritersWaiting) != 0;
  };
  const Deadline give_up = In(seconds(20));
  while (Clock::now() < give_up &&
         (probe.unread_bytes() < channel_->max_batch_bytes() || !writer_asleep())) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(writer_asleep()) << "the feeder never waited for room";
  const uint64_t write_pos =
      testing::Peek<uint64_t>(channel_->fd(), testing::kInputRingHeader + testing::kWritePos);
  ASSERT_TRUE(testing::Scribble<uint64_t>(
      channel_->fd(), testing::kInputRingHeader + testing::kReadPos, write_pos + 4096));
  feeder.join();  // it re-checks at least every 100 ms
  EXPECT_THAT(report, StatusIs(Code::kInternal,
                               HasSubstr("the reader corrupted the queue header: read_pos " +
                                         std::to_string(write_pos + 4096))));
  EXPECT_THAT(channel_->error(), HasSubstr("the reader corrupted the queue header"));
  EXPECT_EQ(testing::Peek<uint64_t>(channel_->fd(), testing::kInputRingHeader + testing::kWritePos),
            write_pos);
}

// A feeder process, as the agent starts one: RunFeeder with the options
// FeederArg wrote (one field a line, the plan's JSON last).
const ChildBody kFeederProcess("feeder", [](const std::string& arg) {
  std::istringstream in(arg);
  FeederOptions options;
  std::string share, shares, batch_bytes, probe_bytes;
  std::getline(in, options.socket_path);
  std::getline(in, options.task);
  std::getline(in, share);
  std::getline(in, shares);
  std::getline(in, batch_bytes);
  std::getline(in, probe_bytes);
  const std::string plan_json((std::istreambuf_iterator<char>(in)), {});
  Result<FeedPlan> plan = FeedPlan::FromJson(plan_json);
  if (!plan.ok()) return 4;
  options.plan = std::move(plan).value();
  options.share = std::stoi(share);
  options.shares = std::stoi(shares);
  options.batch_bytes = std::stoul(batch_bytes);
  options.ingest_probe_bytes = std::stoul(probe_bytes);
  Result<FeederReport> report = RunFeeder(options);
  if (!report.ok()) return 2;
  return report->finished ? 0 : 3;
});

std::string FeederArg(const FeederOptions& options) {
  return options.socket_path + "\n" + options.task + "\n" + std::to_string(options.share) + "\n" +
         std::to_string(options.shares) + "\n" + std::to_string(options.batch_bytes) + "\n" +
         std::to_string(options.ingest_probe_bytes) + "\n" + options.plan.ToJson();
}

// The feeder is SIGKILLed at random points while the reader reads; the next
// feeder resumes after the last published batch. Every record arrives once.
// Each feeder measures how to take its windows in, in probes of about a
// partition, so kills land while windows switch between mapped and read.
TEST_F(FeederTest, KilledFeederIsResumedExactlyOnce) {
  constexpr int kKills = 8;
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  WriteFile(dir_.File("a.csv"), CsvLines(1000, 20000));  // ~1 MB; ids apart from b and c
  const FeedPlan plan = CsvPlan(/*split_bytes=*/50'000, /*epochs=*/3);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  const std::vector<FeedUnit> feeds = FeedsOfShare(plan, 0, 1).value();
  RingReader reader(*channel_, true);
  Seen seen;
  int killed = 0;
  FeederOptions options = Options(plan);
  options.ingest_probe_bytes = 40'000;

  for (int round = 0; round <= kKills && !seen.closed; ++round) {
    const size_t batches_before = seen.batches.size();
    Child child(kFeederProcess, FeederArg(options));
    ASSERT_TRUE(child.started());
    if (round < kKills) {
      // Read until this feeder has published something, then a little more.
      const auto delay = std::chrono::microseconds(rng() % 3000);
      std::optional<Deadline> kill_at;
      ReadAll(reader, feeds, &seen, [&](bool) {
        if (!kill_at && seen.batches.size() > batches_before) kill_at = Clock::now() + delay;
        return kill_at && Clock::now() >= *kill_at;
      });
      if (seen.closed) break;  // it finished first
      child.Kill();
      std::optional<int> status = child.Wait(seconds(20));
      ASSERT_TRUE(status.has_value());
      // A feeder that never published would leave ReadAll waiting: say how
      // it ended (2: RunFeeder failed, and its channel error says why).
      ASSERT_FALSE(HasFailure()) << "round " << round << ": the feeder ended with wait status "
                                 << *status << "; channel error: '" << channel_->error() << "'";
      if (WIFSIGNALED(*status)) ++killed;
    } else {
      ReadAll(reader, feeds, &seen, [](bool) { return false; });
      EXPECT_TRUE(ExitedWith(child.Wait(seconds(20)), 0));
    }
  }
  ExpectExactlyOnce(plan, seen);
  EXPECT_GT(killed, 0);
  RecordProperty("killed", killed);
  EXPECT_EQ(channel_->error(), "");
}

TEST_F(FeederTest, BadTfRecordStopsTheFeedNamingTheFile) {
  std::string good, bad;
  for (int i = 0; i < 20; ++i) AppendTfRecord("good record " + std::to_string(i), &good);
  for (int i = 0; i < 20; ++i) {
    if (i == 5) {
      std::string record;
      AppendTfRecord("damaged record", &record);
      record[14] ^= 0x20;  // a data byte: the data CRC no longer matches
      bad += record;
    } else {
      AppendTfRecord("bad file record " + std::to_string(i), &bad);
    }
  }
  WriteFile(dir_.File("good.tfrecord"), good);
  WriteFile(dir_.File("bad.tfrecord"), bad);
  PlanOptions read;
  read.format = RecordFormat::kTfRecord;
  ASSERT_OK_AND_ASSIGN(
      std::vector<Partition> partitions,
      PlanPartitions({dir_.File("good.tfrecord"), dir_.File("bad.tfrecord")}, read));
  FeedPlan plan;
  plan.read = read;
  plan.partitions = partitions;
  plan.feed_timeout_ms = 20'000;
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 1 << 20));

  Result<FeederReport> report = RunFeeder(Options(plan));
  EXPECT_THAT(report, StatusIs(Code::kInvalidArgument,
                               AllOf(HasSubstr(dir_.File("bad.tfrecord")), HasSubstr("record 5"))));
  // The reader learns why.
  EXPECT_THAT(channel_->error(), HasSubstr("bad.tfrecord"));
  EXPECT_EQ(channel_->error(), report.status().message());
  EXPECT_EQ(channel_->state(), RunState::kRunning);  // the agent stops it

  // The good file went through; nothing of the bad one's unpublished batch.
  RingReader reader(*channel_, true);
  Seen seen;
  ReadAll(reader, FeedsOfShare(plan, 0, 1).value(), &seen, WhenIdle);
  EXPECT_FALSE(seen.closed);
  ASSERT_TRUE(seen.ended.count(0));
  EXPECT_EQ(seen.records[0].size(), 20u);
}

TEST_F(FeederTest, RecordLargerThanTheQueueTakes) {
  WriteFile(dir_.File("huge.csv"), "1,small\n2," + std::string(40000, 'h') + "\n3,small\n");
  PlanOptions read;
  ASSERT_OK_AND_ASSIGN(std::vector<Partition> partitions,
                       PlanPartitions({dir_.File("huge.csv")}, read));
  FeedPlan plan;
  plan.partitions = partitions;
  plan.feed_timeout_ms = 20'000;
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  Result<FeederReport> report = RunFeeder(Options(plan));
  EXPECT_THAT(report, StatusIs(Code::kInvalidArgument,
                               AllOf(HasSubstr("huge.csv"), HasSubstr("raise --queue-bytes"))));
  EXPECT_EQ(channel_->error(), report.status().message());
}

class FeedTimeoutTest : public FeederTest, public ::testing::WithParamInterface<uint64_t> {};

// Nobody reads: the feeder gives up after plan.feed_timeout_ms, whether it
// waits inside a partition or between two.
TEST_P(FeedTimeoutTest, SaysFeedTimeout) {
  WriteFile(dir_.File("a.csv"), CsvLines(0, 4000));  // ~200 KB, more than the queue
  FeedPlan plan = CsvPlan(/*split_bytes=*/GetParam(), /*epochs=*/1);
  plan.feed_timeout_ms = 300;
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  Result<FeederReport> report = RunFeeder(Options(plan));
  EXPECT_THAT(report, StatusIs(Code::kDeadlineExceeded,
                               AllOf(HasSubstr("feed timeout"), HasSubstr("worker:0"))));
  EXPECT_THAT(channel_->error(), HasSubstr("feed timeout"));
}

INSTANTIATE_TEST_SUITE_P(Partitions, FeedTimeoutTest,
                         ::testing::Values(uint64_t{0}, uint64_t{1000}), [](const auto& info) {
                           return info.param == 0 ? std::string("WholeFiles")
                                                  : std::string("SmallPartitions");
                         });

TEST_F(FeederTest, TerminateStopsTheFeeder) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/0, /*epochs=*/20);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  Result<FeederReport> report = Status::Internal("not run");
  std::thread feeder([&] { report = RunFeeder(Options(plan)); });
  StopAndJoin stop_and_join(*channel_, feeder);
  // Wait (bounded) until it published something and filled the queue.
  RingWriter probe(*channel_, true);
  const Deadline give_up = In(seconds(20));
  while (Clock::now() < give_up) {
    Result<std::optional<CommitPoint>> commit = probe.LastCommit();
    if (commit.ok() && commit->has_value()) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(20));
  channel_->AdvanceState(RunState::kTerminating);
  feeder.join();
  ASSERT_OK(report);
  EXPECT_TRUE(report->terminated);
  EXPECT_FALSE(report->finished);
  EXPECT_EQ(channel_->error(), "");
}

// The program's side: DataFeed reads what RunFeeder feeds, epoch by epoch.
TEST_F(FeederTest, DataFeedReadsWhatTheFeederFeeds) {
  const FeedPlan plan = CsvPlan(/*split_bytes=*/2500, /*epochs=*/2);
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  Result<FeederReport> report = Status::Internal("not run");
  std::thread feeder([&] { report = RunFeeder(Options(plan)); });
  StopAndJoin stop_and_join(*channel_, feeder);

  DataFeedOptions options;
  options.socket_path = agent_->socket_path();
  options.timeout = seconds(20);
  Result<std::unique_ptr<DataFeed>> connected = DataFeed::Connect(MapEnvironment(), options);
  ASSERT_OK(connected);
  DataFeed& feed = **connected;
  std::map<int, std::map<int, int>> ids;  // epoch -> id -> count
  while (!feed.ShouldStop()) {
    Result<RecordBatch> batch = feed.NextBatch(37);
    ASSERT_OK(batch);
    if (batch->records.empty()) break;
    for (std::string_view record : batch->records) ++ids[batch->epoch][IdOf(record)];
  }
  feeder.join();
  ASSERT_OK(report);
  EXPECT_TRUE(report->finished);
  EXPECT_EQ(feed.records_read(), 2u * total_records_);
  ASSERT_EQ(ids.size(), 2u);
  for (const auto& [epoch, counts] : ids) {
    EXPECT_EQ(counts.size(), static_cast<size_t>(total_records_)) << "epoch " << epoch;
    for (const auto& [id, count] : counts) EXPECT_EQ(count, 1) << id << " in epoch " << epoch;
  }
}

// A program that asks for more records than the queue holds, and spends a
// little time on each batch, keeps reading: the feeder must not hit its feed
// timeout (the program never stops taking records).
TEST_F(FeederTest, LargeNextBatchDoesNotStarveTheFeeder) {
  WriteFile(dir_.File("a.csv"), CsvLines(0, 8000));
  FeedPlan plan = CsvPlan(/*split_bytes=*/0, /*epochs=*/1);
  plan.feed_timeout_ms = 500;
  ASSERT_NO_FATAL_FAILURE(Serve(plan, 64 << 10));
  DataFeedOptions options;
  options.socket_path = agent_->socket_path();
  options.timeout = milliseconds(plan.feed_timeout_ms);
  Result<std::unique_ptr<DataFeed>> connected = DataFeed::Connect(MapEnvironment(), options);
  ASSERT_OK(connected);
  DataFeed& feed = **connected;
  Result<FeederReport> report = Status::Internal("not run");
  std::atomic<bool> done{false};
  std::thread feeder([&] {
    report = RunFeeder(Options(plan));
    done = true;
  });
  StopAndJoin stop_and_join(*channel_, feeder);
  uint64_t read = 0;
  while (!feed.ShouldStop()) {
    Result<RecordBatch> batch = feed.NextBatch(1'000'000);
    if (!batch.ok() || batch->records.empty()) break;
    read += batch->records.size();
    std::this_thread::sleep_for(milliseconds(100));  // the program works on the batch
    if (done) break;
  }
  feeder.join();
  EXPECT_OK(report);
  EXPECT_EQ(channel_->error(), "");
}

}  // namespace
}  // namespace drover::feed

#include "drover/data_feed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "feed/extent_records.h"
#include "feed/feed_test_util.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "os/unique_fd.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::feed::BatchInfo;
using ::drover::feed::BatchView;
using ::drover::feed::Clock;
using ::drover::feed::Deadline;
using ::drover::feed::ExtentRecords;
using ::drover::feed::FeedGrant;
using ::drover::feed::FeedRole;
using ::drover::feed::kEndOfPartition;
using ::drover::feed::kReadExtent;
using ::drover::feed::RingReader;
using ::drover::feed::RingWriter;
using ::drover::feed::RunState;
using ::drover::feed::ShmChannel;
using ::drover::feed::testing::ExtentOf;
using ::drover::feed::testing::In;
using ::drover::feed::testing::PublishBatch;
using ::drover::feed::testing::PublishExtent;
using ::drover::feed::testing::RecordsOf;
using ::drover::feed::testing::StopAndJoin;
using ::drover::feed::testing::TestAgent;
using ::drover::feed::testing::WriteFile;
using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Code = Status::Code;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<std::string> Strings(const RecordBatch& batch) {
  return {batch.records.begin(), batch.records.end()};
}

BatchInfo Info(uint32_t partition, uint32_t epoch, uint64_t first_record, uint32_t flags = 0,
               uint32_t feed_seq = 0) {
  BatchInfo info;
  info.feed_seq = feed_seq;
  info.partition = partition;
  info.epoch = epoch;
  info.first_record = first_record;
  info.flags = flags;
  return info;
}

// A node's channel served by a TestAgent, and the test as the feeder.
class DataFeedTest : public ::testing::Test {
 protected:
  void Serve(const std::string& mode) {
    Result<ShmChannel> channel = ShmChannel::Create(64 << 10);
    ASSERT_OK(channel);
    channel_ = std::make_unique<ShmChannel>(std::move(channel).value());
    FeedGrant grant;
    grant.mode = mode;
    grant.format = "csv";
    grant.record_bytes = 0;
    grant.feed_timeout_ms = 10'000;
    grant.task = "worker:0";
    grant.partitions = {"data/a.csv", "data/b.csv", "data/c.csv"};
    ASSERT_FALSE(dir_.path().empty());
    agent_ = std::make_unique<TestAgent>(*channel_, grant, dir_.path());
    ASSERT_EQ(agent_->error(), "");
    writer_ = std::make_unique<RingWriter>(*channel_, /*input_ring=*/true);
  }
  void SetUp() override { Serve("train"); }

  DataFeedOptions Options(bool train_mode = true) {
    DataFeedOptions options;
    options.socket_path = agent_->socket_path();
    options.train_mode = train_mode;
    options.timeout = seconds(10);
    return options;
  }
  std::unique_ptr<DataFeed> Connect(bool train_mode = true) {
    Result<std::unique_ptr<DataFeed>> feed = DataFeed::Connect(no_env_, Options(train_mode));
    EXPECT_OK(feed);
    return feed.ok() ? std::move(feed).value() : nullptr;
  }
  void Publish(const BatchInfo& info, const std::vector<std::string>& records) {
    ASSERT_OK(PublishBatch(*writer_, info, records));
  }

  const MapEnvironment no_env_;  // the options name the socket
  TempDir dir_;
  std::unique_ptr<ShmChannel> channel_;
  std::unique_ptr<TestAgent> agent_;
  std::unique_ptr<RingWriter> writer_;
};

TEST_F(DataFeedTest, NextBatchStopsAtEpochsAndTheEnd) {
  Publish(Info(0, 0, 0), {"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"});
  Publish(Info(1, 0, 0, kEndOfPartition), {"s0", "s1", "s2", "s3", "s4"});
  Publish(Info(0, 1, 0), {"t0", "t1"});
  Publish(Info(0, 1, 2, kEndOfPartition), {"t2", "t3"});
  writer_->Close();

  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  EXPECT_EQ(feed->format(), "csv");
  EXPECT_EQ(feed->record_bytes(), 0u);
  EXPECT_FALSE(feed->ShouldStop());

  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(4));
  EXPECT_THAT(Strings(batch), ElementsAre("r0", "r1", "r2", "r3"));
  EXPECT_EQ(batch.epoch, 0);
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(4));
  EXPECT_THAT(Strings(batch), ElementsAre("r4", "r5", "r6", "r7"));
  // Across batches of one epoch.
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(4));
  EXPECT_THAT(Strings(batch), ElementsAre("r8", "r9", "s0", "s1"));
  EXPECT_EQ(batch.epoch, 0);
  // Fewer at the end of the epoch.
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(4));
  EXPECT_THAT(Strings(batch), ElementsAre("s2", "s3", "s4"));
  EXPECT_EQ(batch.epoch, 0);
  EXPECT_FALSE(feed->ShouldStop());
  // Fewer at the end of the feed.
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(100));
  EXPECT_THAT(Strings(batch), ElementsAre("t0", "t1", "t2", "t3"));
  EXPECT_EQ(batch.epoch, 1);
  EXPECT_EQ(feed->records_read(), 19u);
  EXPECT_TRUE(feed->ShouldStop());
  // None once it is over, at once.
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(100));
  EXPECT_THAT(batch.records, IsEmpty());
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(100));
  EXPECT_THAT(batch.records, IsEmpty());
  EXPECT_TRUE(feed->ShouldStop());
  EXPECT_EQ(feed->records_read(), 19u);

  ASSERT_EQ(agent_->hellos().size(), 1u);
  EXPECT_EQ(agent_->hellos()[0].role, FeedRole::kReader);
  EXPECT_TRUE(agent_->hellos()[0].train_mode);
}

TEST_F(DataFeedTest, EmptyBatchesAndZeroRecordsAsked) {
  Publish(Info(0, 0, 0, kEndOfPartition), {});  // an empty partition
  Publish(Info(1, 0, 0, kEndOfPartition), {"b0"});
  Publish(Info(0, 1, 0, kEndOfPartition), {});
  Publish(Info(1, 1, 0, kEndOfPartition), {"b0'"});
  writer_->Close();
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(0));
  EXPECT_THAT(batch.records, IsEmpty());
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(10));
  EXPECT_THAT(Strings(batch), ElementsAre("b0"));
  EXPECT_EQ(batch.epoch, 0);
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(10));
  EXPECT_THAT(Strings(batch), ElementsAre("b0'"));
  EXPECT_EQ(batch.epoch, 1);
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(10));
  EXPECT_THAT(batch.records, IsEmpty());
  EXPECT_TRUE(feed->ShouldStop());
}

// More records than the ring holds go through, read as they come.
TEST_F(DataFeedTest, ReadsWhileTheFeederWrites) {
  constexpr int kRecords = 20000;
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  Status fed;
  std::thread feeder([&] {
    for (int first = 0; first < kRecords && fed.ok(); first += 100) {
      std::vector<std::string> records;
      for (int i = first; i < first + 100; ++i) records.push_back("record-" + std::to_string(i));
      fed = PublishBatch(*writer_, Info(0, 0, first), records, 0, In(seconds(20)));
    }
    writer_->Close();
  });
  StopAndJoin stop_and_join(*channel_, feeder);
  int next = 0;
  for (;;) {
    // Batches of 100 records fill exactly the asked-for 50 / 100.
    Result<RecordBatch> batch = feed->NextBatch(next % 3 == 0 ? 50 : 100);
    ASSERT_OK(batch);
    if (batch->records.empty()) break;
    for (std::string_view record : batch->records) {
      ASSERT_EQ(record, "record-" + std::to_string(next));
      ++next;
    }
  }
  feeder.join();
  EXPECT_OK(fed);
  EXPECT_EQ(next, kRecords);
  EXPECT_TRUE(feed->ShouldStop());
}

// The batches of results the program wrote so far (the output ring).
std::vector<BatchInfo> ResultBatches(RingReader& results) {
  std::vector<BatchInfo> batches;
  for (;;) {
    Result<std::optional<BatchView>> out = results.TryNext();
    EXPECT_OK(out);
    if (!out.ok() || !out->has_value()) return batches;
    batches.push_back((*out)->info);
  }
}

// Fixed-size records from a file, `count` of them, record i being
// "rec" and i in 5 digits (8 bytes).
std::string NumberedRecords(int first, int count) {
  std::string bytes;
  for (int i = first; i < first + count; ++i) {
    char record[9];
    std::snprintf(record, sizeof(record), "rec%05d", i);
    bytes.append(record, 8);
  }
  return bytes;
}

std::vector<std::string> NumberedList(int first, int count) {
  std::vector<std::string> records;
  for (int i = first; i < first + count; ++i) records.push_back(NumberedRecords(i, 1));
  return records;
}

// The tests of file extents run for both ways a program takes them: from
// its own mapping of the file, and read with pread(2) into its own memory
// (kReadExtent).
class ExtentFeedTest : public DataFeedTest, public ::testing::WithParamInterface<uint32_t> {
 protected:
  uint32_t Way() const { return GetParam(); }

  // Writes 10 records to `path`, queues them as two extents (records 0-3
  // and 4-9) and connects a reader; nullptr when any step failed.
  std::unique_ptr<DataFeed> FeedTwoExtentsOf(const std::string& path) {
    WriteFile(path, NumberedRecords(0, 10));
    if (!PublishExtent(*writer_, Info(0, 0, 0, Way()), ExtentOf(path, 0), 4, 8).ok() ||
        !PublishExtent(*writer_, Info(0, 0, 4, Way()), ExtentOf(path, 32), 6, 8).ok()) {
      return nullptr;
    }
    return Connect();
  }
};

INSTANTIATE_TEST_SUITE_P(InPlaceAndRead, ExtentFeedTest, ::testing::Values(0u, kReadExtent),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return info.param == kReadExtent ? "ReadByProgram" : "Mapped";
                         });

// Records queued as extents of their files are handed out as views into the
// program's own mappings of the files (or its buffers), across batches and
// files, in order.
TEST_P(ExtentFeedTest, FileExtentRecordsAreHandedOutInPlace) {
  const std::string a = dir_.File("a.raw"), b = dir_.File("b.raw");
  WriteFile(a, NumberedRecords(0, 20));
  WriteFile(b, NumberedRecords(20, 10));
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 0, Way()), ExtentOf(a, 0), 12, 8));
  ASSERT_OK(
      PublishExtent(*writer_, Info(0, 0, 12, kEndOfPartition | Way()), ExtentOf(a, 96), 8, 8));
  ASSERT_OK(
      PublishExtent(*writer_, Info(1, 0, 0, kEndOfPartition | Way(), 1), ExtentOf(b, 0), 10, 8));
  writer_->Close();
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch first, feed->NextBatch(15));
  EXPECT_EQ(Strings(first), NumberedList(0, 15));
  ASSERT_OK_AND_ASSIGN(RecordBatch rest, feed->NextBatch(100));
  EXPECT_EQ(Strings(rest), NumberedList(15, 15));
  ASSERT_OK_AND_ASSIGN(RecordBatch none, feed->NextBatch(100));
  EXPECT_TRUE(none.records.empty());
  EXPECT_TRUE(feed->ShouldStop());
  EXPECT_EQ(ReadRingProgress(*channel_, true).bytes, 30u * 8);
}

// A reader that leaves partway through an extent: the next one goes on at
// the first record it was not handed.
TEST_P(ExtentFeedTest, ANewReaderGoesOnInsideAFileExtent) {
  const std::string a = dir_.File("a.raw");
  WriteFile(a, NumberedRecords(0, 10));
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 0, kEndOfPartition | Way()), ExtentOf(a, 0), 10, 8));
  writer_->Close();
  {
    std::unique_ptr<DataFeed> feed = Connect();
    ASSERT_NE(feed, nullptr);
    ASSERT_OK_AND_ASSIGN(RecordBatch first, feed->NextBatch(3));
    EXPECT_EQ(Strings(first), NumberedList(0, 3));
  }
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch rest, feed->NextBatch(100));
  EXPECT_EQ(Strings(rest), NumberedList(3, 7));
}

// A file that grows during the run is mapped again for the records past its
// old end, and the views a call already took from the old mapping stay
// valid for that call (the ASan build would catch a read of an unmapped one).
TEST_P(ExtentFeedTest, AFileThatGrowsIsMappedAgainAndEarlierViewsStay) {
  const std::string a = dir_.File("a.raw");
  WriteFile(a, NumberedRecords(0, 5));
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 0, Way()), ExtentOf(a, 0), 5, 8));
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch first, feed->NextBatch(3));
  EXPECT_EQ(Strings(first), NumberedList(0, 3));
  {
    std::ofstream out(a, std::ios::binary | std::ios::app);
    out << NumberedRecords(5, 5);
  }
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 5, kEndOfPartition | Way()), ExtentOf(a, 40), 5, 8));
  writer_->Close();
  ASSERT_OK_AND_ASSIGN(RecordBatch rest, feed->NextBatch(10));
  EXPECT_EQ(Strings(rest), NumberedList(3, 7));
}

// The file an extent names was replaced, or cut short, after the feeder
// read it: the feed stops with an error that says so (never SIGBUS, never
// another file's bytes), and the feeder and agent see the channel stopped.
TEST_P(ExtentFeedTest, AFileChangedUnderAnExtentStopsTheFeed) {
  const std::string a = dir_.File("a.raw");
  WriteFile(a, NumberedRecords(0, 10));
  const feed::FileExtent extent = ExtentOf(a, 0);
  WriteFile(dir_.File("new.raw"), NumberedRecords(100, 10));
  ASSERT_EQ(::rename(dir_.File("new.raw").c_str(), a.c_str()), 0);
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 0, Way()), extent, 10, 8));
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  EXPECT_THAT(feed->NextBatch(10),
              StatusIs(Code::kUnavailable,
                       AllOf(HasSubstr("feeding worker:0 stopped"), HasSubstr("data/a.csv"),
                             HasSubstr("no longer the file the feeder read"))));
  EXPECT_TRUE(feed->ShouldStop());
  EXPECT_EQ(channel_->state(), RunState::kStopped);
}

// Whatever the queue names, the program opens no FIFO and waits on none.
TEST_P(ExtentFeedTest, AnExtentNamingAFifoStopsTheFeedAtOnce) {
  const std::string fifo = dir_.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 0, Way()), ExtentOf(fifo, 0), 4, 8));
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  EXPECT_THAT(feed->NextBatch(10),
              StatusIs(Code::kUnavailable, HasSubstr("no longer the file the feeder read")));
}

TEST_P(ExtentFeedTest, AFileCutShortUnderAnExtentStopsTheFeed) {
  const std::string a = dir_.File("a.raw");
  std::unique_ptr<DataFeed> feed = FeedTwoExtentsOf(a);
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch first, feed->NextBatch(4));
  EXPECT_EQ(Strings(first), NumberedList(0, 4));
  ASSERT_EQ(::truncate(a.c_str(), 50), 0);
  EXPECT_THAT(feed->NextBatch(10),
              StatusIs(Code::kUnavailable, AllOf(HasSubstr("a.raw ends"), HasSubstr("cut short"))));
  EXPECT_EQ(channel_->state(), RunState::kStopped);
  EXPECT_TRUE(feed->ShouldStop());
}

// A call that holds records when the next extent cannot be read returns
// them; ShouldStop() stays false until the next call has reported the error.
TEST_P(ExtentFeedTest, RecordsBeforeAFileCutShortComeFirstAndThenTheError) {
  const std::string a = dir_.File("a.raw");
  std::unique_ptr<DataFeed> feed = FeedTwoExtentsOf(a);
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch first, feed->NextBatch(2));
  EXPECT_EQ(Strings(first), NumberedList(0, 2));
  ASSERT_EQ(::truncate(a.c_str(), 50), 0);
  ASSERT_OK_AND_ASSIGN(RecordBatch rest, feed->NextBatch(10));
  EXPECT_EQ(Strings(rest), NumberedList(2, 2));
  EXPECT_EQ(channel_->state(), RunState::kStopped);
  EXPECT_FALSE(feed->ShouldStop());
  EXPECT_THAT(feed->NextBatch(10), StatusIs(Code::kUnavailable, HasSubstr("cut short")));
  EXPECT_TRUE(feed->ShouldStop());
}

// A file its file system will not map is read instead, and the records of
// the next file are mapped as before. Here the file is larger than the
// address space (a sparse file on tmpfs: mmap fails with ENOMEM), standing
// in for a file system that maps nothing.
TEST_F(DataFeedTest, AFileThatCannotBeMappedIsReadInstead) {
  char path[] = "/dev/shm/drover-extent-XXXXXX";
  os::UniqueFd huge_fd(::mkstemp(path));
  if (!huge_fd.valid()) GTEST_SKIP() << "no /dev/shm to make a file in";
  const std::string huge = path;
  struct Unlink {
    std::string path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_huge{huge};
  const std::string records = NumberedRecords(0, 10);
  ASSERT_EQ(::pwrite(huge_fd.get(), records.data(), records.size(), 0),
            static_cast<ssize_t>(records.size()));
  if (::ftruncate(huge_fd.get(), off_t{1} << 48) != 0) {
    GTEST_SKIP() << "/dev/shm takes no file of 2^48 bytes";
  }
  const std::string a = dir_.File("a.raw");
  WriteFile(a, NumberedRecords(10, 5));
  ASSERT_OK(PublishExtent(*writer_, Info(0, 0, 0, kEndOfPartition), ExtentOf(huge, 0), 10, 8));
  ASSERT_OK(PublishExtent(*writer_, Info(1, 0, 0, kEndOfPartition, 1), ExtentOf(a, 0), 5, 8));
  writer_->Close();
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch first, feed->NextBatch(4));
  EXPECT_EQ(Strings(first), NumberedList(0, 4));
  ASSERT_OK_AND_ASSIGN(RecordBatch rest, feed->NextBatch(100));
  EXPECT_EQ(Strings(rest), NumberedList(4, 11));
  EXPECT_TRUE(feed->ShouldStop());
}

// A call that read many extents (a large batch) leaves its buffers for
// reuse, but not for the rest of the run: once kTrimEvery calls in a row
// needed fewer, the rest are freed. Calls that keep needing as many keep
// them (no allocation per call).
TEST_F(DataFeedTest, ReadBuffersOfALargeBatchAreFreedOnceCallsNeedFewer) {
  const std::string a = dir_.File("a.raw");
  WriteFile(a, NumberedRecords(0, 40));
  auto extent_at = [&](int record) {
    BatchView view;
    view.info.flags = feed::kFileExtent | kReadExtent;
    view.info.record_count = 4;
    view.info.record_bytes = 8;
    view.extent = ExtentOf(a, 8 * record);
    return view;
  };
  ExtentRecords extents;
  // One call takes `count` extents, from record 4 * first on.
  auto call = [&](int first, int count) {
    for (int i = first; i < first + count; ++i) {
      Result<const char*> records = extents.Records(extent_at(4 * i));
      ASSERT_OK(records);
      EXPECT_EQ(std::string(*records, 32), NumberedRecords(4 * i, 4));
    }
    extents.KeepOnlyLast();
  };
  call(0, 10);
  EXPECT_EQ(extents.read_buffers(), 10u);
  // A call's buffers, and the one read into last before it (its batch may
  // still be handed out).
  for (int i = 0; i < 2 * ExtentRecords::kTrimEvery; ++i) call(i % 7, 3);
  EXPECT_EQ(extents.read_buffers(), 4u);
  for (int i = 0; i < 2 * ExtentRecords::kTrimEvery; ++i) call(i % 10, 1);
  EXPECT_EQ(extents.read_buffers(), 2u);
}

TEST_F(DataFeedTest, SecondReaderIsRefused) {
  std::unique_ptr<DataFeed> first = Connect();
  ASSERT_NE(first, nullptr);
  EXPECT_THAT(DataFeed::Connect(no_env_, Options()),
              StatusIs(Code::kAlreadyExists, HasSubstr("already has a reader")));
  first.reset();
  // Once the first reader is gone, another may read.
  EXPECT_OK(DataFeed::Connect(no_env_, Options()));
}

TEST_F(DataFeedTest, TerminateStopsTheFeederAndDropsQueuedRecords) {
  Publish(Info(0, 0, 0), {"a", "b", "c"});
  Publish(Info(0, 0, 3), {"d", "e", "f"});
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(2));
  EXPECT_THAT(Strings(batch), ElementsAre("a", "b"));

  feed->Terminate();
  EXPECT_EQ(channel_->state(), RunState::kTerminating);
  EXPECT_TRUE(feed->ShouldStop());
  EXPECT_THAT(writer_->Reserve(16, In(seconds(5))),
              StatusIs(Code::kUnavailable, HasSubstr("terminating")));
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(10));
  EXPECT_THAT(batch.records, IsEmpty());
  // The queued records were dropped: a reader finds nothing left.
  RingReader after(*channel_, /*input_ring=*/true);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> left, after.TryNext());
  EXPECT_FALSE(left.has_value());
}

TEST_F(DataFeedTest, TerminateWakesABlockedFeeder) {
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  const std::string big(20000, 'x');
  Status fed;
  std::thread feeder([&] {
    while (fed.ok()) fed = PublishBatch(*writer_, Info(0, 0, 0), {big}, 0, In(seconds(20)));
  });
  std::this_thread::sleep_for(milliseconds(30));
  feed->Terminate();
  feeder.join();
  EXPECT_THAT(fed, StatusIs(Code::kUnavailable, HasSubstr("terminating")));
}

TEST_F(DataFeedTest, StoppedFeedReportsTheAgentsError) {
  Publish(Info(0, 0, 0), {"a", "b"});
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  channel_->SetError("data/b.csv: TFRecord at offset 96: bad CRC");
  channel_->AdvanceState(RunState::kStopped);
  // Not before a call returned the error: a `while (!ShouldStop())` loop
  // must make that call, not end as if the feed were over.
  EXPECT_FALSE(feed->ShouldStop());
  EXPECT_THAT(feed->NextBatch(10),
              StatusIs(Code::kUnavailable,
                       AllOf(HasSubstr("feeding worker:0 stopped"), HasSubstr("bad CRC"))));
  EXPECT_TRUE(feed->ShouldStop());
}

// The agent stops the channel without a reason only once the program is
// done: nothing to report.
TEST_F(DataFeedTest, AStopWithoutAReasonEndsTheLoopAtOnce) {
  Publish(Info(0, 0, 0), {"a", "b"});
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  channel_->AdvanceState(RunState::kStopped);
  EXPECT_TRUE(feed->ShouldStop());
}

TEST_F(DataFeedTest, StoppedWhileWaiting) {
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  std::thread agent([&] {
    std::this_thread::sleep_for(milliseconds(30));
    channel_->SetError("the feeder of worker:0 crashed (killed by SIGSEGV) 4 times in a row");
    channel_->AdvanceState(RunState::kStopped);
  });
  Result<RecordBatch> batch = feed->NextBatch(10);
  agent.join();
  EXPECT_THAT(batch, StatusIs(Code::kUnavailable, HasSubstr("4 times in a row")));
}

TEST_F(DataFeedTest, NextBatchTimesOut) {
  DataFeedOptions options = Options();
  options.timeout = milliseconds(50);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, DataFeed::Connect(no_env_, options));
  EXPECT_THAT(feed->NextBatch(10),
              StatusIs(Code::kDeadlineExceeded, HasSubstr("no record arrived for worker:0")));
  // What arrived in time comes back, without an error.
  Publish(Info(0, 0, 0), {"late"});
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(10));
  EXPECT_THAT(Strings(batch), ElementsAre("late"));
}

TEST_F(DataFeedTest, ABatchPassedAgainIsReplacedAndKeepsItsStorage) {
  Publish(Info(0, 0, 0), {"r0", "r1", "r2", "r3", "r4", "r5"});
  Publish(Info(0, 1, 0, kEndOfPartition), {"t0"});
  DataFeedOptions options = Options();
  options.timeout = milliseconds(50);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, DataFeed::Connect(no_env_, options));
  RecordBatch batch;
  batch.records = {"stale"};
  batch.epoch = 7;
  ASSERT_OK(feed->NextBatch(4, &batch));
  EXPECT_THAT(Strings(batch), ElementsAre("r0", "r1", "r2", "r3"));
  EXPECT_EQ(batch.epoch, 0);
  const std::string_view* storage = batch.records.data();
  ASSERT_OK(feed->NextBatch(4, &batch));  // the rest of epoch 0
  EXPECT_THAT(Strings(batch), ElementsAre("r4", "r5"));
  EXPECT_EQ(batch.records.data(), storage);
  ASSERT_OK(feed->NextBatch(4, &batch));
  EXPECT_THAT(Strings(batch), ElementsAre("t0"));
  EXPECT_EQ(batch.epoch, 1);
  // Nothing more arrives: an error leaves the batch empty.
  EXPECT_THAT(feed->NextBatch(4, &batch), StatusIs(Code::kDeadlineExceeded, ::testing::_));
  EXPECT_THAT(batch.records, IsEmpty());
  EXPECT_EQ(feed->records_read(), 7u);
}

TEST_F(DataFeedTest, ConnectNeedsASocket) {
  MapEnvironment env;
  EXPECT_THAT(DataFeed::Connect(env, DataFeedOptions{}),
              StatusIs(Code::kNotFound, HasSubstr("DROVER_FEED_SOCKET is not set")));
  env.Set(kFeedSocketVariable, "");
  EXPECT_THAT(DataFeed::Connect(env, DataFeedOptions{}),
              StatusIs(Code::kNotFound, HasSubstr("DROVER_FEED_SOCKET is not set")));
  // The variable names the socket when the options do not.
  env.Set(kFeedSocketVariable, agent_->socket_path());
  EXPECT_OK(DataFeed::Connect(env, DataFeedOptions{}));
}

TEST_F(DataFeedTest, TrainModeMustMatchTheRun) {
  EXPECT_THAT(DataFeed::Connect(no_env_, Options(/*train_mode=*/false)),
              StatusIs(Code::kInvalidArgument, HasSubstr("read it with train_mode=true")));
  ASSERT_EQ(agent_->hellos().size(), 1u);
  EXPECT_FALSE(agent_->hellos()[0].train_mode);
  // The refused reader's connection is closed: another may connect.
  std::unique_ptr<DataFeed> feed = Connect();
  ASSERT_NE(feed, nullptr);
  EXPECT_THAT(feed->BatchResults({"x"}),
              StatusIs(Code::kInvalidArgument, HasSubstr("batch_results is for inference")));
}

class InferenceFeedTest : public DataFeedTest {
 protected:
  void SetUp() override { Serve("inference"); }
  // Takes the queued records "a0" and "a1" and answers them.
  static void TakeAndAnswerA0A1(DataFeed& feed) {
    ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed.NextBatch(10));
    EXPECT_THAT(Strings(batch), ElementsAre("a0", "a1"));
    ASSERT_OK(feed.BatchResults({"r0", "r1"}));
  }
};

TEST_F(InferenceFeedTest, TrainModeMustMatchTheRun) {
  EXPECT_THAT(DataFeed::Connect(no_env_, Options(/*train_mode=*/true)),
              StatusIs(Code::kInvalidArgument, HasSubstr("train_mode=false")));
}

TEST_F(InferenceFeedTest, ResultsGoToTheOutputRingPerPartition) {
  Publish(Info(0, 0, 0, 0, /*feed_seq=*/0), {"a0", "a1", "a2", "a3", "a4"});
  Publish(Info(0, 0, 5, kEndOfPartition, 0), {"a5", "a6"});
  Publish(Info(1, 0, 0, kEndOfPartition, 1), {"b0", "b1", "b2"});
  writer_->Close();
  std::unique_ptr<DataFeed> feed = Connect(/*train_mode=*/false);
  ASSERT_NE(feed, nullptr);
  RingReader results(*channel_, /*input_ring=*/false);

  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(3));
  EXPECT_THAT(Strings(batch), ElementsAre("a0", "a1", "a2"));
  EXPECT_THAT(feed->NextBatch(3),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("call batch_results"), HasSubstr("data/a.csv"))));
  EXPECT_THAT(feed->BatchResults({"x"}),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("1 results for the 3 records"), HasSubstr("data/a.csv"))));
  EXPECT_THAT(feed->BatchResults({"A0", "A1\n", "A2"}),
              StatusIs(Code::kInvalidArgument, HasSubstr("result 1 contains a newline")));
  // Nothing was written by the refused calls.
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> out, results.TryNext());
  EXPECT_FALSE(out.has_value());

  ASSERT_OK(feed->BatchResults({"A0", "A1", "A2"}));
  ASSERT_OK_AND_ASSIGN(out, results.TryNext());
  ASSERT_TRUE(out.has_value());
  EXPECT_THAT(RecordsOf(*out), ElementsAre("A0", "A1", "A2"));
  EXPECT_EQ(out->info.partition, 0u);
  EXPECT_EQ(out->info.first_record, 0u);
  EXPECT_EQ(out->info.flags, 0u);
  results.Release(out->end);

  // One call across two partitions of the epoch.
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(100));
  EXPECT_THAT(Strings(batch), ElementsAre("a3", "a4", "a5", "a6", "b0", "b1", "b2"));
  EXPECT_THAT(
      feed->BatchResults({"x", "y"}),
      StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("2 results for the 7 records"),
                                             HasSubstr("data/a.csv, data/a.csv, data/b.csv"))));
  ASSERT_OK(feed->BatchResults({"A3", "A4", "A5", "A6", "B0", "B1", "B2"}));

  struct Expected {
    uint32_t partition;
    uint64_t first_record;
    uint32_t flags;
    std::vector<std::string> records;
  };
  const std::vector<Expected> expected = {{0, 3, 0, {"A3", "A4"}},
                                          {0, 5, kEndOfPartition, {"A5", "A6"}},
                                          {1, 0, kEndOfPartition, {"B0", "B1", "B2"}}};
  for (const Expected& want : expected) {
    ASSERT_OK_AND_ASSIGN(out, results.TryNext());
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->info.partition, want.partition);
    EXPECT_EQ(out->info.first_record, want.first_record);
    EXPECT_EQ(out->info.flags, want.flags);
    EXPECT_EQ(out->info.epoch, 0u);
    EXPECT_EQ(RecordsOf(*out), want.records);
  }
  ASSERT_OK_AND_ASSIGN(out, results.TryNext());
  EXPECT_FALSE(out.has_value());

  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(100));
  EXPECT_THAT(batch.records, IsEmpty());
  EXPECT_TRUE(feed->ShouldStop());
  EXPECT_OK(feed->BatchResults({}));
}

// An empty partition still has its end answered (so the agent completes its
// output file), without a result from the program.
TEST_F(InferenceFeedTest, EmptyPartitionIsAnsweredImplicitly) {
  Publish(Info(0, 0, 0, kEndOfPartition, 0), {"a0", "a1"});
  Publish(Info(1, 0, 0, kEndOfPartition, 1), {});
  Publish(Info(2, 0, 0, kEndOfPartition, 2), {});
  writer_->Close();
  std::unique_ptr<DataFeed> feed = Connect(/*train_mode=*/false);
  ASSERT_NE(feed, nullptr);
  RingReader results(*channel_, /*input_ring=*/false);

  ASSERT_NO_FATAL_FAILURE(TakeAndAnswerA0A1(*feed));
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(10));
  EXPECT_THAT(batch.records, IsEmpty());

  std::vector<std::pair<uint32_t, uint32_t>> ends;  // partition, record_count
  for (const BatchInfo& info : ResultBatches(results)) {
    EXPECT_EQ(info.flags, kEndOfPartition);
    ends.emplace_back(info.partition, info.record_count);
  }
  EXPECT_THAT(ends,
              ElementsAre(std::pair<uint32_t, uint32_t>{0, 2}, std::pair<uint32_t, uint32_t>{1, 0},
                          std::pair<uint32_t, uint32_t>{2, 0}));
}

// The end of the last partition arrives alone, after its records were
// answered: the call that finds it hands out nothing and answers it itself,
// since the program answers nothing for an empty batch and calls no more.
TEST_F(InferenceFeedTest, AnEndArrivingAloneAfterTheLastRecordsIsAnswered) {
  Publish(Info(0, 0, 0, 0, 0), {"a0", "a1"});
  std::unique_ptr<DataFeed> feed = Connect(/*train_mode=*/false);
  ASSERT_NE(feed, nullptr);
  RingReader results(*channel_, /*input_ring=*/false);
  ASSERT_NO_FATAL_FAILURE(TakeAndAnswerA0A1(*feed));
  Publish(Info(0, 0, 2, kEndOfPartition, 0), {});
  writer_->Close();
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(10));
  EXPECT_THAT(batch.records, IsEmpty());
  EXPECT_TRUE(feed->ShouldStop());

  std::vector<std::pair<uint32_t, uint32_t>> pieces;  // record_count, flags
  for (const BatchInfo& info : ResultBatches(results)) {
    pieces.emplace_back(info.record_count, info.flags);
  }
  EXPECT_THAT(pieces, ElementsAre(std::pair<uint32_t, uint32_t>{2, 0},
                                  std::pair<uint32_t, uint32_t>{0, kEndOfPartition}));
}

// Results larger than one output batch are split, in order, the end flag on
// the last piece.
TEST_F(InferenceFeedTest, LargeResultsAreSplitAcrossBatches) {
  std::vector<std::string> records;
  for (int i = 0; i < 40; ++i) records.push_back("q" + std::to_string(i));
  Publish(Info(2, 0, 0, kEndOfPartition, 0), records);
  writer_->Close();
  std::unique_ptr<DataFeed> feed = Connect(/*train_mode=*/false);
  ASSERT_NE(feed, nullptr);
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(100));
  ASSERT_EQ(batch.records.size(), 40u);

  std::vector<std::string> answers;
  for (int i = 0; i < 40; ++i)
    answers.push_back(std::string(3000, static_cast<char>('a' + i % 26)));
  std::vector<std::string> got;
  uint64_t next_first = 0;
  int pieces = 0;
  bool ended = false;
  Status answered;
  // The answers (120 KB) exceed the output ring (64 KiB): read concurrently.
  std::thread program([&] { answered = feed->BatchResults({answers.begin(), answers.end()}); });
  StopAndJoin stop_and_join(*channel_, program);
  RingReader results(*channel_, /*input_ring=*/false);
  const Deadline give_up = In(seconds(20));
  while (!ended && Clock::now() < give_up) {
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> out, results.Next(In(seconds(10))));
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->info.partition, 2u);
    EXPECT_EQ(out->info.first_record, next_first);
    next_first += out->info.record_count;
    ended = (out->info.flags & kEndOfPartition) != 0;
    for (std::string& record : RecordsOf(*out)) got.push_back(std::move(record));
    results.Release(out->end);
    ++pieces;
  }
  program.join();
  EXPECT_OK(answered);
  EXPECT_TRUE(ended);
  EXPECT_GT(pieces, 1);
  EXPECT_EQ(got, answers);
}

// The socket helpers and the handshake underneath Connect.
TEST(FeedSocketTest, MessagesCarryADescriptor) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  ASSERT_OK(feed::SendMessage(pair[0], "{\"hello\": 1}", channel.fd()));
  std::string line;
  os::UniqueFd fd;
  ASSERT_OK(feed::ReceiveMessage(pair[1], In(seconds(5)), &line, &fd));
  EXPECT_EQ(line, "{\"hello\": 1}");
  ASSERT_TRUE(fd.valid());
  EXPECT_NE(fd.get(), channel.fd());
  ASSERT_OK_AND_ASSIGN(ShmChannel mapped, ShmChannel::Map(std::move(fd)));
  EXPECT_EQ(mapped.ring_bytes(), channel.ring_bytes());

  ASSERT_OK(feed::SendMessage(pair[0], "plain"));
  ASSERT_OK(feed::ReceiveMessage(pair[1], In(seconds(5)), &line, &fd));
  EXPECT_EQ(line, "plain");
  EXPECT_FALSE(fd.valid());

  EXPECT_THAT(feed::ReceiveMessage(pair[1], In(milliseconds(20)), &line, &fd),
              StatusIs(Code::kDeadlineExceeded, ::testing::_));
  ::close(pair[0]);
  EXPECT_THAT(feed::ReceiveMessage(pair[1], In(seconds(5)), &line, &fd),
              StatusIs(Code::kUnavailable, HasSubstr("closed")));
  ::close(pair[1]);
}

TEST(FeedSocketTest, PeerCredentialsAreOurs) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(os::UniqueFd listening, feed::ListenUnix(dir.File("s")));
  ASSERT_OK_AND_ASSIGN(os::UniqueFd client, feed::ConnectUnix(dir.File("s"), In(seconds(5))));
  os::UniqueFd server(::accept(listening.get(), nullptr, nullptr));
  ASSERT_TRUE(server.valid());
  ASSERT_OK_AND_ASSIGN(feed::PeerCredentials peer, feed::PeerOf(server.get()));
  EXPECT_EQ(peer.pid, ::getpid());
  EXPECT_EQ(peer.uid, ::getuid());
}

TEST(FeedSocketTest, ConnectGivesUpAtTheDeadline) {
  TempDir dir;
  EXPECT_THAT(feed::ConnectUnix(dir.File("nobody"), In(milliseconds(50))),
              StatusIs(Code::kUnavailable, HasSubstr(dir.File("nobody"))));
  EXPECT_THAT(feed::ConnectUnix(std::string(200, 'x'), In(milliseconds(50))),
              StatusIs(Code::kInvalidArgument, HasSubstr("bad feed socket path")));
  EXPECT_THAT(feed::ListenUnix(dir.File("missing/s")),
              StatusIs(Code::kIoError, HasSubstr(dir.File("missing/s"))));
}

TEST(FeedSocketTest, DecodeHello) {
  FeedRole role = FeedRole::kWriter;
  bool train_mode = false;
  ASSERT_OK(feed::DecodeHello(R"({"role": "reader", "train_mode": true})", &role, &train_mode));
  EXPECT_EQ(role, FeedRole::kReader);
  EXPECT_TRUE(train_mode);
  ASSERT_OK(feed::DecodeHello(R"({"role": "writer", "train_mode": false})", &role, &train_mode));
  EXPECT_EQ(role, FeedRole::kWriter);
  EXPECT_FALSE(train_mode);
  ASSERT_OK(feed::DecodeHello(R"({"role": "reader"})", &role, &train_mode));
  EXPECT_TRUE(train_mode);
  for (const char* bad : {"", "not json", "[]", R"({"role": 1})", R"({"train_mode": true})"}) {
    EXPECT_THAT(feed::DecodeHello(bad, &role, &train_mode),
                StatusIs(Code::kInvalidArgument, HasSubstr("bad feed hello")))
        << bad;
  }
  EXPECT_THAT(feed::DecodeHello(R"({"role": "spy"})", &role, &train_mode),
              StatusIs(Code::kInvalidArgument, HasSubstr("unknown role 'spy'")));
}

TEST_F(DataFeedTest, JoinFeedReturnsTheGrant) {
  ASSERT_OK_AND_ASSIGN(
      feed::JoinedFeed joined,
      feed::JoinFeed(agent_->socket_path(), FeedRole::kWriter, true, In(seconds(5))));
  EXPECT_EQ(joined.grant.mode, "train");
  EXPECT_EQ(joined.grant.format, "csv");
  EXPECT_EQ(joined.grant.feed_timeout_ms, 10'000);
  EXPECT_EQ(joined.grant.task, "worker:0");
  EXPECT_THAT(joined.grant.partitions, ElementsAre("data/a.csv", "data/b.csv", "data/c.csv"));
  EXPECT_EQ(joined.channel.ring_bytes(), channel_->ring_bytes());
  joined.socket.Reset();
  // Writers are not limited by this agent; readers are.
  ASSERT_OK_AND_ASSIGN(
      feed::JoinedFeed reader,
      feed::JoinFeed(agent_->socket_path(), FeedRole::kReader, true, In(seconds(5))));
  EXPECT_THAT(feed::JoinFeed(agent_->socket_path(), FeedRole::kReader, true, In(seconds(5))),
              StatusIs(Code::kAlreadyExists, ::testing::_));
}

// json::value() used to throw for a field of another type.
TEST(FeedSocketTest, AnswerFieldsOfTheWrongTypeAreABadAnswer) {
  feed::FeedGrant grant;
  for (const char* line : {R"({"ok": true, "record_bytes": "8"})", R"({"ok": true, "mode": 1})",
                           R"({"ok": true, "feed_timeout_ms": 1.5})",
                           R"({"ok": false, "error": []})", R"({"ok": "yes"})", "[]", "", "{"}) {
    EXPECT_THAT(feed::DecodeAnswer(line, &grant),
                StatusIs(Code::kUnavailable, "bad answer from the feed socket"))
        << line;
  }
  ASSERT_OK(
      feed::DecodeAnswer(R"({"ok": true, "partitions": ["a", 3], "record_bytes": 8})", &grant));
  EXPECT_EQ(grant.mode, "train");
  EXPECT_EQ(grant.record_bytes, 8u);
  EXPECT_EQ(grant.feed_timeout_ms, 600'000);
  EXPECT_EQ(grant.partitions, (std::vector<std::string>{"a", "?"}));
  // A refusal whose message is not UTF-8 still encodes.
  EXPECT_THAT(feed::DecodeAnswer(feed::EncodeRefusal(Status::NotFound("no \xff file")), &grant),
              StatusIs(Code::kNotFound, HasSubstr("no ")));
}

TEST(FeedSocketTest, RefusalsKeepTheirCode) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(os::UniqueFd listening, feed::ListenUnix(dir.File("s")));
  const std::vector<Status> refusals = {
      Status::AlreadyExists("taken"), Status::InvalidArgument("bad"), Status::NotFound("gone"),
      Status::PermissionDenied("not yours"), Status::Internal("other")};
  std::thread agent([&] {
    for (const Status& refusal : refusals) {
      os::UniqueFd fd(::accept(listening.get(), nullptr, nullptr));
      if (!fd.valid()) return;
      std::string line;
      os::UniqueFd ignored;
      (void)feed::ReceiveMessage(fd.get(), In(seconds(5)), &line, &ignored);
      (void)feed::SendMessage(fd.get(), feed::EncodeRefusal(refusal));
    }
  });
  const std::vector<Code> codes = {Code::kAlreadyExists, Code::kInvalidArgument, Code::kNotFound,
                                   Code::kPermissionDenied, Code::kUnavailable};
  for (size_t i = 0; i < refusals.size(); ++i) {
    EXPECT_THAT(feed::JoinFeed(dir.File("s"), FeedRole::kReader, true, In(seconds(5))),
                StatusIs(codes[i], refusals[i].message()));
  }
  agent.join();
}

}  // namespace
}  // namespace drover

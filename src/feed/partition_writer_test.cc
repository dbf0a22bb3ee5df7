// External feeding end to end in one process: the agent's real FeedService
// serving an external plan, PartitionWriters as the feeding tasks, and a real
// DataFeed on another thread as the program.

#include "feed/partition_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/feed_service.h"
#include "drover/data_feed.h"
#include "feed/feed_plan.h"
#include "feed/feed_test_util.h"
#include "feed/socket_fd.h"
#include "testing/status_matchers.h"

namespace drover::feed {
namespace {

using ::drover::feed::testing::PublishBatch;
using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Code = Status::Code;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kTask[] = "worker:1";

// Records with every byte value somewhere, newlines included, of sizes that
// make some batches hold one record and others many.
std::vector<std::string> MakeRecords(int partition, int count) {
  std::vector<std::string> records;
  for (int i = 0; i < count; ++i) {
    std::string record = "p" + std::to_string(partition) + "-r" + std::to_string(i);
    if (i % 3 == 0) record += "\nline two\n";
    if (i % 7 == 0) record += std::string(static_cast<size_t>(i % 5) * 700, static_cast<char>(i));
    if (i % 11 == 0) record.push_back('\0');
    records.push_back(std::move(record));
  }
  return records;
}

std::vector<std::string_view> Views(const std::vector<std::string>& records) {
  return {records.begin(), records.end()};
}

// The program's thread. Destroyed before what it uses (declare it after),
// it stops the feed first if the test left early, so the thread returns.
class ProgramThread {
 public:
  template <typename Body>
  ProgramThread(FeedService& service, Body&& body)
      : service_(service), thread_(std::forward<Body>(body)) {}
  ~ProgramThread() {
    if (thread_.joinable()) {
      service_.Stop("the test ended early");
      thread_.join();
    }
  }
  void Join() { thread_.join(); }

 private:
  FeedService& service_;
  std::thread thread_;
};

class PartitionWriterTest : public ::testing::Test {
 protected:
  // A FeedService for an external plan, serving in `dir_`.
  void Serve(int64_t feed_timeout_ms = 30'000, uint64_t queue_bytes = 64 << 10) {
    FeedServiceOptions options;
    options.plan.external = true;
    options.plan.read.format = RecordFormat::kPickle;
    options.plan.feed_timeout_ms = feed_timeout_ms;
    options.plan.queue_bytes = queue_bytes;
    options.task = kTask;
    options.socket_dir = socket_dir_;
    options.say = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      said_.push_back(line);
    };
    options.on_failure = [this](const Status& status) {
      std::lock_guard<std::mutex> lock(mu_);
      failures_.push_back(status.ToString());
    };
    ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
    EXPECT_EQ(service_->socket_path(), socket_dir_ + "/feed.sock");
  }

  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    socket_dir_ = dir_.File("sock");
    ASSERT_EQ(::mkdir(socket_dir_.c_str(), 0700), 0);
  }
  void TearDown() override { service_.reset(); }

  PartitionWriterOptions WriterOptions(milliseconds feed_timeout = seconds(30)) {
    PartitionWriterOptions options;
    options.socket_path = service_->socket_path();
    options.connect_timeout = seconds(10);
    options.feed_timeout = feed_timeout;
    options.batch_bytes = 512;  // many batches per partition
    return options;
  }

  Result<std::unique_ptr<DataFeed>> ConnectReader(bool train_mode) {
    DataFeedOptions options;
    options.socket_path = service_->socket_path();
    options.train_mode = train_mode;
    options.timeout = seconds(30);
    return DataFeed::Connect(MapEnvironment(), options);
  }

  TempDir dir_;
  std::string socket_dir_;
  std::unique_ptr<FeedService> service_;
  std::mutex mu_;
  std::vector<std::string> said_;      // guarded by mu_
  std::vector<std::string> failures_;  // guarded by mu_
};

// What a training reader saw: the records of each epoch, in order.
struct TrainReading {
  Status status;
  std::map<int, std::vector<std::string>> by_epoch;
  bool stopped_at_end = false;
};

TrainReading ReadTraining(DataFeed& feed) {
  TrainReading reading;
  for (;;) {
    Result<RecordBatch> batch = feed.NextBatch(5);
    if (!batch.ok()) {
      reading.status = batch.status();
      return reading;
    }
    if (batch->records.empty()) break;
    for (std::string_view record : batch->records) {
      reading.by_epoch[batch->epoch].emplace_back(record);
    }
  }
  reading.stopped_at_end = feed.ShouldStop();
  return reading;
}

TEST_F(PartitionWriterTest, TrainingRoundTripThroughSuccessiveWriters) {
  Serve();
  TrainReading reading;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, ConnectReader(/*train_mode=*/true));
  ProgramThread program(*service_, [&] { reading = ReadTraining(*feed); });

  std::map<int, std::vector<std::string>> partitions;
  for (int p = 0; p < 3; ++p) partitions[p] = MakeRecords(p, 40 + 13 * p);
  partitions[3] = {};  // an empty partition is fed as its end alone
  for (int epoch = 0; epoch < 2; ++epoch) {
    // One writer per epoch, as one feeding task per partition would do; the
    // first leaves without ending the feed.
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                         PartitionWriter::Connect(WriterOptions()));
    EXPECT_EQ(writer->task(), kTask);
    for (auto& [p, records] : partitions) {
      ASSERT_OK(
          writer->Feed(static_cast<uint32_t>(p), static_cast<uint32_t>(epoch), Views(records)));
    }
    ASSERT_OK(writer->WaitConsumed());
    EXPECT_FALSE(writer->terminated());
    if (epoch == 1) {
      ASSERT_OK(writer->EndFeed());
    }
  }
  program.Join();
  ASSERT_OK(reading.status);
  EXPECT_TRUE(reading.stopped_at_end);
  std::vector<std::string> expected;
  for (auto& [p, records] : partitions)
    expected.insert(expected.end(), records.begin(), records.end());
  ASSERT_EQ(reading.by_epoch.size(), 2u);
  EXPECT_THAT(reading.by_epoch[0], ElementsAreArray(expected));
  EXPECT_THAT(reading.by_epoch[1], ElementsAreArray(expected));
  EXPECT_EQ(feed->records_read(), 2 * expected.size());
  EXPECT_EQ(feed->format(), "pickle");
  EXPECT_OK(service_->Finish());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_THAT(failures_, IsEmpty());
}

TEST_F(PartitionWriterTest, InferenceReturnsEachPartitionsResultsInOrder) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, ConnectReader(/*train_mode=*/false));
  Status reader_status;
  ProgramThread program(*service_, [&] {
    for (;;) {
      Result<RecordBatch> batch = feed->NextBatch(7);
      if (!batch.ok()) {
        reader_status = batch.status();
        return;
      }
      if (batch->records.empty()) break;
      std::vector<std::string> results;
      for (std::string_view record : batch->records) {
        results.push_back("result of\n" + std::string(record));
      }
      std::vector<std::string_view> views(results.begin(), results.end());
      if (Status answered = feed->BatchResults(views); !answered.ok()) {
        reader_status = answered;
        return;
      }
    }
  });

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions()));
  const std::vector<std::pair<uint32_t, std::vector<std::string>>> partitions = {
      {4, MakeRecords(4, 60)}, {5, {}}, {6, {"\n", "", "x\ny"}}, {7, {}}, {8, MakeRecords(8, 9)}};
  for (const auto& [p, records] : partitions) {
    std::vector<std::string> results = {"stale"};
    ASSERT_OK(writer->Feed(p, 0, Views(records), &results)) << "partition " << p;
    std::vector<std::string> expected;
    for (const std::string& record : records) expected.push_back("result of\n" + record);
    EXPECT_THAT(results, ElementsAreArray(expected)) << "partition " << p;
  }
  // A second writer goes on where the first left.
  writer.reset();
  ASSERT_OK_AND_ASSIGN(writer, PartitionWriter::Connect(WriterOptions()));
  std::vector<std::string> results;
  ASSERT_OK(writer->Feed(9, 0, {"last"}, &results));
  EXPECT_THAT(results, ElementsAreArray({"result of\nlast"}));
  ASSERT_OK(writer->EndFeed());
  program.Join();
  EXPECT_OK(reader_status);
  EXPECT_TRUE(feed->ShouldStop());
}

TEST_F(PartitionWriterTest, WrongNumberOfResultsNamesThePartition) {
  Serve();
  // A program that answers two records with one result (DataFeed would
  // refuse to), straight on the rings.
  ASSERT_OK_AND_ASSIGN(JoinedFeed joined, JoinFeed(service_->socket_path(), FeedRole::kReader,
                                                   false, Clock::now() + seconds(10)));
  ProgramThread program(*service_, [&] {
    RingReader input(joined.channel, /*input_ring=*/true);
    RingWriter output(joined.channel, /*input_ring=*/false);
    Result<std::optional<BatchView>> batch = input.Next(Clock::now() + seconds(30));
    if (!batch.ok() || !batch->has_value()) return;
    BatchInfo info = (*batch)->info;
    input.Release((*batch)->end);
    info.flags = kEndOfPartition;
    EXPECT_OK(PublishBatch(output, info, {"only one"}));
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions()));
  std::vector<std::string> results;
  EXPECT_THAT(writer->Feed(2, 0, {"a", "b"}, &results),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("worker:1 returned 1 results for the 2 records"),
                             HasSubstr("partition 2"))));
  program.Join();
}

TEST_F(PartitionWriterTest, OneWriterAtATime) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> first,
                       PartitionWriter::Connect(WriterOptions()));
  EXPECT_THAT(
      PartitionWriter::Connect(WriterOptions()),
      StatusIs(Code::kAlreadyExists, HasSubstr("the feed of worker:1 already has a writer")));
  first.reset();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> second,
                       PartitionWriter::Connect(WriterOptions()));
  // The agent's feeder may not join an external feed either.
  EXPECT_THAT(
      JoinFeed(service_->socket_path(), FeedRole::kWriter, true, Clock::now() + seconds(10)),
      StatusIs(Code::kFailedPrecondition, HasSubstr("fed from outside")));
}

TEST_F(PartitionWriterTest, WriterToAPlanFeedIsRefused) {
  ::drover::feed::testing::WriteFile(dir_.File("data.csv"), "a,b\n");
  FeedServiceOptions options;
  options.plan.read.format = RecordFormat::kCsv;
  options.plan.partitions = {Partition{dir_.File("data.csv"), 0, 4}};
  options.plan_path = dir_.File("plan.json");
  options.task = kTask;
  options.drover_binary = "/bin/true";  // a feeder with nothing to do
  options.socket_dir = socket_dir_;
  ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
  EXPECT_THAT(PartitionWriter::Connect(WriterOptions()),
              StatusIs(Code::kFailedPrecondition,
                       AllOf(HasSubstr("worker:1"), HasSubstr("drover run --input"))));
}

TEST_F(PartitionWriterTest, NobodyServingIsUnavailableNamingTheSocket) {
  PartitionWriterOptions options;
  options.socket_path = socket_dir_ + "/feed.sock";
  options.connect_timeout = milliseconds(100);
  EXPECT_THAT(PartitionWriter::Connect(options),
              StatusIs(Code::kUnavailable, HasSubstr(options.socket_path)));
}

TEST_F(PartitionWriterTest, FeedTimeoutNamesTheTask) {
  Serve(/*feed_timeout_ms=*/300);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions(milliseconds(300))));
  // More than the queue holds, and nobody reads.
  const std::vector<std::string> records(200, std::string(1000, 'x'));
  EXPECT_THAT(writer->Feed(0, 0, Views(records)),
              StatusIs(Code::kDeadlineExceeded,
                       AllOf(HasSubstr("feed timeout: worker:1 took no records for 0.3 s"),
                             HasSubstr("partition 0"))));
  EXPECT_THAT(writer->WaitConsumed(),
              StatusIs(Code::kDeadlineExceeded, HasSubstr("worker:1 took no records")));
}

TEST_F(PartitionWriterTest, InferenceTimeoutWhenResultsNeverCome) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, ConnectReader(/*train_mode=*/false));
  std::atomic<bool> done{false};
  ProgramThread program(*service_, [&] {
    Result<RecordBatch> batch = feed->NextBatch(10);  // read, never answered
    while (!done) std::this_thread::sleep_for(milliseconds(5));
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions(milliseconds(300))));
  std::vector<std::string> results;
  EXPECT_THAT(writer->Feed(3, 0, {"a", "b"}, &results),
              StatusIs(Code::kDeadlineExceeded,
                       AllOf(HasSubstr("feed timeout: worker:1 returned no results for 0.3 s"),
                             HasSubstr("partition 3"))));
  done = true;
}

// A slow program is not a timeout: once every record is written, the wait
// for results is the feed timeout, not the wait slice it is checked in (the
// writer finishing during a slice once turned 100 ms into "600 s"). Each
// partition overfills the queue, so the writer finishes only after the
// program took some, while the results are still being worked out.
TEST_F(PartitionWriterTest, ResultsSlowerThanOneWaitSliceAreWaitedFor) {
  Serve();  // 64 KiB queue
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, ConnectReader(/*train_mode=*/false));
  ProgramThread program(*service_, [&] {
    for (;;) {
      Result<RecordBatch> batch = feed->NextBatch(1000);
      if (!batch.ok() || batch->records.empty()) return;
      std::this_thread::sleep_for(milliseconds(250));
      std::vector<std::string_view> results(batch->records.begin(), batch->records.end());
      if (!feed->BatchResults(results).ok()) return;
    }
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions(seconds(30))));
  const std::vector<std::string> records(80, std::string(1000, 'r'));
  for (uint32_t partition = 0; partition < 3; ++partition) {
    std::vector<std::string> results;
    ASSERT_OK(writer->Feed(partition, 0, Views(records), &results)) << "partition " << partition;
    EXPECT_EQ(results.size(), records.size());
  }
  ASSERT_OK(writer->EndFeed());
  program.Join();
}

TEST_F(PartitionWriterTest, StoppedFeedIsUnavailableWithTheReason) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions()));
  const std::vector<std::string> records(200, std::string(1000, 'x'));
  Status fed;
  std::thread feeding([&] { fed = writer->Feed(0, 0, Views(records)); });
  std::this_thread::sleep_for(milliseconds(50));  // usually waiting for room by now
  service_->Stop("worker:1 exited with exit code 3");
  feeding.join();
  EXPECT_THAT(fed,
              StatusIs(Code::kUnavailable,
                       HasSubstr("feeding worker:1 stopped: worker:1 exited with exit code 3")));
  EXPECT_THAT(writer->Feed(1, 0, {"more"}), StatusIs(Code::kUnavailable, HasSubstr("stopped")));
  EXPECT_THAT(writer->WaitConsumed(), StatusIs(Code::kUnavailable, HasSubstr("exit code 3")));
  // The socket directory goes with the service.
  EXPECT_FALSE(std::filesystem::exists(socket_dir_));
}

TEST_F(PartitionWriterTest, TerminatedFeedDropsTrainingRecordsAndCancelsInference) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, ConnectReader(/*train_mode=*/true));
  ProgramThread program(*service_, [&] {
    Result<RecordBatch> batch = feed->NextBatch(3);
    EXPECT_TRUE(batch.ok() && !batch->records.empty());
    feed->Terminate();
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions()));
  // Far more than the queue holds: only a terminate lets this return.
  const std::vector<std::string> records(400, std::string(1000, 'x'));
  EXPECT_OK(writer->Feed(0, 0, Views(records)));
  EXPECT_TRUE(writer->terminated());
  EXPECT_OK(writer->Feed(1, 0, Views(records)));  // dropped
  EXPECT_OK(writer->WaitConsumed());
  std::vector<std::string> results;
  EXPECT_THAT(writer->Feed(2, 0, {"a"}, &results),
              StatusIs(Code::kCancelled, AllOf(HasSubstr("worker:1"), HasSubstr("terminated"))));
}

TEST_F(PartitionWriterTest, EndFeedEndsTheReadersFeedAndRefusesLaterWriters) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> feed, ConnectReader(/*train_mode=*/true));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions()));
  ASSERT_OK(writer->Feed(0, 0, {"a", "b"}));
  ASSERT_OK(writer->EndFeed());
  EXPECT_THAT(writer->Feed(1, 0, {"c"}),
              StatusIs(Code::kFailedPrecondition, HasSubstr("has ended")));
  // While it is still connected, it is the feed's writer.
  EXPECT_THAT(PartitionWriter::Connect(WriterOptions()), StatusIs(Code::kAlreadyExists, _));
  writer.reset();
  EXPECT_THAT(PartitionWriter::Connect(WriterOptions()),
              StatusIs(Code::kFailedPrecondition, HasSubstr("the feed of worker:1 has ended")));

  // What was queued is still read, then nothing.
  ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed->NextBatch(10));
  EXPECT_THAT(std::vector<std::string>(batch.records.begin(), batch.records.end()),
              ElementsAreArray({"a", "b"}));
  ASSERT_OK_AND_ASSIGN(batch, feed->NextBatch(10));
  EXPECT_THAT(batch.records, IsEmpty());
  EXPECT_TRUE(feed->ShouldStop());
}

TEST_F(PartitionWriterTest, RecordLargerThanHalfTheQueueIsRefused) {
  Serve();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PartitionWriter> writer,
                       PartitionWriter::Connect(WriterOptions()));
  const std::string huge(40 << 10, 'x');  // the queue is 64 KiB per direction
  EXPECT_THAT(writer->Feed(5, 0, {"small", huge}),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("record 1 of partition 5"), HasSubstr("worker:1"))));
}

}  // namespace
}  // namespace drover::feed

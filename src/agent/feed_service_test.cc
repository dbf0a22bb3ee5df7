// The agent's FeedService against programs that misbehave: real processes
// (a "program" process that maps the queue as the reader) and the real
// service; issue #15.

#include "agent/feed_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/test_util.h"
#include "drover/data_feed.h"
#include "feed/feed_plan.h"
#include "feed/feed_test_util.h"
#include "feed/partition_writer.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "testing/child_process.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::feed::testing::ExitedWith;
using ::drover::feed::testing::kInputOffsetOffset;
using ::drover::feed::testing::kOutputOffsetOffset;
using ::drover::feed::testing::kRingBytesOffset;
using ::drover::feed::testing::kWritePos;
using ::drover::feed::testing::OutputRingHeader;
using ::drover::feed::testing::Scribble;
using ::drover::testing::Child;
using ::drover::testing::ChildBody;
using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr char kTask[] = "worker:1";
constexpr uint64_t kQueueBytes = 64 << 10;

class FeedServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_dir_ = dir_.File("sock");
    ASSERT_EQ(::mkdir(socket_dir_.c_str(), 0700), 0);
  }

  FeedServiceOptions BaseOptions() {
    FeedServiceOptions options;
    options.plan.queue_bytes = kQueueBytes;
    options.plan.feed_timeout_ms = 30'000;
    options.task = kTask;
    options.socket_dir = socket_dir_;
    options.on_failure = [this](const Status& status) {
      std::lock_guard<std::mutex> lock(mu_);
      failures_.push_back(status.ToString());
    };
    return options;
  }

  // An inference plan over one small CSV file, with a feeder that feeds
  // nothing (/bin/true): the agent reads the results ring itself.
  void ServeInference() {
    testing::WriteFile(dir_.File("data.csv"), "a\nb\n");
    FeedServiceOptions options = BaseOptions();
    options.plan.mode = feed::FeedMode::kInference;
    options.plan.read.format = feed::RecordFormat::kCsv;
    options.plan.partitions = {feed::Partition{dir_.File("data.csv"), 0, 4}};
    options.plan.output_dir = dir_.File("out");
    options.plan_path = dir_.File("plan.json");
    options.drover_binary = "/bin/true";
    ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
  }

  // An external plan (drover.Cluster.train): writers join from outside.
  void ServeExternal() {
    FeedServiceOptions options = BaseOptions();
    options.plan.external = true;
    options.plan.read.format = feed::RecordFormat::kPickle;
    ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
  }

  Result<std::unique_ptr<DataFeed>> ConnectReader() {
    DataFeedOptions options;
    options.socket_path = service_->socket_path();
    options.timeout = seconds(10);
    return DataFeed::Connect(MapEnvironment(), options);
  }

  // The failures reported so far, waiting up to `timeout` for the first.
  std::vector<std::string> AwaitFailures(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!failures_.empty() || std::chrono::steady_clock::now() >= deadline) return failures_;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

  TempDir dir_;
  std::string socket_dir_;
  std::unique_ptr<FeedService> service_;
  std::mutex mu_;
  std::vector<std::string> failures_;  // guarded by mu_
};

// The program (a child process, as the reader) writes over the channel's
// sizes and the results ring's write position. The agent keeps its own
// copy of the sizes, refuses the position, and reports the feed as failed;
// it never reads outside the queue (the ASan build checks).
// The program of the test below: joins the feed at `path` as its reader and
// scribbles over the queue's header.
const ChildBody kHeaderScribbler("header_scribbler", [](const std::string& path) {
  Result<feed::JoinedFeed> joined =
      feed::JoinFeed(path, feed::FeedRole::kReader, /*train_mode=*/false,
                     std::chrono::steady_clock::now() + seconds(10));
  if (!joined.ok()) return 2;
  const int fd = joined->channel.fd();
  const uint64_t output = OutputRingHeader(joined->channel);
  bool wrote = Scribble<uint64_t>(fd, kRingBytesOffset, uint64_t{1} << 40) &&
               Scribble<uint64_t>(fd, kInputOffsetOffset, ~uint64_t{0}) &&
               Scribble<uint64_t>(fd, kOutputOffsetOffset, 3) &&
               Scribble<uint64_t>(fd, output + kWritePos, (uint64_t{1} << 62) + 8);
  return wrote ? 0 : 3;
});

TEST_F(FeedServiceTest, ProgramThatCorruptsTheQueueHeaderFailsTheFeedNotTheAgent) {
  ASSERT_NO_FATAL_FAILURE(ServeInference());
  Child program(kHeaderScribbler, service_->socket_path());
  ASSERT_TRUE(program.started());
  EXPECT_TRUE(ExitedWith(program.Wait(seconds(20)), 0));

  const std::vector<std::string> failures = AwaitFailures(seconds(20));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0], HasSubstr("reading the results of worker:1"));
  EXPECT_THAT(failures[0], HasSubstr("corrupt feed queue header: write_pos"));
  // The heartbeat's view still uses the sizes the agent made.
  const FeedProgress progress = service_->Progress();
  EXPECT_EQ(progress.queue_capacity, kQueueBytes);
  EXPECT_LE(progress.queue_bytes, kQueueBytes);
  service_->Stop("the test is over");
}

// Issue #15: a reader that reconnects. Records handed to a reader are never
// handed again, whether it took a whole batch or part of one; the next
// reader starts right after them, and may connect the moment the last one
// is gone.
TEST_F(FeedServiceTest, ReaderThatReconnectsIsNotHandedThePreviousReadersRecordsAgain) {
  ASSERT_NO_FATAL_FAILURE(ServeExternal());
  feed::PartitionWriterOptions writer_options;
  writer_options.socket_path = service_->socket_path();
  writer_options.connect_timeout = seconds(10);
  writer_options.feed_timeout = seconds(10);
  writer_options.batch_bytes = 40;  // a few records per batch
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<feed::PartitionWriter> writer,
                       feed::PartitionWriter::Connect(writer_options));
  std::vector<std::string> records;
  for (int i = 0; i < 40; ++i) records.push_back("record-" + std::to_string(100 + i));
  ASSERT_OK(writer->Feed(0, 0, {records.begin(), records.end()}));

  std::vector<std::string> seen;
  auto read = [&](DataFeed& feed, size_t count) {
    ASSERT_OK_AND_ASSIGN(RecordBatch batch, feed.NextBatch(count));
    for (std::string_view record : batch.records) seen.emplace_back(record);
  };
  {  // Part of the first batch.
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> first, ConnectReader());
    ASSERT_NO_FATAL_FAILURE(read(*first, 2));
    ASSERT_EQ(seen.size(), 2u);
  }
  {  // The rest of it and more: ends inside a later batch.
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> second, ConnectReader());
    ASSERT_NO_FATAL_FAILURE(read(*second, 7));
    ASSERT_NO_FATAL_FAILURE(read(*second, 5));
  }
  {  // Connects and leaves without reading.
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> idle, ConnectReader());
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> last, ConnectReader());
  while (seen.size() < records.size()) {
    const size_t before = seen.size();
    ASSERT_NO_FATAL_FAILURE(read(*last, 100));
    ASSERT_GT(seen.size(), before) << "the feed ended early";
  }
  EXPECT_THAT(seen, ElementsAreArray(records));
  ASSERT_OK(writer->EndFeed());
  ASSERT_OK_AND_ASSIGN(RecordBatch end, last->NextBatch(100));
  EXPECT_TRUE(end.records.empty());
  // Counted once each too.
  EXPECT_EQ(service_->Progress().records, records.size());
}

// A feeder stops the feed on a bad record, then exits; the program, which
// sees the error in the queue at once, may exit before the service reaped
// the feeder and reported the failure. The agent asks Failure() then, so
// the node fails with the feed's error rather than the program's exit code.
TEST_F(FeedServiceTest, AFeedStoppedWithAnErrorIsAFailureBeforeItsWriterIsGone) {
  // The feeder that stops the feed (joined below) outlives its error, as a
  // real one does for a moment: the process the service starts only waits.
  testing::WriteFile(dir_.File("data.csv"), "a\nb\n");
  testing::WriteFile(dir_.File("waiting-feeder"), "#!/bin/sh\nexec sleep 60\n");
  ASSERT_EQ(::chmod(dir_.File("waiting-feeder").c_str(), 0755), 0);
  FeedServiceOptions options = BaseOptions();
  options.plan.read.format = feed::RecordFormat::kCsv;
  options.plan.partitions = {feed::Partition{dir_.File("data.csv"), 0, 4, 2}};
  options.plan_path = dir_.File("plan.json");
  options.drover_binary = dir_.File("waiting-feeder");
  ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
  EXPECT_OK(service_->Failure());
  ASSERT_OK_AND_ASSIGN(
      feed::JoinedFeed writer,
      feed::JoinFeed(service_->socket_path(), feed::FeedRole::kWriter,
                     /*train_mode=*/true, std::chrono::steady_clock::now() + seconds(10)));
  writer.channel.SetError("bad.tfrecord: record 20000 is corrupt");
  writer.channel.AdvanceState(feed::RunState::kStopped);
  EXPECT_THAT(service_->Failure(),
              StatusIs(Status::Code::kUnavailable,
                       HasSubstr("feeding worker:1 failed: bad.tfrecord: record 20000")));
  service_->Stop("the test is over");
}

TEST_F(FeedServiceTest, AFeedTheAgentStoppedIsNoFailure) {
  ASSERT_NO_FATAL_FAILURE(ServeExternal());
  service_->Stop("worker:1 stopped");
  EXPECT_OK(service_->Failure());
}

class FeedServiceCommitTest : public FeedServiceTest {
 protected:
  // A training plan over one file of two records, with a feeder that feeds
  // nothing: the test speaks the reader's side of the socket itself.
  void ServeTraining(std::function<Status(const feed::FeedPosition&)> record_commit,
                     std::vector<std::optional<feed::FeedPosition>> starts = {}) {
    testing::WriteFile(dir_.File("data.csv"), "a\nb\n");
    FeedServiceOptions options = BaseOptions();
    options.plan.read.format = feed::RecordFormat::kCsv;
    options.plan.epochs = 2;
    options.plan.partitions = {feed::Partition{dir_.File("data.csv"), 0, 4, 2}};
    options.plan.starts = std::move(starts);
    options.plan_path = dir_.File("plan.json");
    options.drover_binary = "/bin/true";
    options.record_commit = std::move(record_commit);
    ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
    ASSERT_OK_AND_ASSIGN(joined_, feed::JoinFeed(service_->socket_path(), feed::FeedRole::kReader,
                                                 /*train_mode=*/true,
                                                 std::chrono::steady_clock::now() + seconds(10)));
  }

  // Sends one request line and returns what the agent answered.
  Result<std::optional<feed::FeedPosition>> Ask(const std::string& line) {
    DROVER_RETURN_IF_ERROR(feed::SendMessage(joined_->socket.get(), line));
    std::string answer;
    os::UniqueFd none;
    DROVER_RETURN_IF_ERROR(feed::ReceiveMessage(
        joined_->socket.get(), std::chrono::steady_clock::now() + seconds(10), &answer, &none));
    std::optional<feed::FeedPosition> position;
    DROVER_RETURN_IF_ERROR(feed::DecodeCommitAnswer(answer, &position));
    return position;
  }
  Result<std::optional<feed::FeedPosition>> Commit(std::optional<feed::FeedPosition> position) {
    return Ask(feed::EncodeCommitRequest(position));
  }

  std::optional<feed::JoinedFeed> joined_;
};

// A commit's answer as text: the position's JSON, "none", or the error.
std::string Text(const Result<std::optional<feed::FeedPosition>>& answer) {
  if (!answer.ok()) return answer.status().ToString();
  return *answer ? feed::FeedPositionToJson(**answer) : "none";
}

TEST_F(FeedServiceCommitTest, CommitsAreRecordedInOrderAndAnsweredWithThePosition) {
  std::vector<feed::FeedPosition> recorded;
  ASSERT_NO_FATAL_FAILURE(ServeTraining([&](const feed::FeedPosition& position) {
    recorded.push_back(position);
    return Status::Ok();
  }));
  EXPECT_EQ(Text(Commit(std::nullopt)), "none") << "nothing yet";
  const feed::FeedPosition first{0, 1, false};
  EXPECT_EQ(Text(Commit(first)), feed::FeedPositionToJson(first));
  const feed::FeedPosition done{0, 2, true};
  EXPECT_EQ(Text(Commit(done)), feed::FeedPositionToJson(done));
  EXPECT_EQ(Text(Commit(std::nullopt)), feed::FeedPositionToJson(done))
      << "a reader that read nothing new gets the position on record";
  EXPECT_THAT(Commit(first), StatusIs(Status::Code::kInvalidArgument,
                                      HasSubstr("a position before the last commit")));
  EXPECT_THAT(Commit(feed::FeedPosition{2, 0, false}),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("feed 2 of 2 does not exist")));
  EXPECT_THAT(Commit(feed::FeedPosition{1, 3, false}),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("has 2 records, not 3")));
  EXPECT_EQ(recorded, (std::vector<feed::FeedPosition>{first, done}));
  // A request that is not one loses the connection: the reader is gone.
  EXPECT_THAT(Ask("{\"hello\": 1}"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bad feed request")));
  char byte;
  EXPECT_EQ(::recv(joined_->socket.get(), &byte, 1, 0), 0);
}

TEST_F(FeedServiceCommitTest, APlanStartIsThePositionOnRecord) {
  const feed::FeedPosition start{1, 1, false};
  ASSERT_NO_FATAL_FAILURE(
      ServeTraining([](const feed::FeedPosition&) { return Status::Ok(); }, {start}));
  EXPECT_EQ(Text(Commit(std::nullopt)), feed::FeedPositionToJson(start));
}

TEST_F(FeedServiceCommitTest, WhatTheDriverRefusesIsRefusedAndNotOnRecord) {
  ASSERT_NO_FATAL_FAILURE(ServeTraining(
      [](const feed::FeedPosition&) { return Status::Unavailable("the driver is gone"); }));
  EXPECT_THAT(Commit(feed::FeedPosition{0, 1, false}),
              StatusIs(Status::Code::kUnavailable, HasSubstr("the driver is gone")));
  EXPECT_EQ(Text(Commit(std::nullopt)), "none");
}

TEST_F(FeedServiceCommitTest, WithoutADriverCommitsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(ServeTraining(nullptr));
  EXPECT_THAT(Commit(feed::FeedPosition{0, 1, false}),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("no driver")));
}

class FeedServiceClaimTest : public FeedServiceTest {
 protected:
  // A dynamic plan over two partitions of two epochs, with a feeder that
  // feeds nothing: the test speaks the feeder's side of the socket itself.
  void ServeDynamic(std::function<Result<std::optional<uint64_t>>(uint32_t)> claim_feed,
                    feed::Balance balance = feed::Balance::kDynamic) {
    testing::WriteFile(dir_.File("data.csv"), "a\nb\nc\n");
    FeedServiceOptions options = BaseOptions();
    options.plan.read.format = feed::RecordFormat::kCsv;
    options.plan.epochs = 2;
    options.plan.partitions = {feed::Partition{dir_.File("data.csv"), 0, 4, 2},
                               feed::Partition{dir_.File("data.csv"), 4, 6, 1}};
    options.plan.balance = balance;
    options.plan_path = dir_.File("plan.json");
    options.drover_binary = "/bin/true";
    options.claim_feed = std::move(claim_feed);
    ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
    ASSERT_OK_AND_ASSIGN(joined_, feed::JoinFeed(service_->socket_path(), feed::FeedRole::kWriter,
                                                 /*train_mode=*/true,
                                                 std::chrono::steady_clock::now() + seconds(10)));
  }
  Result<std::optional<feed::FeedUnit>> Claim(uint32_t seq) {
    return feed::ClaimFeed(joined_->socket.get(), seq,
                           std::chrono::steady_clock::now() + seconds(10));
  }

  std::optional<feed::JoinedFeed> joined_;
};

TEST_F(FeedServiceClaimTest, ClaimsTakeTheDriversNextEntryOnceAndAFeederAskingAgainGetsTheSame) {
  std::vector<uint32_t> asked;
  ASSERT_NO_FATAL_FAILURE(ServeDynamic([&](uint32_t seq) -> Result<std::optional<uint64_t>> {
    asked.push_back(seq);
    // Another node took entries 0 and 2: this one gets 1, then 3, then none.
    if (asked.size() == 1) return std::optional<uint64_t>(1);
    if (asked.size() == 2) return std::optional<uint64_t>(3);
    return std::optional<uint64_t>();
  }));
  ASSERT_OK_AND_ASSIGN(std::optional<feed::FeedUnit> first, Claim(0));
  EXPECT_EQ(first, (feed::FeedUnit{0, 1}));
  ASSERT_OK_AND_ASSIGN(std::optional<feed::FeedUnit> again, Claim(0));
  EXPECT_EQ(again, first) << "a feeder started again is in the same feed";
  EXPECT_THAT(Claim(2),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("claim: feed 2 before feed 1")));
}

TEST_F(FeedServiceClaimTest, AnEmptyQueueEndsTheFeedAndTheDriverIsNotAskedAgain) {
  std::vector<uint32_t> asked;
  ASSERT_NO_FATAL_FAILURE(ServeDynamic([&](uint32_t seq) -> Result<std::optional<uint64_t>> {
    asked.push_back(seq);
    if (asked.size() <= 2) return std::optional<uint64_t>(asked.size() == 1 ? 3 : 0);
    return std::optional<uint64_t>();
  }));
  EXPECT_EQ(Claim(0).value(), (feed::FeedUnit{1, 1}));
  EXPECT_EQ(Claim(1).value(), (feed::FeedUnit{0, 0}));
  EXPECT_EQ(Claim(2).value(), std::nullopt);
  EXPECT_EQ(Claim(2).value(), std::nullopt);
  EXPECT_EQ(asked, (std::vector<uint32_t>{0, 1, 2}));
  // What it claimed is its share so far; no share size, so no estimate.
  const FeedProgress progress = service_->Progress();
  EXPECT_EQ(progress.partitions_total, 2u);
  EXPECT_EQ(progress.share_bytes, 0u);
}

TEST_F(FeedServiceClaimTest, WhatTheDriverCannotHandOutIsAnErrorAndTheFeederLosesItsConnection) {
  ASSERT_NO_FATAL_FAILURE(ServeDynamic([](uint32_t) -> Result<std::optional<uint64_t>> {
    return std::optional<uint64_t>(4);  // a queue of 4
  }));
  Result<std::optional<feed::FeedUnit>> claimed = Claim(0);
  ASSERT_FALSE(claimed.ok());
  EXPECT_THAT(claimed.status().message(), HasSubstr("entry 4 of a queue of 4"));
  char byte;
  EXPECT_EQ(::recv(joined_->socket.get(), &byte, 1, 0), 0);
}

TEST_F(FeedServiceClaimTest, AnEqualFeedHasNothingToClaim) {
  ASSERT_NO_FATAL_FAILURE(ServeDynamic(nullptr, feed::Balance::kEqual));
  EXPECT_THAT(Claim(0), StatusIs(Status::Code::kFailedPrecondition,
                                 HasSubstr("is not dynamic: there is nothing to claim")));
}

TEST_F(FeedServiceClaimTest, WithoutADriverClaimsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(ServeDynamic(nullptr));
  EXPECT_THAT(Claim(0), StatusIs(Status::Code::kFailedPrecondition, HasSubstr("no driver")));
}

// The node whose feeder starts first must not take every small partition
// of a dynamic feed before the other nodes' feeders start: a real feeder
// (`drover feeder`) claims its next partition only once the program is done
// with the ones before the last it claimed, so at most two partitions of the
// node are queued, and a batch that reaches the end of them is handed out
// instead of waiting for a third.
TEST_F(FeedServiceTest, ADynamicFeederQueuesAtMostTwoPartitionsAheadOfItsProgram) {
  constexpr int kPartitions = 6;
  testing::WriteFile(dir_.File("data.csv"), "0\n1\n2\n3\n4\n5\n");
  FeedServiceOptions options = BaseOptions();
  options.plan.read.format = feed::RecordFormat::kCsv;
  for (uint64_t i = 0; i < kPartitions; ++i) {
    options.plan.partitions.push_back(feed::Partition{dir_.File("data.csv"), 2 * i, 2 * i + 2, 1});
  }
  options.plan.balance = feed::Balance::kDynamic;
  options.plan_path = dir_.File("plan.json");
  ASSERT_OK(options.plan.WriteFile(options.plan_path));  // the driver's part
  options.drover_binary = DROVER_BIN_PATH;               // runs `drover feeder`
  std::atomic<int> claims{0};
  options.claim_feed = [&claims](uint32_t) -> Result<std::optional<uint64_t>> {
    const int entry = claims.fetch_add(1);
    if (entry >= kPartitions) return std::optional<uint64_t>();
    return std::optional<uint64_t>(entry);
  };
  ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DataFeed> reader, ConnectReader());

  std::vector<std::vector<std::string>> batches;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(RecordBatch batch, reader->NextBatch(100));
    if (batch.records.empty()) break;
    batches.emplace_back(batch.records.begin(), batch.records.end());
    EXPECT_LE(claims.load(), 2 * static_cast<int>(batches.size()))
        << "the feeder claimed a partition while the program still held two";
  }
  using Batch = std::vector<std::string>;
  EXPECT_THAT(batches, ElementsAreArray({Batch{"0", "1"}, Batch{"2", "3"}, Batch{"4", "5"}}));
  EXPECT_EQ(claims.load(), kPartitions + 1) << "one claim a partition, and one that found none";
  EXPECT_THAT(AwaitFailures(milliseconds(0)), ::testing::IsEmpty());
}

}  // namespace
}  // namespace drover

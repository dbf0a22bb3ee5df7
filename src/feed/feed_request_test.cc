#include "feed/feed_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover::feed {
namespace {

using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::HasSubstr;
using Code = Status::Code;

class PlanFeedTest : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(dir_.File("data.csv")) << "1,a\n2,b\n3,c\n"; }
  FeedRequest Request() {
    FeedRequest request;
    request.inputs = {dir_.File("data.csv")};
    return request;
  }
  TempDir dir_;
};

TEST_F(PlanFeedTest, NoInputIsNoPlanUnlessAFeedingFlagIsGiven) {
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> none, PlanFeed(FeedRequest{}));
  EXPECT_FALSE(none.has_value());
  FeedRequest epochs_alone;
  epochs_alone.epochs = 3;
  EXPECT_THAT(PlanFeed(epochs_alone).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("go with --input")));
}

TEST_F(PlanFeedTest, FormatComesFromTheExtensionAndTheFlagsReachThePlan) {
  FeedRequest request = Request();
  request.epochs = 2;
  request.split_bytes = 4;
  request.queue_bytes = 1 << 16;
  request.feed_timeout_seconds = 1.5;
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> plan, PlanFeed(request));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->read.format, RecordFormat::kCsv);
  EXPECT_EQ(plan->mode, FeedMode::kTrain);
  EXPECT_EQ(plan->epochs, 2);
  EXPECT_EQ(plan->queue_bytes, 1u << 16);
  EXPECT_EQ(plan->feed_timeout_ms, 1500);
  EXPECT_GT(plan->partitions.size(), 1u) << "split every 4 bytes";
  EXPECT_EQ(FormatOfExtension("x/part-1.tfrecords"), "tfrecord");
  EXPECT_EQ(FormatOfExtension("x.ndjson"), "jsonl");
  EXPECT_EQ(FormatOfExtension("x.bin"), "");
}

TEST_F(PlanFeedTest, TheQueueIsSmallForSmallRawRecordsUnlessOneIsGiven) {
  FeedRequest csv = Request();
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> plan, PlanFeed(csv));
  EXPECT_EQ(plan->queue_bytes, 64u << 20) << "records of unknown size";
  PlanOptions raw;
  raw.format = RecordFormat::kRaw;
  raw.record_bytes = 3140;
  EXPECT_EQ(DefaultQueueBytes(raw), 4u << 20);
  raw.record_bytes = 256 << 10;
  EXPECT_EQ(DefaultQueueBytes(raw), 4u << 20);
  raw.record_bytes = (256 << 10) + 1;
  EXPECT_EQ(DefaultQueueBytes(raw), 64u << 20);
  raw.record_bytes = 0;  // one record per file
  EXPECT_EQ(DefaultQueueBytes(raw), 64u << 20);
}

TEST_F(PlanFeedTest, BadCombinationsNameTheFlags) {
  FeedRequest unknown_extension = Request();
  unknown_extension.inputs = {dir_.File("data.bin")};
  EXPECT_THAT(PlanFeed(unknown_extension).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("give --format")));
  FeedRequest record_bytes = Request();
  record_bytes.record_bytes = 8;
  EXPECT_THAT(PlanFeed(record_bytes).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("--record-bytes goes with --format raw")));
  FeedRequest mode = Request();
  mode.mode = "predict";
  EXPECT_THAT(PlanFeed(mode).status(), StatusIs(Code::kInvalidArgument, HasSubstr("'predict'")));
  FeedRequest output = Request();
  output.output = dir_.File("out");
  EXPECT_THAT(PlanFeed(output).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("--output goes with --mode inference")));
  FeedRequest inference = Request();
  inference.mode = "inference";
  EXPECT_THAT(PlanFeed(inference).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("needs --output")));
  inference.output = dir_.File("out");
  inference.epochs = 2;
  EXPECT_THAT(PlanFeed(inference).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("one epoch")));
}

TEST_F(PlanFeedTest, FeedIngestGoesWithFixedSizeRawRecords) {
  std::ofstream(dir_.File("data.bin")) << "abcdefgh";
  FeedRequest raw = Request();
  raw.inputs = {dir_.File("data.bin")};
  raw.format = "raw";
  raw.record_bytes = 4;
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> plan, PlanFeed(raw));
  EXPECT_EQ(plan->ingest, Ingest::kMeasure);
  raw.ingest = "read";
  ASSERT_OK_AND_ASSIGN(plan, PlanFeed(raw));
  EXPECT_EQ(plan->ingest, Ingest::kRead);
  raw.ingest = "mmap";
  EXPECT_THAT(PlanFeed(raw).status(),
              StatusIs(Code::kInvalidArgument,
                       HasSubstr("--feed-ingest takes measure, map, read, extent or extent-read")));
  raw.ingest = "map\n\x1b[2J";  // what the user typed comes back escaped, on one line
  EXPECT_THAT(PlanFeed(raw).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("not 'map\\x0a\\x1b[2J'")));
  // CSV, JSONL and TFRecord windows are mapped or read; extents are raw's.
  FeedRequest csv = Request();
  csv.ingest = "read";
  ASSERT_OK_AND_ASSIGN(plan, PlanFeed(csv));
  EXPECT_EQ(plan->ingest, Ingest::kRead);
  csv.ingest = "extent";
  EXPECT_THAT(PlanFeed(csv).status(),
              StatusIs(Code::kInvalidArgument,
                       HasSubstr("--feed-ingest extent goes with --format raw --record-bytes N: "
                                 "CSV, JSONL and TFRecord files and whole-file raw records are "
                                 "mapped or read a window at a time")));
  // So are whole-file raw records' (a file a window).
  FeedRequest whole = Request();
  whole.format = "raw";
  for (const char* way : {"measure", "map", "read"}) {
    whole.ingest = way;
    ASSERT_OK_AND_ASSIGN(plan, PlanFeed(whole));
    EXPECT_EQ(IngestName(plan->ingest), way);
  }
  whole.ingest = "extent-read";
  EXPECT_THAT(
      PlanFeed(whole).status(),
      StatusIs(Code::kInvalidArgument,
               HasSubstr("--feed-ingest extent-read goes with --format raw --record-bytes")));
  FeedRequest alone;
  alone.ingest = "map";
  EXPECT_THAT(PlanFeed(alone).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("go with --input")));
}

TEST_F(PlanFeedTest, InferenceRefusesAnOutputDirectoryWithResults) {
  FeedRequest request = Request();
  request.mode = "inference";
  request.output = dir_.File("out");
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> plan, PlanFeed(request));
  EXPECT_EQ(plan->mode, FeedMode::kInference);
  EXPECT_EQ(plan->output_dir, dir_.File("out"));
  std::filesystem::create_directories(dir_.File("out"));
  std::ofstream(dir_.File("out/part-00000")) << "old\n";
  EXPECT_THAT(PlanFeed(request).status(),
              StatusIs(Code::kAlreadyExists, HasSubstr("already holds results (part-00000)")));
}

TEST_F(PlanFeedTest, OnlyEmptyInputsIsNothingToFeed) {
  std::ofstream(dir_.File("empty.csv")) << "";
  FeedRequest request = Request();
  request.inputs = {dir_.File("empty.csv")};
  EXPECT_THAT(PlanFeed(request).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("nothing to feed")));
}

}  // namespace
}  // namespace drover::feed

#include "feed/share_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "feed/record_index.h"
#include "feed/record_io.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover::feed {
namespace {

using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using Code = Status::Code;

class ShareLayoutTest : public ::testing::Test {
 protected:
  // Writes `count` CSV lines "name-i" (an empty line after every 7th, which
  // is no record) and returns the file's path.
  std::string WriteCsv(const std::string& name, int count) {
    const std::string path = dir_.File(name + ".csv");
    std::ofstream out(path);
    for (int i = 0; i < count; ++i) {
      out << name << "-" << i << "\n";
      if (i % 7 == 6) out << "\n";
    }
    return path;
  }

  Result<FeedPlan> Laid(const std::vector<std::string>& inputs, int nodes, Remainder remainder,
                        FeedMode mode = FeedMode::kTrain, PlanOptions read = {}) {
    FeedPlan plan;
    plan.mode = mode;
    plan.read = read;
    DROVER_ASSIGN_OR_RETURN(plan.partitions, PlanPartitions(inputs, read));
    return LayOutEqualShares(std::move(plan), nodes, remainder);
  }

  // The records each share is fed in an epoch, in order.
  static std::vector<std::vector<std::string>> SharesRead(const FeedPlan& plan) {
    std::vector<std::vector<std::string>> shares;
    for (const std::vector<uint32_t>& share : plan.shares) {
      std::vector<std::string>& records = shares.emplace_back();
      for (uint32_t p : share) {
        const Partition& partition = plan.partitions[p];
        auto reader = RecordReader::Open(partition, plan.read, partition.begin);
        EXPECT_OK(reader);
        if (!reader.ok()) return {};
        std::string_view record;
        uint64_t read = 0;
        while ((*reader)->Next(&record).value_or(false)) {
          records.emplace_back(record);
          ++read;
        }
        EXPECT_EQ(read, partition.records.value_or(read)) << partition.Name();
      }
    }
    return shares;
  }

  static std::map<std::string, int> Counts(const std::vector<std::vector<std::string>>& shares) {
    std::map<std::string, int> counts;
    for (const auto& share : shares) {
      for (const std::string& record : share) ++counts[record];
    }
    return counts;
  }

  TempDir dir_;
};

TEST_F(ShareLayoutTest, FourFilesOnThreeNodesArePaddedToEqualShares) {
  // The quick start's situation: 4 shards, 3 workers, 1001 records.
  const std::vector<std::string> inputs = {WriteCsv("a", 300), WriteCsv("b", 250),
                                           WriteCsv("c", 250), WriteCsv("d", 201)};
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, Laid(inputs, 3, Remainder::kPad));
  ASSERT_THAT(plan.shares, SizeIs(3));
  const auto shares = SharesRead(plan);
  EXPECT_THAT(shares, Each(SizeIs(334)));  // ceil(1001 / 3)
  const auto counts = Counts(shares);
  EXPECT_EQ(counts.size(), 1001u) << "every record is fed";
  // The one record over is the first again, as DistributedSampler pads.
  EXPECT_EQ(counts.at("a-0"), 2);
  EXPECT_EQ(shares[2].back(), "a-0");
  EXPECT_EQ(shares[0].front(), "a-0");
  EXPECT_EQ(shares[1].front(), "b-34");  // records 334.. in input order
}

TEST_F(ShareLayoutTest, DropFeedsEqualSharesAndNoRecordTwice) {
  const std::vector<std::string> inputs = {WriteCsv("a", 300), WriteCsv("b", 250),
                                           WriteCsv("c", 250), WriteCsv("d", 201)};
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, Laid(inputs, 3, Remainder::kDrop));
  const auto shares = SharesRead(plan);
  EXPECT_THAT(shares, Each(SizeIs(333)));
  const auto counts = Counts(shares);
  EXPECT_EQ(counts.size(), 999u);
  for (const auto& [record, count] : counts) EXPECT_EQ(count, 1) << record;
  EXPECT_FALSE(counts.contains("d-200")) << "the last records are the ones dropped";
  EXPECT_FALSE(counts.contains("d-199"));
}

TEST_F(ShareLayoutTest, InferenceFeedsEveryRecordOnceInNearlyEqualShares) {
  const std::vector<std::string> inputs = {WriteCsv("a", 10), WriteCsv("b", 7)};
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, Laid(inputs, 4, Remainder::kPad, FeedMode::kInference));
  const auto shares = SharesRead(plan);
  ASSERT_THAT(shares, SizeIs(4));
  EXPECT_THAT(shares[0], SizeIs(4));
  EXPECT_THAT(shares[1], SizeIs(4));
  EXPECT_THAT(shares[2], SizeIs(4));
  EXPECT_THAT(shares[3], SizeIs(5));
  const auto counts = Counts(shares);
  EXPECT_EQ(counts.size(), 17u);
  for (const auto& [record, count] : counts) EXPECT_EQ(count, 1) << record;
  // In input order across the shares, so part files keep it too.
  std::vector<uint32_t> order;
  for (const auto& share : plan.shares) order.insert(order.end(), share.begin(), share.end());
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
}

TEST_F(ShareLayoutTest, OneFedNodeTakesEveryPartitionUncounted) {
  const std::vector<std::string> inputs = {WriteCsv("a", 10), WriteCsv("b", 7)};
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, Laid(inputs, 1, Remainder::kDrop));
  EXPECT_THAT(plan.shares, ElementsAre(ElementsAre(0, 1)));
  EXPECT_FALSE(plan.partitions[0].records.has_value()) << "nothing read to plan one share";
}

TEST_F(ShareLayoutTest, MoreNodesThanRecords) {
  const std::vector<std::string> inputs = {WriteCsv("a", 2)};
  ASSERT_OK_AND_ASSIGN(FeedPlan padded, Laid(inputs, 5, Remainder::kPad));
  const auto shares = SharesRead(padded);
  EXPECT_THAT(shares, ElementsAre(ElementsAre("a-0"), ElementsAre("a-1"), ElementsAre("a-0"),
                                  ElementsAre("a-1"), ElementsAre("a-0")));
  ASSERT_OK_AND_ASSIGN(FeedPlan dropped, Laid(inputs, 5, Remainder::kDrop));
  EXPECT_THAT(dropped.shares, Each(IsEmpty()));
}

TEST_F(ShareLayoutTest, FixedSizeRawRecordsAreCutByArithmetic) {
  const std::string path = dir_.File("data.bin");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 100; ++i) out << std::string(8, static_cast<char>('A' + i % 26));
  }
  PlanOptions read;
  read.format = RecordFormat::kRaw;
  read.record_bytes = 8;
  read.split_bytes = 256;  // 32 records a partition before the cuts
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, Laid({path}, 3, Remainder::kDrop, FeedMode::kTrain, read));
  const auto shares = SharesRead(plan);
  EXPECT_THAT(shares, Each(SizeIs(33)));
  for (const Partition& partition : plan.partitions) {
    EXPECT_EQ((partition.end - partition.begin) / 8, *partition.records);
  }
}

TEST_F(ShareLayoutTest, TfRecordsAreCutOnRecordBoundaries) {
  const std::string path = dir_.File("data.tfrecord");
  {
    std::string bytes;
    for (int i = 0; i < 11; ++i) AppendTfRecord("record-" + std::to_string(i), &bytes);
    std::ofstream(path, std::ios::binary) << bytes;
  }
  PlanOptions read;
  read.format = RecordFormat::kTfRecord;
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, Laid({path}, 2, Remainder::kPad, FeedMode::kTrain, read));
  const auto shares = SharesRead(plan);
  EXPECT_THAT(shares, Each(SizeIs(6)));
  EXPECT_EQ(shares[1].front(), "record-6");
  EXPECT_EQ(shares[1].back(), "record-0");
}

TEST_F(ShareLayoutTest, ABadRecordWhileCountingNamesTheFile) {
  const std::string path = dir_.File("bad.tfrecord");
  std::ofstream(path, std::ios::binary) << std::string(20, 'x');
  PlanOptions read;
  read.format = RecordFormat::kTfRecord;
  EXPECT_THAT(Laid({path}, 2, Remainder::kPad, FeedMode::kTrain, read),
              StatusIs(Code::kInvalidArgument, HasSubstr("bad.tfrecord")));
}

TEST_F(ShareLayoutTest, NoFedNodeIsAnError) {
  EXPECT_THAT(LayOutEqualShares(FeedPlan{}, 0, Remainder::kPad),
              StatusIs(Code::kInvalidArgument, HasSubstr("at least one fed node")));
}

TEST(RecordIndexTest, OffsetsOfRecordsSkipEmptyLines) {
  TempDir dir;
  const std::string path = dir.File("x.csv");
  std::ofstream(path) << "a\n\nb\nc\n\n";
  const Partition partition{path, 0, 8};
  PlanOptions read;
  ASSERT_OK_AND_ASSIGN(uint64_t count, CountRecords(partition, read));
  EXPECT_EQ(count, 3u);
  ASSERT_OK_AND_ASSIGN(auto offsets, RecordOffsets(partition, read, {0, 1, 2, 3}));
  EXPECT_THAT(offsets, ElementsAre(0, 2, 5, 7));
  EXPECT_THAT(RecordOffsets(partition, read, {4}),
              StatusIs(Code::kInvalidArgument, HasSubstr("has no record 4")));
  EXPECT_THAT(RecordOffsets(partition, read, {2, 1}),
              StatusIs(Code::kInvalidArgument, HasSubstr("must ascend")));
}

// CSV and JSONL are counted without a reader: the count must be what a
// reader yields, for any mix of empty lines, "\r\n", lone '\r' and a last
// line without '\n', from any record boundary, across the counter's chunks.
TEST(RecordIndexTest, LineCountsAreWhatTheReaderYields) {
  TempDir dir;
  std::mt19937 random(42);
  const std::string alphabet = "ab\n\n\r";
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(random() % (trial < 190 ? 300 : 9'000'000), 'x');
    for (char& c : text) c = alphabet[random() % alphabet.size()];
    const std::string path = dir.File("t" + std::to_string(trial) + ".csv");
    std::ofstream(path, std::ios::binary) << text;
    // A partition starts at a line boundary: the file's start or after '\n'.
    uint64_t begin = 0;
    if (const size_t cut = text.empty() ? 0 : random() % text.size(); cut > 0) {
      const size_t newline = text.rfind('\n', cut);
      begin = newline == std::string::npos ? 0 : newline + 1;
    }
    const Partition partition{path, begin, text.size()};
    PlanOptions read;
    read.format = trial % 2 ? RecordFormat::kCsv : RecordFormat::kJsonl;
    ASSERT_OK_AND_ASSIGN(auto reader, RecordReader::Open(partition, read, begin));
    uint64_t expected = 0;
    std::string_view record;
    while (reader->Next(&record).value_or(false)) ++expected;
    ASSERT_OK_AND_ASSIGN(uint64_t counted, CountRecords(partition, read));
    EXPECT_EQ(counted, expected) << "trial " << trial << " from " << begin;
  }
}

// ---- EqualShareSlices: counted elsewhere (drover.Cluster.train) ----

TEST(EqualShareSlicesTest, UnevenPartitionsOnThreeNodesArePaddedFromTheStart) {
  // The quick start's shape: 1001 records in 4 partitions; 334 each.
  ASSERT_OK_AND_ASSIGN(
      auto slices, EqualShareSlices({300, 250, 250, 201}, 3, FeedMode::kTrain, Remainder::kPad));
  EXPECT_THAT(slices[0], ElementsAre(ShareSlice{0, 0, 300}, ShareSlice{1, 0, 34}));
  EXPECT_THAT(slices[1], ElementsAre(ShareSlice{1, 34, 250}, ShareSlice{2, 0, 118}));
  EXPECT_THAT(slices[2],
              ElementsAre(ShareSlice{2, 118, 250}, ShareSlice{3, 0, 201}, ShareSlice{0, 0, 1}));
}

TEST(EqualShareSlicesTest, DropLeavesTheLastRecordsToNobodyAndInferenceFeedsEachOnce) {
  ASSERT_OK_AND_ASSIGN(
      auto dropped, EqualShareSlices({300, 250, 250, 201}, 3, FeedMode::kTrain, Remainder::kDrop));
  EXPECT_THAT(dropped[2], ElementsAre(ShareSlice{2, 116, 250}, ShareSlice{3, 0, 199}));
  ASSERT_OK_AND_ASSIGN(auto answered,
                       EqualShareSlices({5, 0, 2}, 2, FeedMode::kInference, Remainder::kPad));
  EXPECT_THAT(answered[0], ElementsAre(ShareSlice{0, 0, 3}));
  EXPECT_THAT(answered[1], ElementsAre(ShareSlice{0, 3, 5}, ShareSlice{2, 0, 2}));
}

TEST(EqualShareSlicesTest, EmptyPartitionsAreSkippedAndASmallInputWrapsMoreThanOnce) {
  ASSERT_OK_AND_ASSIGN(auto slices,
                       EqualShareSlices({0, 2, 0}, 3, FeedMode::kTrain, Remainder::kPad));
  EXPECT_THAT(slices[0], ElementsAre(ShareSlice{1, 0, 1}));
  EXPECT_THAT(slices[1], ElementsAre(ShareSlice{1, 1, 2}));
  EXPECT_THAT(slices[2], ElementsAre(ShareSlice{1, 0, 1}));
  ASSERT_OK_AND_ASSIGN(auto none, EqualShareSlices({0, 0}, 2, FeedMode::kTrain, Remainder::kPad));
  EXPECT_THAT(none, ElementsAre(IsEmpty(), IsEmpty()));
  EXPECT_THAT(EqualShareSlices({1}, 0, FeedMode::kTrain, Remainder::kPad),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("at least one share")));
}

}  // namespace
}  // namespace drover::feed

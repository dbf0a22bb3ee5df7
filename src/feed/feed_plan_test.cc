#include "feed/feed_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "testing/status_matchers.h"

namespace drover::feed {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Code = Status::Code;

FeedPlan SamplePlan() {
  FeedPlan plan;
  plan.mode = FeedMode::kInference;
  plan.read.format = RecordFormat::kRaw;
  plan.read.record_bytes = 784;
  plan.epochs = 3;
  plan.feed_timeout_ms = 12'345;
  plan.queue_bytes = 1ull << 33;
  plan.output_dir = "/out/predictions";
  plan.partitions = {
      {"/data/a.bin", 0, 7840}, {"/data/b.bin", 0, 1568, 2}, {"/data/b.bin", 1568, 3136}};
  plan.shares = {{0, 2}, {1, 0}};
  plan.starts = {std::nullopt, FeedPosition{3, 1, false}};
  return plan;
}

TEST(FeedPlanTest, JsonRoundTrip) {
  const FeedPlan plan = SamplePlan();
  const std::string json = plan.ToJson();
  ASSERT_OK_AND_ASSIGN(FeedPlan parsed, FeedPlan::FromJson(json));
  EXPECT_EQ(parsed, plan);
  EXPECT_EQ(parsed.ToJson(), json);
  // Spelled as the header documents.
  const nlohmann::json value = nlohmann::json::parse(json);
  EXPECT_EQ(value["mode"], "inference");
  EXPECT_EQ(value["format"], "raw");
  EXPECT_EQ(value["record_bytes"], 784);
  EXPECT_EQ(value["queue_bytes"], 1ull << 33);
  EXPECT_EQ(value["partitions"][2]["begin"], 1568);
  EXPECT_EQ(value["partitions"][1]["records"], 2);
  EXPECT_FALSE(value["partitions"][0].contains("records"));
  EXPECT_EQ(value["shares"], nlohmann::json::parse("[[0, 2], [1, 0]]"));
  EXPECT_EQ(value["starts"],
            nlohmann::json::parse(R"([null, {"feed": 3, "record": 1, "done": false}])"));
}

TEST(FeedPositionTest, JsonRoundTripAndErrors) {
  const FeedPosition position{7, 12345, true};
  ASSERT_OK_AND_ASSIGN(FeedPosition parsed, FeedPositionFromJson(FeedPositionToJson(position)));
  EXPECT_EQ(parsed, position);
  EXPECT_THAT(FeedPositionFromJson(R"({"feed": 1, "record": 2})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'position.done' is missing")));
  EXPECT_THAT(FeedPositionFromJson(R"({"feed": -1, "record": 2, "done": false})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'position.feed' must not be negative")));
  EXPECT_THAT(FeedPositionFromJson(R"({"feed": 1, "record": 2, "done": 0})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'position.done' must be a boolean")));
  EXPECT_THAT(FeedPositionFromJson(R"({"feed": 1, "record": 2, "done": false, "x": 1})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("unknown field 'x'")));
  EXPECT_EQ(CommitKey(3), "drover/feed/commit/3");
}

TEST(FeedPlanTest, MalformedSharesAndCountsNameTheField) {
  const std::string partitions =
      R"("partitions": [{"path": "/a", "begin": 0, "end": 10}, {"path": "/b", "begin": 0, "end": 4}])";
  auto plan = [&](const std::string& more) {
    return FeedPlan::FromJson(R"({"mode": "train", "format": "csv", )" + partitions + more + "}");
  };
  EXPECT_THAT(plan(R"(, "shares": [[0], [2]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'shares[1][0]' must be at most 1")));
  EXPECT_THAT(plan(R"(, "shares": [0, 1])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'shares[0]' must be an array")));
  EXPECT_THAT(plan(R"(, "shares": {"0": [1]})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'shares' must be an array")));
  EXPECT_THAT(
      FeedPlan::FromJson(
          R"({"mode": "train", "format": "csv", "partitions": [{"path": "/a", "begin": 0, "end": 10, "records": 11}]})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("'partitions[0].records' must be at most 10")));
  EXPECT_THAT(
      FeedPlan::FromJson(
          R"({"mode": "train", "format": "csv", "partitions": [], "shares": [[0]]})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("names a partition of a plan without any")));
}

TEST(FeedPlanTest, EveryFormatAndModeRoundTrips) {
  for (RecordFormat format :
       {RecordFormat::kCsv, RecordFormat::kJsonl, RecordFormat::kTfRecord, RecordFormat::kRaw}) {
    for (FeedMode mode : {FeedMode::kTrain, FeedMode::kInference}) {
      FeedPlan plan;
      plan.mode = mode;
      plan.read.format = format;
      ASSERT_OK_AND_ASSIGN(FeedPlan parsed, FeedPlan::FromJson(plan.ToJson()));
      EXPECT_EQ(parsed, plan);
    }
  }
}

TEST(FeedPlanTest, OptionalFieldsDefault) {
  ASSERT_OK_AND_ASSIGN(FeedPlan plan, FeedPlan::FromJson(R"({"mode": "train", "format": "csv",
                            "partitions": [{"path": "/d/a.csv", "begin": 0, "end": 10}]})"));
  const FeedPlan defaults;
  EXPECT_EQ(plan.mode, FeedMode::kTrain);
  EXPECT_EQ(plan.read.format, RecordFormat::kCsv);
  EXPECT_EQ(plan.read.record_bytes, 0u);
  EXPECT_EQ(plan.epochs, defaults.epochs);
  EXPECT_EQ(plan.feed_timeout_ms, defaults.feed_timeout_ms);
  EXPECT_EQ(plan.queue_bytes, defaults.queue_bytes);
  EXPECT_EQ(plan.output_dir, "");
  EXPECT_THAT(plan.partitions, ElementsAre(Partition{"/d/a.csv", 0, 10}));
}

TEST(FeedPlanTest, EmptyPartitionListIsAPlan) {
  ASSERT_OK_AND_ASSIGN(FeedPlan plan,
                       FeedPlan::FromJson(R"({"mode":"train","format":"jsonl","partitions":[]})"));
  EXPECT_THAT(plan.partitions, IsEmpty());
}

TEST(FeedPlanTest, ExternalPlanRoundTripsWithoutPartitions) {
  FeedPlan plan;
  plan.external = true;
  plan.read.format = RecordFormat::kPickle;
  plan.feed_timeout_ms = 300;
  plan.queue_bytes = 1 << 20;
  const std::string json = plan.ToJson();
  EXPECT_EQ(nlohmann::json::parse(json)["external"], true);
  EXPECT_EQ(nlohmann::json::parse(json)["format"], "pickle");
  ASSERT_OK_AND_ASSIGN(FeedPlan parsed, FeedPlan::FromJson(json));
  EXPECT_EQ(parsed, plan);

  ASSERT_OK_AND_ASSIGN(
      parsed, FeedPlan::FromJson(R"({"mode": "train", "format": "pickle", "external": true})"));
  EXPECT_TRUE(parsed.external);
  EXPECT_THAT(parsed.partitions, IsEmpty());
  // A plan from files says nothing about "external".
  EXPECT_EQ(nlohmann::json::parse(SamplePlan().ToJson()).count("external"), 0u);
  ASSERT_OK_AND_ASSIGN(parsed, FeedPlan::FromJson(
                                   R"({"mode": "train", "format": "csv", "external": false,
                                       "partitions": []})"));
  EXPECT_FALSE(parsed.external);
}

TEST(FeedPlanTest, PickleIsNotReadFromFiles) {
  ASSERT_OK_AND_ASSIGN(RecordFormat format, ParseRecordFormat("pickle"));
  EXPECT_EQ(format, RecordFormat::kPickle);
  EXPECT_EQ(RecordFormatName(RecordFormat::kPickle), "pickle");
  PlanOptions options;
  options.format = RecordFormat::kPickle;
  EXPECT_THAT(PlanPartitions({"/etc/hostname"}, options),
              StatusIs(Code::kInvalidArgument, HasSubstr("drover.Cluster.train")));
  EXPECT_THAT(RecordReader::Open(Partition{"/etc/hostname", 0, 0}, options, 0),
              StatusIs(Code::kInvalidArgument, HasSubstr("not read from files")));
  EXPECT_THAT(
      FeedPlan::FromJson(R"({"mode": "train", "format": "pickle", "partitions": []})"),
      StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("format"), HasSubstr("not external"))));
}

struct MalformedCase {
  std::string json;
  std::string names;  // what the message must mention
};

TEST(FeedPlanTest, MalformedPlansNameTheField) {
  const std::string valid_partition = R"({"path": "/d/a", "begin": 0, "end": 5})";
  auto plan_with = [&](const std::string& fields) {
    return R"({"mode": "train", "format": "csv", )" + fields + "}";
  };
  auto partitions_with = [&](const std::string& partition) {
    return plan_with(R"("partitions": [)" + valid_partition + ", " + partition + "]");
  };
  const std::string partitions = R"("partitions": [])";
  const std::vector<MalformedCase> cases = {
      {"", "JSON"},
      {"{", "JSON"},
      {R"({"mode": "train"} trailing)", "JSON"},
      {"[]", "object"},
      {"null", "object"},
      {R"({"format": "csv", "partitions": []})", "mode"},
      {R"({"mode": "train", "partitions": []})", "format"},
      {R"({"mode": "train", "format": "csv"})", "partitions"},
      {R"({"mode": "train", "format": "csv", "external": false})", "partitions"},
      {R"({"mode": "train", "format": "pickle", "external": 1})", "external"},
      {R"({"mode": "train", "format": "pickle", "external": "true"})", "external"},
      {R"({"format": "pickle", "external": true})", "mode"},
      {R"({"mode": "train", "format": "pickle", "external": true, "partitions": 3})", "partitions"},
      {R"({"mode": "eval", "format": "csv", "partitions": []})", "mode"},
      {R"({"mode": 1, "format": "csv", "partitions": []})", "mode"},
      {R"({"mode": "train", "format": "parquet", "partitions": []})", "format"},
      {R"({"mode": "train", "format": ["csv"], "partitions": []})", "format"},
      {plan_with(R"("record_bytes": -1, )" + partitions), "record_bytes"},
      {plan_with(R"("record_bytes": "8", )" + partitions), "record_bytes"},
      {plan_with(R"("record_bytes": 1.5, )" + partitions), "record_bytes"},
      {plan_with(R"("record_bytes": 2147483648, )" + partitions), "record_bytes"},
      {plan_with(R"("epochs": 0, )" + partitions), "epochs"},
      {plan_with(R"("epochs": -2, )" + partitions), "epochs"},
      {plan_with(R"("epochs": 4294967296, )" + partitions), "epochs"},
      {plan_with(R"("epochs": true, )" + partitions), "epochs"},
      {plan_with(R"("epochs": null, )" + partitions), "epochs"},
      {plan_with(R"("epochs": 1e3, )" + partitions), "epochs"},
      {plan_with(R"("feed_timeout_ms": -5, )" + partitions), "feed_timeout_ms"},
      {plan_with(R"("feed_timeout_ms": 18446744073709551615, )" + partitions), "feed_timeout_ms"},
      {plan_with(R"("queue_bytes": 0, )" + partitions), "queue_bytes"},
      {plan_with(R"("queue_bytes": -4096, )" + partitions), "queue_bytes"},
      {plan_with(R"("queue_bytes": 18446744073709551616, )" + partitions), "queue_bytes"},
      {plan_with(R"("output_dir": "relative/out", )" + partitions), "output_dir"},
      {plan_with(R"("output_dir": 7, )" + partitions), "output_dir"},
      {plan_with(R"("partitions": {})"), "partitions"},
      {plan_with(R"("partitions": "/d/a")"), "partitions"},
      {partitions_with("\"/d/b\""), "partitions[1]"},
      {partitions_with(R"({"begin": 0, "end": 5})"), "partitions[1].path"},
      {partitions_with(R"({"path": "/d/b", "end": 5})"), "partitions[1].begin"},
      {partitions_with(R"({"path": "/d/b", "begin": 0})"), "partitions[1].end"},
      {partitions_with(R"({"path": "d/b", "begin": 0, "end": 5})"), "partitions[1].path"},
      {partitions_with(R"({"path": "", "begin": 0, "end": 5})"), "partitions[1].path"},
      {partitions_with(R"({"path": 3, "begin": 0, "end": 5})"), "partitions[1].path"},
      {partitions_with(R"({"path": "/d/b", "begin": 6, "end": 5})"), "partitions[1].begin"},
      {partitions_with(R"({"path": "/d/b", "begin": -1, "end": 5})"), "partitions[1].begin"},
      {partitions_with(R"({"path": "/d/b", "begin": 0, "end": "5"})"), "partitions[1].end"},
      {partitions_with(R"({"path": "/d/b", "begin": 0, "end": 5.0})"), "partitions[1].end"},
      {partitions_with(R"({"path": "/d/b", "begin": 0, "end": 5, "size": 5})"), "size"},
      {plan_with(R"("split_bytes": 5, )" + partitions), "split_bytes"},
      {plan_with(R"("epochs": 1, "epochs": 2, )" + partitions), "epochs"},
      {partitions_with(R"({"path": "/d/b", "path": "/d/c", "begin": 0, "end": 5})"), "path"},
  };
  for (const MalformedCase& c : cases) {
    EXPECT_THAT(FeedPlan::FromJson(c.json), StatusIs(Code::kInvalidArgument, HasSubstr(c.names)))
        << c.json;
  }
}

TEST(FeedPlanTest, ErrorMessagesAreAsciiForBrokenUtf8) {
  const Result<FeedPlan> plan = FeedPlan::FromJson("{\"mode\": \"\xff\xfe\"}");
  ASSERT_THAT(plan, StatusIs(Code::kInvalidArgument, HasSubstr("JSON")));
  for (char c : plan.status().message()) EXPECT_LT(static_cast<unsigned char>(c), 0x80);
}

class FeedPlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "drover-feed-plan-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::trunc) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(FeedPlanFileTest, ReadFileParsesWhatToJsonWrote) {
  const FeedPlan plan = SamplePlan();
  ASSERT_OK_AND_ASSIGN(FeedPlan read, FeedPlan::ReadFile(Write("plan.json", plan.ToJson())));
  EXPECT_EQ(read, plan);
}

TEST_F(FeedPlanFileTest, ReadFileErrorsNameTheFile) {
  const std::string missing = dir_ + "/missing.json";
  EXPECT_THAT(FeedPlan::ReadFile(missing), StatusIs(Code::kNotFound, HasSubstr(missing)));
  const std::string bad = Write("bad.json", R"({"mode": "train", "format": "csv", "epochs": 0,
                                                "partitions": []})");
  EXPECT_THAT(FeedPlan::ReadFile(bad),
              StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(bad), HasSubstr("epochs"))));
}

TEST_F(FeedPlanFileTest, PlannedPartitionsRoundTrip) {
  std::string content;
  for (int i = 0; i < 100; ++i) content += "line " + std::to_string(i) + "\n";
  const std::string path = Write("data.csv", content);
  PlanOptions options;
  options.split_bytes = 100;
  ASSERT_OK_AND_ASSIGN(std::vector<Partition> partitions, PlanPartitions({path}, options));
  ASSERT_GT(partitions.size(), 1u);
  FeedPlan plan;
  plan.partitions = partitions;
  ASSERT_OK_AND_ASSIGN(FeedPlan parsed, FeedPlan::FromJson(plan.ToJson()));
  EXPECT_EQ(parsed.partitions, partitions);
}

// ---- FeedsOfShare ----

FeedPlan PlanOf(int partitions, int epochs) {
  FeedPlan plan;
  plan.epochs = epochs;
  for (int i = 0; i < partitions; ++i) {
    plan.partitions.push_back({"/d/" + std::to_string(i), 0, 1});
  }
  return plan;
}

// The feeds of a share that exists.
std::vector<FeedUnit> Feeds(const FeedPlan& plan, int share, int shares) {
  Result<std::vector<FeedUnit>> feeds = FeedsOfShare(plan, share, shares);
  EXPECT_OK(feeds);
  return feeds.ok() ? *feeds : std::vector<FeedUnit>{};
}

TEST(FeedsOfShareTest, EpochByEpochThePartitionsOfTheShare) {
  const FeedPlan plan = PlanOf(5, 2);
  EXPECT_THAT(Feeds(plan, 0, 2), ElementsAre(FeedUnit{0, 0}, FeedUnit{0, 2}, FeedUnit{0, 4},
                                             FeedUnit{1, 0}, FeedUnit{1, 2}, FeedUnit{1, 4}));
  EXPECT_THAT(Feeds(plan, 1, 2),
              ElementsAre(FeedUnit{0, 1}, FeedUnit{0, 3}, FeedUnit{1, 1}, FeedUnit{1, 3}));
  EXPECT_THAT(
      Feeds(plan, 0, 1),
      ElementsAre(FeedUnit{0, 0}, FeedUnit{0, 1}, FeedUnit{0, 2}, FeedUnit{0, 3}, FeedUnit{0, 4},
                  FeedUnit{1, 0}, FeedUnit{1, 1}, FeedUnit{1, 2}, FeedUnit{1, 3}, FeedUnit{1, 4}));
}

TEST(FeedsOfShareTest, SharesCoverEveryFeedExactlyOnce) {
  for (int partitions : {0, 1, 7, 16}) {
    for (int shares : {1, 3, 16, 20}) {
      const FeedPlan plan = PlanOf(partitions, 3);
      std::set<std::pair<int, int>> seen;
      for (int share = 0; share < shares; ++share) {
        for (const FeedUnit& unit : Feeds(plan, share, shares)) {
          EXPECT_EQ(unit.partition % shares, share);
          EXPECT_TRUE(seen.emplace(unit.epoch, unit.partition).second);
        }
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(partitions * 3));
    }
  }
}

TEST(FeedsOfShareTest, MoreSharesThanPartitionsLeavesSomeIdle) {
  const FeedPlan plan = PlanOf(2, 1);
  EXPECT_THAT(Feeds(plan, 1, 4), ElementsAre(FeedUnit{0, 1}));
  EXPECT_THAT(Feeds(plan, 3, 4), IsEmpty());
}

TEST(FeedsOfShareTest, ExternalPlanHasNoFeeds) {
  FeedPlan plan = PlanOf(4, 2);
  plan.external = true;
  EXPECT_THAT(Feeds(plan, 0, 1), IsEmpty());
  EXPECT_THAT(Feeds(plan, 1, 2), IsEmpty());
}

TEST(FeedsOfShareTest, ShareOutOfRangeIsAnError) {
  const FeedPlan plan = PlanOf(4, 1);
  for (auto [share, shares] : {std::pair{2, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    EXPECT_THAT(FeedsOfShare(plan, share, shares),
                StatusIs(Code::kInvalidArgument, HasSubstr("does not exist")));
  }
}

TEST(FeedsOfShareTest, LaidOutSharesAreFedAsListedEveryEpoch) {
  FeedPlan plan = PlanOf(4, 2);
  plan.shares = {{0, 1}, {2, 3}, {3, 0}};
  EXPECT_THAT(Feeds(plan, 2, 3),
              ElementsAre(FeedUnit{0, 3}, FeedUnit{0, 0}, FeedUnit{1, 3}, FeedUnit{1, 0}));
  EXPECT_THAT(Feeds(plan, 0, 3),
              ElementsAre(FeedUnit{0, 0}, FeedUnit{0, 1}, FeedUnit{1, 0}, FeedUnit{1, 1}));
}

TEST(FeedsOfShareTest, PlanLaidOutForAnotherClusterSizeIsAnError) {
  FeedPlan plan = PlanOf(4, 1);
  plan.shares = {{0, 1}, {2, 3}};
  EXPECT_THAT(FeedsOfShare(plan, 0, 3),
              StatusIs(Code::kInvalidArgument,
                       HasSubstr("laid out for 2 fed nodes, but the cluster has 3")));
}

FeedPlan DynamicPlan() {
  FeedPlan plan;
  plan.read.format = RecordFormat::kCsv;
  plan.epochs = 2;
  plan.partitions = {{"/data/a.csv", 0, 100}, {"/data/b.csv", 0, 50}};
  plan.balance = Balance::kDynamic;
  return plan;
}

TEST(DynamicPlanTest, JsonRoundTripWithAndWithoutAQueue) {
  FeedPlan plan = DynamicPlan();
  ASSERT_OK_AND_ASSIGN(FeedPlan parsed, FeedPlan::FromJson(plan.ToJson()));
  EXPECT_EQ(parsed, plan);
  EXPECT_EQ(nlohmann::json::parse(plan.ToJson())["balance"], "dynamic");
  EXPECT_FALSE(nlohmann::json::parse(plan.ToJson()).contains("queue"));
  plan.queue = std::vector<FeedUnit>{{1, 0, 7}, {0, 1, 0}};
  ASSERT_OK_AND_ASSIGN(parsed, FeedPlan::FromJson(plan.ToJson()));
  EXPECT_EQ(parsed, plan);
  EXPECT_EQ(nlohmann::json::parse(plan.ToJson())["queue"],
            nlohmann::json::parse("[[1, 0, 7], [0, 1, 0]]"));
  // An equal plan says nothing of balance.
  EXPECT_FALSE(nlohmann::json::parse(SamplePlan().ToJson()).contains("balance"));
}

TEST(FeedPlanTest, IngestIsWrittenOnlyWhenForced) {
  FeedPlan plan = SamplePlan();
  EXPECT_FALSE(nlohmann::json::parse(plan.ToJson()).contains("ingest"));
  for (Ingest ingest : {Ingest::kMap, Ingest::kRead, Ingest::kExtent, Ingest::kExtentRead}) {
    plan.ingest = ingest;
    EXPECT_EQ(nlohmann::json::parse(plan.ToJson())["ingest"], std::string(IngestName(ingest)));
    ASSERT_OK_AND_ASSIGN(FeedPlan parsed, FeedPlan::FromJson(plan.ToJson()));
    EXPECT_EQ(parsed, plan);
  }
  EXPECT_THAT(FeedPlan::FromJson(
                  R"({"mode": "train", "format": "raw", "external": true, "ingest": "fast"})"),
              StatusIs(Code::kInvalidArgument,
                       HasSubstr("'ingest' takes measure, map, read, extent or extent-read")));
  EXPECT_THAT(
      FeedPlan::FromJson(R"({"mode": "train", "format": "raw", "external": true, "ingest": 1})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("ingest")));
}

TEST(DynamicPlanTest, MalformedDynamicFieldsNameTheField) {
  auto with = [](const std::string& fields) {
    return FeedPlan::FromJson(R"({"mode": "train", "format": "csv", "epochs": 2, "partitions": [)"
                              R"({"path": "/a", "begin": 0, "end": 10}])" +
                              fields + "}");
  };
  EXPECT_THAT(with(R"(, "balance": "fair")"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'balance' must be \"equal\" or")));
  EXPECT_THAT(with(R"(, "balance": "dynamic", "shares": [[0]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'shares' is set in a dynamic plan")));
  EXPECT_THAT(with(R"(, "balance": "dynamic", "starts": [null])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'starts' is set in a dynamic plan")));
  EXPECT_THAT(with(R"(, "queue": [[0, 0, 0]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'queue' is set in a plan that is not")));
  EXPECT_THAT(with(R"(, "balance": "dynamic", "queue": [[2, 0, 0]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'queue[0][0]' must be at most 1")));
  EXPECT_THAT(with(R"(, "balance": "dynamic", "queue": [[0, 1, 0]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'queue[0][1]' must be at most 0")));
  EXPECT_THAT(with(R"(, "balance": "dynamic", "queue": [[0, 0, 11]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'queue[0][2]' must be at most 10")));
  EXPECT_THAT(with(R"(, "balance": "dynamic", "queue": [[0, 0]])"),
              StatusIs(Code::kInvalidArgument, HasSubstr("'queue[0]' must be [epoch, partition")));
  EXPECT_OK(with(R"(, "balance": "dynamic", "queue": [])").status());
}

TEST(DynamicPlanTest, TheQueueIsEveryPartitionEpochByEpochAndThereAreNoShares) {
  const FeedPlan plan = DynamicPlan();
  EXPECT_THAT(DynamicQueue(plan),
              ElementsAre(FeedUnit{0, 0}, FeedUnit{0, 1}, FeedUnit{1, 0}, FeedUnit{1, 1}));
  EXPECT_THAT(FeedsOfShare(plan, 0, 2),
              StatusIs(Code::kInvalidArgument, HasSubstr("its feeds are claimed")));
}

TEST(QueueAfterRoundTest, CommittedFeedsLeaveAndTheCommittedOneResumesAfterItsRecord) {
  const std::vector<FeedUnit> queue = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
  // Share 0 took entries 0 and 2 and committed in its second feed at record
  // 5; share 1 took 1 and 3 and committed the end of its first.
  const std::vector<std::vector<uint64_t>> claims = {{0, 2}, {1, 3}};
  const std::vector<std::optional<FeedPosition>> commits = {FeedPosition{1, 5, false},
                                                            FeedPosition{0, 9, true}};
  EXPECT_THAT(QueueAfterRound(queue, claims, commits),
              ElementsAre(FeedUnit{0, 2, 5}, FeedUnit{1, 0}, FeedUnit{1, 1}, FeedUnit{1, 2}));
}

TEST(QueueAfterRoundTest, WithoutACommitEveryClaimIsFedAgain) {
  const std::vector<FeedUnit> queue = {{0, 0, 3}, {0, 1}, {0, 2}};
  EXPECT_EQ(QueueAfterRound(queue, {{0, 1}, {2}}, {std::nullopt, std::nullopt}), queue);
  // A share that committed nothing gives back what it claimed; one that did
  // keeps its own consumed part only.
  EXPECT_THAT(QueueAfterRound(queue, {{0, 1}, {2}}, {std::nullopt, FeedPosition{0, 4, true}}),
              ElementsAre(FeedUnit{0, 0, 3}, FeedUnit{0, 1}));
}

TEST(QueueAfterRoundTest, ClaimsAndCommitsNamingWhatDoesNotExistAreIgnored) {
  const std::vector<FeedUnit> queue = {{0, 0}, {0, 1}};
  // Entry 7 does not exist; a commit past the claims; a record before the
  // entry's first.
  EXPECT_THAT(
      QueueAfterRound(queue, {{7, 1}, {0}}, {FeedPosition{1, 2, false}, FeedPosition{3, 0, true}}),
      ElementsAre(FeedUnit{0, 0}, FeedUnit{0, 1, 2}));
  const std::vector<FeedUnit> resumed = {{0, 0, 10}};
  EXPECT_EQ(QueueAfterRound(resumed, {{0}}, {FeedPosition{0, 4, false}}), resumed);
}

}  // namespace
}  // namespace drover::feed

#include "driver/run_history.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

json Record(double started_at, const std::string& phase, int exit_code) {
  return json{{"cluster_id", "ignored"},
              {"phase", phase},
              {"exit_code", exit_code},
              {"command", {"python3", "train.py"}},
              {"started_at", started_at},
              {"elapsed_s", 10.0},
              {"rendezvous", {{"duration_s", 0.1}}},
              {"nodes", json::array({json::object(), json::object()})},
              {"feed", {{"records", 40000}}}};
}

void WriteRun(const testing::TempDir& dir, const std::string& id, const std::string& text) {
  fs::create_directory(dir.File(id));
  std::ofstream(dir.File(id) + "/run.json") << text;
}

TEST(RunHistoryTest, ListsRunsNewestFirstAndTheUnreadableToo) {
  testing::TempDir dir;
  WriteRun(dir, "run-old", Record(1000, "succeeded", 0).dump());
  json with_metrics = Record(2000, "failed", 1);
  with_metrics["metrics"] = {{"loss", 0.041}, {"acc", 0.97}};
  WriteRun(dir, "run-new", with_metrics.dump());
  WriteRun(dir, "run-broken", "{\"phase\": ");
  fs::create_directory(dir.File("run-live"));  // no run.json: not listed
  ASSERT_OK_AND_ASSIGN(std::vector<PastRun> runs, ListPastRuns(dir.path()));
  ASSERT_EQ(runs.size(), 3u);
  // The broken one is dated by its file: now, the newest.
  EXPECT_EQ(runs[0].id, "run-broken");
  EXPECT_FALSE(runs[0].record.has_value());
  EXPECT_EQ(runs[0].unreadable, "not JSON");
  EXPECT_EQ(runs[1].id, "run-new");
  EXPECT_EQ(runs[2].id, "run-old");
  const std::string text = RenderRunList(runs);
  EXPECT_THAT(text, HasSubstr("RUN "));
  EXPECT_THAT(text, HasSubstr("unreadable"));
  EXPECT_THAT(text, HasSubstr("failed (exit 1)"));
  EXPECT_THAT(text, HasSubstr("acc=0.97 loss=0.041"));
  EXPECT_THAT(text, HasSubstr("40,000"));
  EXPECT_THAT(text, HasSubstr("python3 train.py"));
  EXPECT_FALSE(ListPastRuns(dir.File("absent")).ok());
}

TEST(RunHistoryTest, ComparesTwoRunsAndEveryMetricOfEither) {
  json a = Record(1000, "succeeded", 0);
  a["metrics"] = {{"loss", 0.041}};
  json b = Record(2000, "failed", 1);
  b["elapsed_s"] = 20.0;
  b["metrics"] = {{"acc", 0.5}, {"loss", 0.2}};
  const std::string text = RenderComparison("a", a, "b", b);
  EXPECT_THAT(text, ContainsRegex("\nmetric acc +- +0\\.5\n"));
  EXPECT_THAT(text, ContainsRegex("\nmetric loss +0\\.041 +0\\.2\n"));
  EXPECT_THAT(text, ContainsRegex("\nrecords/s +4,000 +2,000\n"));
  EXPECT_THAT(text, ContainsRegex("\nresult +succeeded +failed \\(exit 1\\)\n"));
  // Damaged or old records: what is missing shows as "-".
  EXPECT_THAT(RenderComparison("a", json::object(), "b", json("x")),
              ContainsRegex("\nmetrics +- +-\n"));
}

TEST(RunHistoryTest, RunDirectoryTakesAPathOrABareRunId) {
  testing::TempDir dir;
  EXPECT_EQ(RunDirectory(dir.path()), dir.path());
  EXPECT_EQ(RunDirectory(dir.File("absent")), std::nullopt);
  EXPECT_EQ(RunDirectory("127.0.0.1:8265"), std::nullopt);
  EXPECT_EQ(RunDirectory(""), std::nullopt);
  WriteRun(dir, "r", Record(1, "succeeded", 0).dump());
  ASSERT_OK_AND_ASSIGN(json record, ReadRunRecord(dir.File("r")));
  EXPECT_EQ(record["phase"], "succeeded");
  EXPECT_THAT(ReadRunRecord(dir.path()).status().message(), HasSubstr("holds no run.json"));
}

}  // namespace
}  // namespace drover

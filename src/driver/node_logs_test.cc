#include "driver/node_logs.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover {
namespace {

void Write(const std::string& path, const std::string& text, bool append = false) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  out << text;
}

TEST(NodeLogsTest, ListsNodesInTheOrderRolesAreHandedOut) {
  testing::TempDir dir;
  for (const char* name :
       {"worker-10.log", "worker-2.log", "executor-3.log", "ps-0.log", "chief-0.log",
        "evaluator-0.log", "drover.log", "notes.txt", "trainer-0.log"}) {
    Write(dir.File(name), "x\n");
  }
  std::vector<std::string> tasks;
  for (const NodeLogFile& file : ListNodeLogs(dir.path())) tasks.push_back(file.task);
  EXPECT_EQ(tasks, (std::vector<std::string>{"ps:0", "chief:0", "evaluator:0", "worker:2",
                                             "worker:10", "trainer:0", "executor 3"}));
  EXPECT_EQ(ListNodeLogs(dir.path())[0].path, dir.File("ps-0.log"));
  EXPECT_TRUE(ListNodeLogs(dir.File("absent")).empty());
}

TEST(NodeLogsTest, TaskNamesAsTaggedOrAsFileNames) {
  EXPECT_EQ(ParseTaskName("worker:1"), "worker:1");
  EXPECT_EQ(ParseTaskName("worker-1"), "worker:1");
  EXPECT_EQ(ParseTaskName("executor-3"), "executor 3");
  EXPECT_EQ(ParseTaskName("executor 3"), "executor 3");
  EXPECT_EQ(ParseTaskName("my-job-2"), "my-job:2");
  EXPECT_EQ(ParseTaskName("worker"), std::nullopt);
  EXPECT_EQ(ParseTaskName("worker:"), std::nullopt);
  EXPECT_EQ(ParseTaskName(":1"), std::nullopt);
  EXPECT_EQ(ParseTaskName("worker:x"), std::nullopt);
  EXPECT_EQ(ParseTaskName("../worker:1"), std::nullopt);
  EXPECT_EQ(NodeLogPath("/d", "worker:1"), "/d/worker-1.log");
  EXPECT_EQ(NodeLogPath("/d", "executor 3"), "/d/executor-3.log");
}

TEST(NodeLogsTest, RestartMarkersAreRecognised) {
  EXPECT_EQ(RestartMarker(2), "=== drover run: restart 2 ===");
  EXPECT_TRUE(IsRestartMarker(RestartMarker(12)));
  EXPECT_FALSE(IsRestartMarker("=== drover run: restart  ==="));
  EXPECT_FALSE(IsRestartMarker("loss 0.1"));
}

TEST(NodeLogsTest, LastLinesStartWhereTheyShould) {
  testing::TempDir dir;
  const std::string path = dir.File("w.log");
  Write(path, "a\nbb\nccc\n");
  EXPECT_EQ(*LastLinesOffset(path, 0), 9u);
  EXPECT_EQ(*LastLinesOffset(path, 1), 5u);
  EXPECT_EQ(*LastLinesOffset(path, 2), 2u);
  EXPECT_EQ(*LastLinesOffset(path, 3), 0u);
  EXPECT_EQ(*LastLinesOffset(path, 10), 0u);
  Write(path, "a\nbb\nccc");  // a last line without its newline counts
  EXPECT_EQ(*LastLinesOffset(path, 1), 5u);
  Write(path, "");
  EXPECT_EQ(*LastLinesOffset(path, 5), 0u);
  // Lines across the reads from the end (64 KiB each).
  Write(path, std::string(100'000, 'x') + "\n" + "tail\n");
  EXPECT_EQ(*LastLinesOffset(path, 1), 100'001u);
  EXPECT_EQ(*LastLinesOffset(path, 2), 0u);
  EXPECT_FALSE(LastLinesOffset(dir.File("absent"), 1).ok());
}

TEST(NodeLogsTest, FollowerHandsOutEachCompleteLineOnce) {
  testing::TempDir dir;
  const std::string path = dir.File("w.log");
  LogFollower follower(path, 0);
  std::vector<std::string> lines;
  auto take = [&lines](std::string_view line) { lines.emplace_back(line); };
  ASSERT_OK_AND_ASSIGN(bool read, follower.Read(take, false));  // not there yet
  EXPECT_FALSE(read);
  Write(path, "one\ntw");
  ASSERT_OK_AND_ASSIGN(read, follower.Read(take, false));
  EXPECT_TRUE(read);
  EXPECT_EQ(lines, (std::vector<std::string>{"one"}));
  Write(path, "o\nthree", /*append=*/true);
  ASSERT_OK(follower.Read(take, false));
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two"}));
  ASSERT_OK_AND_ASSIGN(read, follower.Read(take, false));
  EXPECT_FALSE(read);
  ASSERT_OK(follower.Read(take, /*final=*/true));  // the last line, newline or not
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
  LogFollower from_middle(path, 4);
  lines.clear();
  ASSERT_OK(from_middle.Read(take, true));
  EXPECT_EQ(lines, (std::vector<std::string>{"two", "three"}));
}

}  // namespace
}  // namespace drover

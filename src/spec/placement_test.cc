#include "drover/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;
using Code = Status::Code;

ClusterSpec Spec(const std::string& json) {
  Result<ClusterSpec> spec = ClusterSpec::FromJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : ClusterSpec();
}

// The others follow in the spec's job order (ps, then evaluator here).
TEST(PlacementTest, TrainingTasksAreRankedChiefMasterWorkersAndFedInTheSameOrder) {
  const ClusterSpec spec = Spec(
      R"({"ps": ["p0:1"], "worker": ["h1:10", "h2:11", "h1:12"], "chief": ["h2:9"],
          "evaluator": ["e0:1"]})");
  ASSERT_OK_AND_ASSIGN(std::vector<Placement> all, LayOutPlacements(spec));
  ASSERT_EQ(all.size(), 6u);
  const std::vector<std::pair<std::string, int>> order = {
      {"chief", 0}, {"worker", 0}, {"worker", 1}, {"worker", 2}, {"ps", 0}, {"evaluator", 0}};
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(all[i].job, order[i].first) << i;
    EXPECT_EQ(all[i].index, order[i].second) << i;
  }
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(all[r].rank.has_value()) << r;
    EXPECT_EQ(all[r].rank->rank, r);
    EXPECT_EQ(all[r].rank->world_size, 4);
    EXPECT_EQ(all[r].rank->master_host, "h2");
    EXPECT_EQ(all[r].rank->master_port, 9);
    EXPECT_EQ(all[r].feed, (FeedShare{r, 4}));
  }
  for (size_t i = 4; i < all.size(); ++i) {
    EXPECT_FALSE(all[i].rank.has_value()) << all[i].job;
    EXPECT_FALSE(all[i].feed.has_value()) << all[i].job;
    EXPECT_FALSE(all[i].chief) << all[i].job;
  }
  EXPECT_TRUE(all[0].chief);
  EXPECT_FALSE(all[1].chief);
}

TEST(PlacementTest, LocalAndGroupRanksFollowHostsInRankOrder) {
  const ClusterSpec spec = Spec(R"({"worker": ["a:1", "b:1", "a:2", "c:1"]})");
  ASSERT_OK_AND_ASSIGN(std::vector<Placement> all, LayOutPlacements(spec));
  ASSERT_EQ(all.size(), 4u);
  // worker:2 is the second task on host a, which is the first host.
  EXPECT_EQ(all[2].rank->local_rank, 1);
  EXPECT_EQ(all[2].rank->local_world_size, 2);
  EXPECT_EQ(all[2].rank->group_rank, 0);
  EXPECT_EQ(all[3].rank->group_rank, 2);
  EXPECT_EQ(all[3].rank->group_world_size, 3);
  EXPECT_EQ(all[3].rank->role_rank, 3);
  EXPECT_EQ(all[3].rank->role_world_size, 4);
}

TEST(PlacementTest, WorkerZeroIsChiefOnlyWithoutAChiefOrMasterJob) {
  const ClusterSpec workers = Spec(R"({"worker": ["a:1", "b:1"]})");
  EXPECT_TRUE(IsChiefTask(workers, "worker", 0));
  EXPECT_FALSE(IsChiefTask(workers, "worker", 1));
  EXPECT_TRUE(IsChiefTask(workers, "master", 0));
  EXPECT_FALSE(IsChiefTask(workers, "ps", 0));
  const ClusterSpec with_master = Spec(R"({"master": ["m:1"], "worker": ["a:1"]})");
  EXPECT_TRUE(IsChiefTask(with_master, "master", 0));
  EXPECT_FALSE(IsChiefTask(with_master, "worker", 0));
}

TEST(PlacementTest, TrainingJobsAreChiefMasterWorker) {
  EXPECT_EQ(TrainingJobs(), (std::vector<std::string>{"chief", "master", "worker"}));
  EXPECT_TRUE(IsTrainingJob("master"));
  EXPECT_FALSE(IsTrainingJob("ps"));
  EXPECT_FALSE(IsTrainingJob("evaluator"));
}

TEST(PlacementTest, CustomTrainingJobsRankOnlyThose) {
  const ClusterSpec spec = Spec(R"({"chief": ["c:1"], "worker": ["a:1"]})");
  ASSERT_OK_AND_ASSIGN(Placement worker, PlacementOf(spec, "worker", 0, {"worker"}));
  EXPECT_EQ(worker.rank->rank, 0);
  ASSERT_OK_AND_ASSIGN(Placement chief, PlacementOf(spec, "chief", 0, {"worker"}));
  EXPECT_FALSE(chief.rank.has_value());
  EXPECT_TRUE(chief.chief);
}

TEST(PlacementTest, UnknownTaskAndBadRankedAddressAreNamed) {
  const ClusterSpec spec = Spec(R"({"worker": ["a:1", "no-port"], "ps": ["p"]})");
  EXPECT_THAT(PlacementOf(spec, "worker", 7).status(), StatusIs(Code::kNotFound, HasSubstr("7")));
  EXPECT_THAT(LayOutPlacements(spec).status(),
              StatusIs(Code::kInvalidArgument, HasSubstr("task worker:1")));
  // A ps address needs no port: only ranks use it.
  const ClusterSpec ps_without_port = Spec(R"({"worker": ["a:1"], "ps": ["p"]})");
  ASSERT_OK_AND_ASSIGN(Placement ps, PlacementOf(ps_without_port, "ps", 0));
  EXPECT_EQ(ps.host, "p");
}

Placement Task(std::string job, int index, std::string host, std::vector<uint32_t> ports) {
  Placement task;
  task.job = std::move(job);
  task.index = index;
  task.host = std::move(host);
  task.ports = std::move(ports);
  return task;
}

// The server's shape: tasks in slot order (ps first), each with every port it
// reserved. The order is kept; ranks follow the role rule.
TEST(PlacementTest, PlaceTasksKeepsTheOrderAndGivesTheStoreRankZerosSecondPort) {
  std::vector<Placement> tasks = {Task("ps", 0, "p", {5}), Task("worker", 1, "b", {21, 22}),
                                  Task("chief", 0, "a", {10, 11}), Task("worker", 0, "a", {20})};
  tasks[1].gpus = {1};
  ASSERT_OK(PlaceTasks(tasks));
  EXPECT_EQ(tasks[0].job, "ps");
  EXPECT_FALSE(tasks[0].rank.has_value());
  ASSERT_TRUE(tasks[2].rank.has_value());
  EXPECT_EQ(tasks[2].rank->rank, 0);
  EXPECT_TRUE(tasks[2].chief);
  EXPECT_EQ(tasks[3].rank->rank, 1);
  EXPECT_EQ(tasks[3].rank->local_rank, 1);
  EXPECT_FALSE(tasks[3].chief);
  EXPECT_EQ(tasks[1].rank->rank, 2);
  EXPECT_EQ(tasks[1].feed, (FeedShare{2, 3}));
  EXPECT_EQ(tasks[1].gpus, std::vector<int32_t>{1});
  for (const Placement& task : tasks) {
    if (!task.rank) continue;
    EXPECT_EQ(task.rank->master_host, "a");
    EXPECT_EQ(task.rank->master_port, 10);
    EXPECT_EQ(task.rank->store_port, 11);
  }
}

TEST(PlacementTest, PlaceTasksAgreesWithTheSpecLayout) {
  std::vector<Placement> tasks = {Task("ps", 0, "p", {5}), Task("worker", 1, "b", {21}),
                                  Task("worker", 0, "a", {20}), Task("evaluator", 0, "e", {7})};
  ASSERT_OK(PlaceTasks(tasks));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpecOf(tasks));
  EXPECT_EQ(spec.task_address("worker", 1).value(), "b:21");
  ASSERT_OK_AND_ASSIGN(std::vector<Placement> from_spec, LayOutPlacements(spec));
  for (const Placement& expected : from_spec) {
    auto same = std::find_if(tasks.begin(), tasks.end(), [&](const Placement& task) {
      return task.job == expected.job && task.index == expected.index;
    });
    ASSERT_NE(same, tasks.end()) << expected.Task();
    EXPECT_EQ(*same, expected) << expected.Task();
  }
}

TEST(PlacementTest, PlaceTasksRefusesATaskTwiceAndARankWithoutAPort) {
  std::vector<Placement> twice = {Task("worker", 0, "a", {1}), Task("worker", 0, "b", {1})};
  EXPECT_THAT(PlaceTasks(twice), StatusIs(Code::kInvalidArgument, HasSubstr("worker:0")));
  std::vector<Placement> portless = {Task("worker", 0, "a", {})};
  EXPECT_THAT(PlaceTasks(portless), StatusIs(Code::kInvalidArgument, HasSubstr("no port")));
}

// The column form the rendezvous server keeps: hosts numbered by their first
// rank, local and role ranks counted in rank order, rank 0 named.
TEST(PlacementTest, PlaceRolesRanksByJobThenIndexAndNumbersHostsByFirstRank) {
  const std::vector<TaskKey> tasks = {
      {"ps", 0, "p", true},     {"worker", 2, "b", true}, {"worker", 0, "b", true},
      {"master", 0, "a", true}, {"worker", 1, "a", true},
  };
  ASSERT_OK_AND_ASSIGN(PlacedRoles placed, PlaceRoles(tasks));
  EXPECT_EQ(placed.world_size, 4);
  EXPECT_EQ(placed.group_world_size, 2);
  ASSERT_EQ(placed.master, std::optional<size_t>(3));
  EXPECT_EQ(placed.roles[0], (TaskRole{}));  // ps: neither chief nor ranked
  const TaskRole master{.rank = 0,
                        .local_rank = 0,
                        .local_world_size = 2,
                        .group_rank = 0,
                        .role_rank = 0,
                        .role_world_size = 1,
                        .chief = true,
                        .ranked = true};
  EXPECT_EQ(placed.roles[3], master);
  const TaskRole worker0{.rank = 1,
                         .local_rank = 0,
                         .local_world_size = 2,
                         .group_rank = 1,
                         .role_rank = 0,
                         .role_world_size = 3,
                         .chief = false,
                         .ranked = true};
  EXPECT_EQ(placed.roles[2], worker0);
  EXPECT_EQ(placed.roles[4].rank, 2u);
  EXPECT_EQ(placed.roles[4].local_rank, 1u);  // a's second rank
  EXPECT_EQ(placed.roles[4].group_rank, 0u);
  EXPECT_EQ(placed.roles[1].rank, 3u);
  EXPECT_EQ(placed.roles[1].role_rank, 2u);

  const RankInfo info = RankInfoOf(placed.roles[1], placed.world_size, placed.group_world_size);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.group_world_size, 2);
  EXPECT_EQ(info.local_rank, 1);
}

TEST(PlacementTest, PlaceRolesWithoutATrainingTaskNamesNoMaster) {
  const std::vector<TaskKey> tasks = {{"ps", 0, "p", false}, {"evaluator", 0, "e", false}};
  ASSERT_OK_AND_ASSIGN(PlacedRoles placed, PlaceRoles(tasks));
  EXPECT_FALSE(placed.master.has_value());
  EXPECT_EQ(placed.world_size, 0);
  EXPECT_EQ(placed.roles.size(), 2u);
  // Ranking only "ps" (a resolver's caller may): its task needs a port.
  EXPECT_THAT(PlaceRoles(tasks, {"ps"}), StatusIs(Code::kInvalidArgument, HasSubstr("ps:0")));
  EXPECT_THAT(PlaceRoles({{"w", 3, "a", true}, {"w", 3, "b", true}}, {"w"}),
              StatusIs(Code::kInvalidArgument, HasSubstr("w:3 is placed twice")));
}

}  // namespace
}  // namespace drover

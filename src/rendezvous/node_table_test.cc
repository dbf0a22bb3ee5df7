// NodeTable: registration order, retried tasks, the slot order and roles,
// what a timeout lists, and the state it reports. No sockets.

#include "rendezvous/node_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rendezvous/server_fakes.h"

namespace drover::rendezvous_internal {
namespace {

using ::testing::ElementsAre;

ClusterTemplate Template(int num_nodes, int num_ps = 0) {
  ClusterTemplate cluster;
  cluster.num_nodes = num_nodes;
  cluster.num_ps = num_ps;
  return cluster;
}

std::vector<std::string> Ids(const NodeTable& table) {
  std::vector<std::string> ids;
  for (const NodeRecord& node : table.nodes()) ids.push_back(node.info.executor_id);
  return ids;
}

TEST(NodeTableTest, RegistersInArrivalOrderAndARetriedTaskReplacesItsEntry) {
  NodeTable table(Template(3));
  Clock::time_point now = Clock::now();
  table.Register(TestNode("b", 7000), 1, now);
  table.Register(TestNode("a", 7100), 2, now);
  table.Register(TestNode("b", 7200), 3, now);

  EXPECT_THAT(Ids(table), ElementsAre("b", "a"));
  NodeRecord* b = table.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->connection, 3u);
  EXPECT_THAT(b->info.ports, ElementsAre(7200u));
  EXPECT_EQ(b->sequence, 3u);  // it goes last among equal keys
  EXPECT_EQ(table.DescribeRegistrations(), "2 of 3 nodes registered (executors b, a)");
}

TEST(NodeTableTest, TheRoleIsTheServersToAssign) {
  NodeTable table(Template(2));
  NodeInfo node = TestNode("0");
  node.job_name = "chief";
  node.task_index = 4;
  NodeRecord& record = table.Register(node, 1, Clock::now());
  EXPECT_EQ(record.info.job_name, "");
  EXPECT_EQ(record.info.task_index, -1);
  EXPECT_EQ(NodeTable::Describe(record), "executor 0");
}

TEST(NodeTableTest, RemoveForgetsOneRegistration) {
  NodeTable table(Template(3));
  for (const char* id : {"0", "1", "2"}) table.Register(TestNode(id), 1, Clock::now());
  table.Remove("0");
  table.Remove("missing");
  EXPECT_EQ(table.Find("0"), nullptr);
  ASSERT_NE(table.Find("2"), nullptr);
  EXPECT_EQ(table.Find("2")->info.executor_id, "2");
  EXPECT_THAT(Ids(table), ElementsAre("1", "2"));

  // From the middle: the records after it are still found, in order.
  for (const char* id : {"3", "4"}) table.Register(TestNode(id), 1, Clock::now());
  table.Remove("2");
  EXPECT_THAT(Ids(table), ElementsAre("1", "3", "4"));
  for (const char* id : {"1", "3", "4"}) {
    ASSERT_NE(table.Find(id), nullptr) << id;
    EXPECT_EQ(table.Find(id)->info.executor_id, id);
  }
  EXPECT_EQ(table.Find("2"), nullptr);
}

TEST(NodeTableTest, SlotsGoToIntegerIdsInNumericOrderThenToTheOthers) {
  ClusterTemplate cluster = Template(6, /*num_ps=*/1);
  cluster.master_node = "chief";
  cluster.eval_node = true;
  NodeTable table(cluster);
  Clock::time_point registered = Clock::now();
  for (const char* id : {"10", "x", "2", "b", "01", "1"})
    table.Register(TestNode(id), 1, registered);
  Clock::time_point formed = registered + std::chrono::seconds(5);
  table.AssignSlots(formed);

  // "01" and "1" are the same number: registration order decides.
  EXPECT_THAT(Ids(table), ElementsAre("01", "1", "2", "10", "b", "x"));
  std::vector<std::string> roles;
  for (const NodeRecord& node : table.nodes()) {
    roles.push_back(node.info.job_name + ":" + std::to_string(node.info.task_index));
    EXPECT_EQ(node.last_seen, formed);
  }
  EXPECT_THAT(roles,
              ElementsAre("ps:0", "chief:0", "evaluator:0", "worker:0", "worker:1", "worker:2"));
  ASSERT_NE(table.Find("b"), nullptr);
  EXPECT_EQ(NodeTable::Describe(*table.Find("b")), "executor b (worker:1)");
}

TEST(NodeTableTest, ATimeoutListsTheRegisteredInSlotOrderAndTheMissingSlots) {
  NodeTable table(Template(5, /*num_ps=*/1));
  for (const char* id : {"3", "1", "01"}) table.Register(TestNode(id), 1, Clock::now());
  EXPECT_THAT(table.RegisteredInSlotOrder(), ElementsAre("01", "1", "3"));
  EXPECT_THAT(table.MissingSlots(), ElementsAre("worker:2", "worker:3"));
}

TEST(NodeTableTest, RegistrationsAreListedWhileReservingAndCutWhenLong) {
  NodeTable table(Template(40));
  for (int i = 0; i < 40; ++i) table.Register(TestNode(std::to_string(i)), 1, Clock::now());
  std::string text = table.DescribeRegistrations();
  EXPECT_EQ(text.rfind("40 of 40 nodes registered (executors 0, 1, 2, ", 0), 0u) << text;
  EXPECT_THAT(text, ::testing::EndsWith(", 31 and 8 more)"));
  table.set_formed();
  EXPECT_EQ(table.DescribeRegistrations(), "40 of 40 nodes registered");
}

TEST(NodeTableTest, StateNamesThePhaseAndEveryNodesHeartbeatAge) {
  NodeTable table(Template(2));
  Clock::time_point then = Clock::now();
  NodeRecord& node = table.Register(TestNode("0"), 1, then);
  node.error = "boom";
  node.program_pid = 42;

  ClusterState state = table.State(then + Milliseconds(1500));
  EXPECT_EQ(state.phase, "reserving");
  EXPECT_EQ(state.registered, 1);
  EXPECT_EQ(state.expected, 2);
  ASSERT_EQ(state.nodes.size(), 1u);
  EXPECT_EQ(state.nodes[0].last_heartbeat_age, Milliseconds(1500));
  EXPECT_EQ(state.nodes[0].error, "boom");
  EXPECT_EQ(state.nodes[0].program_pid, 42);
  EXPECT_TRUE(state.nodes[0].alive);

  table.set_formed();
  EXPECT_EQ(table.State(then).phase, "formed");
  table.Stop("first reason");
  table.Stop("second reason");
  EXPECT_EQ(table.State(then).phase, "stopped");
  EXPECT_EQ(table.stop_reason(), "first reason");
}

}  // namespace
}  // namespace drover::rendezvous_internal

// Liveness: heartbeats, missed heartbeats, closed connections, and the nodes
// that are not dead (stopped, left, not yet formed). Fake peers and a fake
// server (server_fakes.h); time is passed in.

#include "rendezvous/liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "rendezvous/server_fakes.h"

namespace drover::rendezvous_internal {
namespace {

class LivenessTest : public ::testing::Test {
 protected:
  LivenessTest() : table_(Template()), liveness_(Options(), table_, context_) {
    zero_.executor_id = "0";
    one_.executor_id = "1";
    table_.Register(TestNode("0"), zero_.id(), start_);
    table_.Register(TestNode("1"), one_.id(), start_);
  }

  static ClusterTemplate Template() {
    ClusterTemplate cluster;
    cluster.num_nodes = 2;
    return cluster;
  }
  static LivenessOptions Options() {
    LivenessOptions options;
    options.heartbeat_interval = std::chrono::seconds(1);
    options.missed_heartbeats_until_dead = 5;
    return options;
  }
  void Form() {
    table_.AssignSlots(start_);
    table_.set_formed();
  }
  int Deaths() const {
    int count = 0;
    for (const NodeEvent& event : context_.events) count += event.kind == NodeEvent::Kind::kDead;
    return count;
  }

  const Clock::time_point start_ = Clock::now();
  FakeContext context_;
  FakePeer& zero_ = context_.AddPeer(1);
  FakePeer& one_ = context_.AddPeer(2);
  NodeTable table_;
  Liveness liveness_;
};

TEST_F(LivenessTest, AHeartbeatRecordsLifeAndWhatTheAgentKnows) {
  Form();
  wire::Heartbeat heartbeat;
  heartbeat.set_program_pid(77);
  heartbeat.mutable_feed()->set_records(5);
  liveness_.HandleHeartbeat(zero_, heartbeat);
  NodeRecord* node = table_.Find("0");
  EXPECT_GE(node->last_seen, start_);
  EXPECT_EQ(node->program_pid, 77);
  ASSERT_NE(node->report, nullptr);
  ASSERT_TRUE(node->report->feed.has_value());
  EXPECT_EQ(node->report->feed->records, 5u);

  // A node that reports nothing but life keeps no report.
  liveness_.HandleHeartbeat(one_, wire::Heartbeat());
  EXPECT_EQ(table_.Find("1")->report, nullptr);
  // Metrics without feed progress keep the progress already reported.
  wire::Heartbeat metrics;
  wire::Metric* loss = metrics.add_metrics();
  loss->set_name("loss");
  loss->set_value(0.5);
  liveness_.HandleHeartbeat(zero_, metrics);
  ASSERT_EQ(node->report->metrics.size(), 1u);
  EXPECT_EQ(node->report->metrics[0].name, "loss");
  EXPECT_EQ(node->report->feed->records, 5u);
}

TEST_F(LivenessTest, AHeartbeatFromAConnectionWithoutTheSlotIsIgnored) {
  Form();
  FakePeer& stale = context_.AddPeer(9);
  stale.executor_id = "0";  // the slot is connection 1's now
  wire::Heartbeat heartbeat;
  heartbeat.set_program_pid(77);
  liveness_.HandleHeartbeat(stale, heartbeat);
  FakePeer& unregistered = context_.AddPeer(10);
  liveness_.HandleHeartbeat(unregistered, heartbeat);
  EXPECT_EQ(table_.Find("0")->program_pid, 0);
  EXPECT_EQ(table_.Find("0")->last_seen, start_);
}

TEST_F(LivenessTest, ASilentNodeIsDeclaredDeadOnceAndDisconnected) {
  Form();
  table_.Find("1")->last_seen = start_ + std::chrono::seconds(6);
  liveness_.CheckHeartbeats(start_ + std::chrono::seconds(5));  // at the limit: not yet
  EXPECT_EQ(Deaths(), 0);

  liveness_.CheckHeartbeats(start_ + Milliseconds(6500));
  ASSERT_EQ(Deaths(), 1);
  const NodeEvent& event = context_.events[0];
  EXPECT_EQ(event.node.executor_id, "0");
  EXPECT_EQ(event.message, "executor 0 (worker:0) missed 5 heartbeats (last 6.5 s ago)");
  EXPECT_TRUE(context_.Logged(event.message + "; declared dead"));
  NodeRecord* node = table_.Find("0");
  EXPECT_FALSE(node->alive);
  EXPECT_EQ(node->error, event.message);
  EXPECT_EQ(node->connection, 0u);
  EXPECT_TRUE(zero_.closed);
  EXPECT_EQ(zero_.executor_id, "");  // its close is not a second death
  EXPECT_FALSE(one_.closed);

  liveness_.CheckHeartbeats(start_ + std::chrono::seconds(8));
  EXPECT_EQ(Deaths(), 1);
}

TEST_F(LivenessTest, AClosedConnectionIsADeathButAReportedErrorStays) {
  Form();
  NodeRecord* node = table_.Find("1");
  node->error = "out of memory";
  node->connection = 0;
  liveness_.Disconnected(*node);
  ASSERT_EQ(Deaths(), 1);
  EXPECT_EQ(context_.events[0].message, "executor 1 (worker:1): connection closed");
  EXPECT_FALSE(node->alive);
  EXPECT_EQ(node->error, "out of memory");
  liveness_.Disconnected(*node);
  EXPECT_EQ(Deaths(), 1);
}

TEST_F(LivenessTest, AConnectionThatTimedOutSaysWhy) {
  Form();
  NodeRecord* node = table_.Find("1");
  node->connection = 0;
  liveness_.Disconnected(*node, "its host stopped answering (the connection from h:1 timed out)");
  ASSERT_EQ(Deaths(), 1);
  EXPECT_EQ(context_.events[0].message,
            "executor 1 (worker:1): its host stopped answering (the connection from h:1 timed "
            "out)");
}

// A quiet heartbeat buys its node the quiet interval on top of the missed
// heartbeats; the next heartbeat that is not quiet takes it back.
TEST_F(LivenessTest, AQuietNodeMaySayNothingForTheQuietIntervalMore) {
  LivenessOptions options = Options();
  options.quiet_heartbeat_interval = std::chrono::seconds(10);
  Liveness liveness(options, table_, context_);
  Form();
  wire::Heartbeat quiet;
  quiet.set_quiet(true);
  liveness.HandleHeartbeat(zero_, quiet);
  liveness.HandleHeartbeat(one_, wire::Heartbeat());
  const Clock::time_point seen = table_.Find("0")->last_seen;
  table_.Find("1")->last_seen = seen;

  liveness.CheckHeartbeats(seen + std::chrono::seconds(15));  // 0: at its limit, 1: past
  ASSERT_EQ(Deaths(), 1);
  EXPECT_EQ(context_.events[0].node.executor_id, "1");
  liveness.CheckHeartbeats(seen + Milliseconds(15'500));
  ASSERT_EQ(Deaths(), 2);
  EXPECT_EQ(context_.events[1].node.executor_id, "0");
}

TEST_F(LivenessTest, AHeartbeatThatIsNotQuietEndsTheQuiet) {
  LivenessOptions options = Options();
  options.quiet_heartbeat_interval = std::chrono::seconds(10);
  Liveness liveness(options, table_, context_);
  Form();
  FakePeer& host = context_.AddPeer(3);
  host.host = true;
  host.host_executors = {"0", "1"};
  for (const char* id : {"0", "1"}) table_.Find(id)->connection = host.id();
  wire::Heartbeat quiet;
  quiet.set_quiet(true);
  liveness.HandleHeartbeat(host, quiet);  // quiet for both of the host's nodes
  EXPECT_TRUE(table_.Find("0")->quiet);
  EXPECT_TRUE(table_.Find("1")->quiet);
  liveness.HandleHeartbeat(host, wire::Heartbeat());
  const Clock::time_point seen = table_.Find("0")->last_seen;
  table_.Find("1")->last_seen = seen;
  liveness.CheckHeartbeats(seen + std::chrono::seconds(6));
  EXPECT_EQ(Deaths(), 2);
}

TEST_F(LivenessTest, NodesToldToStopOrThatLeftAreNotDead) {
  Form();
  table_.Find("0")->stop_sent = true;
  table_.Find("1")->alive = false;
  table_.Find("1")->left = true;
  liveness_.CheckHeartbeats(start_ + std::chrono::minutes(1));
  liveness_.Disconnected(*table_.Find("0"));
  liveness_.Disconnected(*table_.Find("1"));
  EXPECT_EQ(Deaths(), 0);
  EXPECT_FALSE(zero_.closed);
}

TEST_F(LivenessTest, NobodyDiesBeforeTheBarrier) {
  liveness_.CheckHeartbeats(start_ + std::chrono::minutes(1));
  liveness_.Disconnected(*table_.Find("0"));
  EXPECT_EQ(Deaths(), 0);
  EXPECT_TRUE(table_.Find("0")->alive);
}

// One agent carries both nodes: its heartbeat is both nodes' life, and its
// top-level payload is no node's; silent, both die, and its connection
// closes once.
TEST_F(LivenessTest, AHostsHeartbeatKeepsEachOfItsNodesAlive) {
  Form();
  FakePeer& host = context_.AddPeer(3);
  host.host = true;
  host.host_executors = {"0", "1"};
  for (const char* id : {"0", "1"}) table_.Find(id)->connection = host.id();
  wire::Heartbeat heartbeat;
  heartbeat.set_program_pid(77);
  const Clock::time_point before = Clock::now();
  liveness_.HandleHeartbeat(host, heartbeat);
  for (const char* id : {"0", "1"}) {
    EXPECT_GE(table_.Find(id)->last_seen, before);
    EXPECT_EQ(table_.Find(id)->program_pid, 0);  // whose program? not said
  }

  liveness_.CheckHeartbeats(Clock::now() + std::chrono::minutes(1));
  EXPECT_EQ(Deaths(), 2);
  EXPECT_TRUE(host.closed);
  EXPECT_THAT(host.host_executors, ::testing::IsEmpty());  // its close is no second death
  EXPECT_FALSE(zero_.closed);
}

// Each node's payload in a host's heartbeat lands on that node; one for a
// node the host does not carry is ignored.
TEST_F(LivenessTest, AHostsHeartbeatCarriesEachNodesPayload) {
  Form();
  FakePeer& host = context_.AddPeer(3);
  host.host = true;
  host.host_executors = {"0"};
  table_.Find("0")->connection = host.id();
  wire::Heartbeat heartbeat;
  wire::NodeHeartbeat* zero = heartbeat.add_nodes();
  zero->set_executor_id("0");
  zero->set_program_pid(70);
  zero->mutable_feed()->set_records(12);
  wire::NodeHeartbeat* other = heartbeat.add_nodes();  // connection 2's node
  other->set_executor_id("1");
  other->set_program_pid(71);
  liveness_.HandleHeartbeat(host, heartbeat);

  NodeRecord* node = table_.Find("0");
  EXPECT_EQ(node->program_pid, 70);
  ASSERT_NE(node->report, nullptr);
  EXPECT_EQ(node->report->feed->records, 12u);
  EXPECT_EQ(table_.Find("1")->program_pid, 0);
  EXPECT_EQ(table_.Find("1")->report, nullptr);
}

}  // namespace
}  // namespace drover::rendezvous_internal

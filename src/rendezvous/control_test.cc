// Control: each CONTROL kind, who may send it, and the driver's StopNode and
// StopAll. Fake peers and a fake server (server_fakes.h): no sockets.

#include "rendezvous/control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rendezvous/server_fakes.h"
#include "testing/status_matchers.h"

namespace drover::rendezvous_internal {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

wire::Control Message(wire::Control::Kind kind, const std::string& executor_id = "") {
  wire::Control control;
  control.set_kind(kind);
  control.set_executor_id(executor_id);
  return control;
}

// A formed cluster of executors 0 and 1, whose agents hold node
// credentials, and the driver's connection (the cluster token).
class ControlTest : public ::testing::Test {
 protected:
  ControlTest() : table_(Template()), control_(table_, context_) {
    for (FakePeer* peer : {&zero_, &one_}) {
      std::string id = peer == &zero_ ? "0" : "1";
      peer->AsNode(id);
      peer->executor_id = id;
      table_.Register(TestNode(id), peer->id(), Clock::now());
    }
    table_.AssignSlots(Clock::now());
    table_.set_formed();
  }

  static ClusterTemplate Template() {
    ClusterTemplate cluster;
    cluster.num_nodes = 2;
    return cluster;
  }

  FakeContext context_;
  FakePeer& zero_ = context_.AddPeer(1);
  FakePeer& one_ = context_.AddPeer(2);
  FakePeer& driver_ = context_.AddPeer(3);
  NodeTable table_;
  Control control_;
};

TEST_F(ControlTest, AReportedErrorIsKeptAndReachesTheDriver) {
  wire::Control report = Message(wire::Control::REPORT_ERROR);  // no id: its own
  report.set_message("boom");
  report.add_last_log_lines("a");
  report.add_last_log_lines("b");
  control_.HandleControl(one_, report);

  NodeRecord* node = table_.Find("1");
  EXPECT_EQ(node->error, "boom");
  EXPECT_THAT(node->last_log_lines, ElementsAre("a", "b"));
  ASSERT_EQ(context_.events.size(), 1u);
  EXPECT_EQ(context_.events[0].kind, NodeEvent::Kind::kError);
  EXPECT_EQ(context_.events[0].node.job_name, "worker");
  EXPECT_EQ(context_.events[0].message, "boom");
  EXPECT_TRUE(context_.Logged("executor 1 (worker:1) reported an error: boom"));
}

TEST_F(ControlTest, ANodeReportsErrorsForItselfOnly) {
  control_.HandleControl(zero_, Message(wire::Control::REPORT_ERROR, "1"));
  ASSERT_TRUE(zero_.rejection.has_value());
  EXPECT_EQ(zero_.rejection->code, wire::PERMISSION_DENIED);
  EXPECT_EQ(zero_.rejection->message,
            "the node credential of executor 0 may not report an error for executor 1");
  EXPECT_EQ(zero_.rejection->reason, "executor 0: " + zero_.rejection->message);
  EXPECT_EQ(table_.Find("1")->error, "");
  EXPECT_THAT(context_.events, IsEmpty());
}

TEST_F(ControlTest, AnErrorForAnUnknownExecutorIsStillReported) {
  wire::Control report = Message(wire::Control::REPORT_ERROR, "7");
  report.set_message("lost");
  control_.HandleControl(driver_, report);
  EXPECT_TRUE(context_.Logged("REPORT_ERROR for unknown executor '7' from 192.0.2.1:5000: lost"));
  ASSERT_EQ(context_.events.size(), 1u);
  EXPECT_EQ(context_.events[0].node.executor_id, "7");
}

TEST_F(ControlTest, ANodeSeesEveryPlaceButOnlyItsOwnErrors) {
  for (const char* id : {"0", "1"}) {
    table_.Find(id)->error = std::string("error of ") + id;
    table_.Find(id)->last_log_lines = {"line"};
  }
  control_.HandleControl(zero_, Message(wire::Control::QUERY_STATE));
  std::optional<wire::State> state = zero_.Last<wire::State>(wire::STATE);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->phase(), "formed");
  ASSERT_EQ(state->nodes_size(), 2);
  EXPECT_EQ(state->nodes(0).error(), "error of 0");
  EXPECT_EQ(state->nodes(0).last_log_lines_size(), 1);
  EXPECT_EQ(state->nodes(1).error(), "");
  EXPECT_EQ(state->nodes(1).last_log_lines_size(), 0);
  EXPECT_EQ(state->nodes(1).node().job_name(), "worker");

  control_.HandleControl(driver_, Message(wire::Control::QUERY_STATE));
  state = driver_.Last<wire::State>(wire::STATE);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->nodes(1).error(), "error of 1");
}

TEST_F(ControlTest, StopAllReachesEveryNodeAndTheDriver) {
  control_.HandleControl(driver_, Message(wire::Control::STOP_ALL));
  for (FakePeer* peer : {&zero_, &one_}) {
    std::optional<wire::Control> stop = peer->Last<wire::Control>(wire::CONTROL);
    ASSERT_TRUE(stop.has_value());
    EXPECT_EQ(stop->kind(), wire::Control::STOP_ALL);
  }
  EXPECT_TRUE(table_.Find("0")->stop_sent);
  EXPECT_TRUE(table_.Find("1")->stop_sent);
  ASSERT_EQ(context_.events.size(), 1u);
  EXPECT_EQ(context_.events[0].kind, NodeEvent::Kind::kStopped);
  EXPECT_EQ(context_.events[0].message, "192.0.2.1:5000 asked to stop all nodes");
}

// Before the barrier a send that closes a connection removes its
// registration from the table StopAll is relaying to: the others still get
// their STOP, and nothing reads a removed record (the asan build checks).
TEST(ControlBeforeTheBarrierTest, StopAllSurvivesASendThatDropsARegistration) {
  ClusterTemplate cluster;
  cluster.num_nodes = 4;
  NodeTable table(cluster);
  FakeContext context;
  Control control(table, context);
  std::vector<FakePeer*> peers;
  for (int i = 0; i < 3; ++i) {
    FakePeer& peer = context.AddPeer(static_cast<uint64_t>(i + 1));
    table.Register(TestNode(std::to_string(i)), peer.id(), Clock::now());
    peers.push_back(&peer);
  }
  peers[0]->on_send = [&] {
    peers[0]->Close("over its write bound");
    table.Remove("0");
  };
  FakePeer& driver = context.AddPeer(9);
  control.HandleControl(driver, Message(wire::Control::STOP_ALL));
  EXPECT_EQ(table.Find("0"), nullptr);
  for (FakePeer* peer : {peers[1], peers[2]}) {
    std::optional<wire::Control> stop = peer->Last<wire::Control>(wire::CONTROL);
    ASSERT_TRUE(stop.has_value()) << "peer " << peer->id();
    EXPECT_EQ(stop->kind(), wire::Control::STOP_ALL);
  }
}

TEST_F(ControlTest, ANodeMayNotStopOthers) {
  control_.HandleControl(zero_, Message(wire::Control::STOP_ALL));
  ASSERT_TRUE(zero_.rejection.has_value());
  EXPECT_EQ(zero_.rejection->message, "the node credential of executor 0 may not stop all nodes");
  control_.HandleControl(one_, Message(wire::Control::STOP_NODE, "0"));
  ASSERT_TRUE(one_.rejection.has_value());
  EXPECT_EQ(one_.rejection->message, "the node credential of executor 1 may not stop executor 0");
  EXPECT_FALSE(table_.Find("0")->stop_sent);
}

TEST_F(ControlTest, StopNodeIsRelayedToThatNodeOnly) {
  control_.HandleControl(driver_, Message(wire::Control::STOP_NODE, "1"));
  std::optional<wire::Control> stop = one_.Last<wire::Control>(wire::CONTROL);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->kind(), wire::Control::STOP_NODE);
  EXPECT_EQ(stop->executor_id(), "1");
  EXPECT_EQ(zero_.Count(wire::CONTROL), 0u);

  control_.HandleControl(driver_, Message(wire::Control::STOP_NODE, "9"));
  EXPECT_TRUE(context_.Logged("STOP_NODE from 192.0.2.1:5000 names unknown executor '9'"));
  zero_.Close();
  control_.HandleControl(driver_, Message(wire::Control::STOP_NODE, "0"));
  EXPECT_TRUE(context_.Logged("cannot stop executor 0 (worker:0): connection closed"));
}

TEST_F(ControlTest, TheDriversStopNodeSaysWhyItCannot) {
  EXPECT_OK(control_.StopNode("0"));
  EXPECT_EQ(zero_.Count(wire::CONTROL), 1u);
  EXPECT_THAT(control_.StopNode("9"),
              StatusIs(Status::Code::kNotFound,
                       HasSubstr("no node with executor id '9' (2 of 2 nodes registered)")));
  one_.Close();
  EXPECT_THAT(control_.StopNode("1"),
              StatusIs(Status::Code::kUnavailable,
                       HasSubstr("cannot stop executor 1 (worker:1): its connection is closed")));
  EXPECT_TRUE(table_.Find("1")->stop_sent);  // its close is not a death either
}

TEST_F(ControlTest, LeaveMarksTheNodeLeftOnce) {
  control_.HandleControl(one_, Message(wire::Control::LEAVE));
  control_.HandleControl(one_, Message(wire::Control::LEAVE));
  NodeRecord* node = table_.Find("1");
  EXPECT_FALSE(node->alive);
  EXPECT_TRUE(node->left);
  ASSERT_EQ(context_.events.size(), 1u);
  EXPECT_EQ(context_.events[0].kind, NodeEvent::Kind::kLeft);
  EXPECT_EQ(context_.events[0].message, "finished and left");
  EXPECT_TRUE(context_.Logged("executor 1 (worker:1) finished and left"));

  control_.HandleControl(driver_, Message(wire::Control::LEAVE));
  EXPECT_TRUE(context_.Logged("LEAVE from 192.0.2.1:5000, which is no registered node"));
}

TEST_F(ControlTest, AHostsLeaveNamesWhichOfItsNodesFinished) {
  FakePeer& host = context_.AddPeer(4);
  host.host = true;
  host.host_executors = {"1"};
  table_.Find("1")->connection = host.id();
  control_.HandleControl(host, Message(wire::Control::LEAVE, "0"));  // not its node
  EXPECT_TRUE(table_.Find("0")->alive);
  EXPECT_TRUE(context_.Logged("LEAVE from 192.0.2.1:5000, which is no registered node"));
  control_.HandleControl(host, Message(wire::Control::LEAVE, "1"));
  EXPECT_TRUE(table_.Find("1")->left);
  EXPECT_TRUE(context_.Logged("executor 1 (worker:1) finished and left"));
}

TEST_F(ControlTest, AnUnknownKindIsMalformed) {
  control_.HandleControl(driver_, Message(static_cast<wire::Control::Kind>(99)));
  ASSERT_TRUE(driver_.rejection.has_value());
  EXPECT_EQ(driver_.rejection->code, wire::MALFORMED);
  EXPECT_EQ(driver_.rejection->message, "CONTROL with unknown kind 99");
}

}  // namespace
}  // namespace drover::rendezvous_internal

// Barrier: registrations, retried tasks, forming the cluster, members that
// reconnect, late and unauthorised registrations, the reservation timeout.
// Peers and the server are fakes (server_fakes.h): no sockets.

#include "rendezvous/barrier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <memory>
#include <string>
#include <vector>

#include "rendezvous/cluster_frame.h"
#include "rendezvous/node_info_codec.h"
#include "rendezvous/server_fakes.h"
#include "testing/status_matchers.h"

namespace drover::rendezvous_internal {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

wire::Register RegisterBody(const std::string& executor_id, uint32_t port = 7000) {
  wire::Register request;
  wire::NodeInfo* node = request.mutable_node();
  node->set_executor_id(executor_id);
  node->set_host("10.0.0.1");
  node->add_ports(port);
  return request;
}

class BarrierTest : public ::testing::Test {
 protected:
  void Start(int num_nodes, bool elastic = false) {
    ClusterTemplate cluster;
    cluster.num_nodes = num_nodes;
    Start(cluster, elastic);
  }
  void Start(const ClusterTemplate& cluster, bool elastic = false) {
    table_ = std::make_unique<NodeTable>(cluster);
    BarrierOptions options;
    options.elastic = elastic;
    options.cluster_id = "c1";
    options.heartbeats = HeartbeatTiming{Milliseconds(250), Milliseconds(3'000)};
    options.reservation_timeout = std::chrono::seconds(60);
    barrier_ = std::make_unique<Barrier>(options, *table_, context_);
  }

  // A new peer registers `executor_id`.
  FakePeer& Register(uint64_t peer_id, const std::string& executor_id) {
    FakePeer& peer = context_.AddPeer(peer_id);
    barrier_->HandleRegister(peer, RegisterBody(executor_id, 7000 + peer_id));
    return peer;
  }

  // `peer`, a host's agent, registers `executor_id` as one of its nodes.
  void RegisterOnHost(FakePeer& peer, const std::string& executor_id) {
    wire::Register request = RegisterBody(executor_id, 7000 + peer.id());
    request.set_host(true);
    barrier_->HandleRegister(peer, request);
  }

  FakeContext context_;
  std::unique_ptr<NodeTable> table_;
  std::unique_ptr<Barrier> barrier_;
};

TEST_F(BarrierTest, EveryRegistrationIsAcknowledgedAndTheLastSlotFormsTheCluster) {
  Start(3);
  FakePeer& two = Register(1, "2");
  FakePeer& zero = Register(2, "0");
  EXPECT_EQ(two.Last<wire::Registered>(wire::REGISTERED)->registered(), 1u);
  EXPECT_EQ(zero.Last<wire::Registered>(wire::REGISTERED)->registered(), 2u);
  EXPECT_EQ(zero.Count(wire::CLUSTER), 0u);
  EXPECT_FALSE(context_.outcome().has_value());

  FakePeer& one = Register(3, "1");
  std::optional<wire::Registered> registered = one.Last<wire::Registered>(wire::REGISTERED);
  ASSERT_TRUE(registered.has_value());
  EXPECT_EQ(registered->registered(), 3u);
  EXPECT_EQ(registered->expected(), 3u);
  EXPECT_EQ(table_->phase(), Phase::kFormed);

  // Every node gets its own position (slot order: executor ids); the shared
  // part is the same bytes.
  std::optional<wire::Cluster> cluster = two.Last<wire::Cluster>(wire::CLUSTER);
  ASSERT_TRUE(cluster.has_value());
  EXPECT_EQ(cluster->position(), 2u);
  EXPECT_EQ(cluster->heartbeat_interval_ms(), 250u);
  EXPECT_EQ(cluster->quiet_heartbeat_interval_ms(), 3'000u);
  EXPECT_EQ(zero.Last<wire::Cluster>(wire::CLUSTER)->position(), 0u);
  EXPECT_EQ(zero.sent.back().shared.get(), two.sent.back().shared.get());

  ASSERT_TRUE(context_.outcome().has_value());
  ASSERT_OK(*context_.outcome());
  ASSERT_OK_AND_ASSIGN(FormedCluster formed, barrier_->Formed());
  EXPECT_EQ(formed.cluster_id, "c1");
  ASSERT_EQ(formed.nodes.size(), 3u);
  EXPECT_EQ(formed.nodes[0].executor_id, "0");
  ASSERT_OK_AND_ASSIGN(std::string address, formed.spec.task_address("worker", 1));
  EXPECT_EQ(address, "10.0.0.1:7003");
  ASSERT_EQ(formed.placements.size(), 3u);
  EXPECT_EQ(formed.placements[2].Task(), "worker:2");
  EXPECT_EQ(formed.placements[2].rank->rank, 2);
  EXPECT_TRUE(formed.placements[0].chief);
  EXPECT_TRUE(context_.Logged("cluster c1 formed with 3 nodes"));
}

TEST_F(BarrierTest, ARetriedTaskReplacesItsEntryAndItsEarlierConnection) {
  Start(2);
  FakePeer& first = Register(1, "0");
  FakePeer& second = Register(2, "0");
  EXPECT_TRUE(first.closed);
  EXPECT_EQ(first.executor_id, "");  // so its close is not taken for the node's
  EXPECT_EQ(second.executor_id, "0");
  ASSERT_EQ(table_->size(), 1u);
  EXPECT_EQ(table_->Find("0")->connection, 2u);
  EXPECT_TRUE(
      context_.Logged("executor 0 registered again from 192.0.2.1:5000; dropping its "
                      "earlier connection from 192.0.2.1:5000"));
  EXPECT_EQ(second.Last<wire::Registered>(wire::REGISTERED)->registered(), 1u);
}

TEST_F(BarrierTest, AConnectionThatRegistersAnotherIdGivesUpTheFirst) {
  Start(3);
  FakePeer& peer = Register(1, "0");
  barrier_->HandleRegister(peer, RegisterBody("1"));
  EXPECT_EQ(table_->Find("0"), nullptr);
  ASSERT_NE(table_->Find("1"), nullptr);
  EXPECT_EQ(peer.executor_id, "1");
  EXPECT_EQ(table_->size(), 1u);
}

TEST_F(BarrierTest, ANodeCredentialRegistersItsOwnSlotOnly) {
  Start(2);
  FakePeer& peer = context_.AddPeer(1);
  peer.AsNode("1");
  barrier_->HandleRegister(peer, RegisterBody("0"));
  ASSERT_TRUE(peer.rejection.has_value());
  EXPECT_EQ(peer.rejection->code, wire::PERMISSION_DENIED);
  EXPECT_EQ(peer.rejection->message,
            "the node credential of executor 1 may not register executor 0");
  EXPECT_EQ(table_->size(), 0u);

  FakePeer& own = context_.AddPeer(2);
  own.AsNode("1");
  barrier_->HandleRegister(own, RegisterBody("1"));
  EXPECT_FALSE(own.rejection.has_value());
  EXPECT_EQ(table_->size(), 1u);
}

TEST_F(BarrierTest, ARegistrationWithoutItsFieldsIsMalformed) {
  Start(2);
  FakePeer& peer = context_.AddPeer(1);
  wire::Register request = RegisterBody("0");
  request.mutable_node()->clear_ports();
  barrier_->HandleRegister(peer, request);
  ASSERT_TRUE(peer.rejection.has_value());
  EXPECT_EQ(peer.rejection->code, wire::MALFORMED);
  EXPECT_EQ(peer.rejection->message, "REGISTER needs at least one port (executor 0)");

  FakePeer& other = context_.AddPeer(2);
  barrier_->HandleRegister(other, wire::Register());
  ASSERT_TRUE(other.rejection.has_value());
  EXPECT_EQ(other.rejection->message, "REGISTER needs a node");
}

TEST_F(BarrierTest, AfterTheBarrierAMemberRejoinsAndOthersAreTooLate) {
  Start(2);
  FakePeer& first = Register(1, "0");
  Register(2, "1");
  ASSERT_EQ(table_->phase(), Phase::kFormed);

  // The agent of executor 0 reconnects: it takes over its slot.
  FakePeer& again = Register(3, "0");
  EXPECT_TRUE(first.closed);
  EXPECT_FALSE(again.rejection.has_value());
  EXPECT_EQ(table_->Find("0")->connection, 3u);
  EXPECT_EQ(again.Count(wire::REGISTERED), 1u);
  EXPECT_EQ(again.Last<wire::Cluster>(wire::CLUSTER)->position(), 0u);

  FakePeer& stranger = Register(4, "9");
  ASSERT_TRUE(stranger.rejection.has_value());
  EXPECT_EQ(stranger.rejection->code, wire::CLUSTER_FORMED);
  EXPECT_EQ(stranger.rejection->message,
            "cluster already formed with 2 nodes; executor 9 was not part of it");

  table_->Find("1")->alive = false;
  table_->Find("1")->error = "executor 1 (worker:1): connection closed";
  FakePeer& dead = Register(5, "1");
  ASSERT_TRUE(dead.rejection.has_value());
  EXPECT_EQ(dead.rejection->message,
            "cluster already formed with 2 nodes; executor 1 was declared dead: executor 1 "
            "(worker:1): connection closed");
}

// A large cluster goes out a batch per turn of the loop; a member that
// reconnects before its batch gets the cluster once, on its new connection.
TEST_F(BarrierTest, ALargeClusterGoesOutInBatchesEachNodeOnce) {
  constexpr int kNodes = 2'500;  // two full batches of 1,024 and part of a third
  Start(kNodes);
  std::vector<FakePeer*> peers;
  for (int i = 0; i < kNodes; ++i) peers.push_back(&Register(i + 1, std::to_string(i)));
  ASSERT_EQ(table_->phase(), Phase::kFormed);
  ASSERT_TRUE(context_.outcome().has_value());
  EXPECT_EQ(peers[1'023]->Count(wire::CLUSTER), 1u);
  EXPECT_EQ(peers[1'024]->Count(wire::CLUSTER), 0u);
  ASSERT_EQ(context_.posted.size(), 1u);

  FakePeer& again = Register(kNodes + 1, "2400");  // its batch is still to come
  EXPECT_TRUE(peers[2'400]->closed);
  EXPECT_EQ(again.Count(wire::CLUSTER), 0u);
  FakePeer& early = Register(kNodes + 2, "5");  // its batch went out
  EXPECT_EQ(early.Count(wire::CLUSTER), 1u);

  context_.RunPosted();
  for (int i = 0; i < kNodes; ++i) {
    if (i == 2'400 || i == 5) continue;
    ASSERT_EQ(peers[i]->Count(wire::CLUSTER), 1u) << "executor " << i;
    EXPECT_EQ(peers[i]->Last<wire::Cluster>(wire::CLUSTER)->position(), static_cast<uint32_t>(i));
  }
  EXPECT_EQ(peers[2'400]->Count(wire::CLUSTER), 0u);
  ASSERT_EQ(again.Count(wire::CLUSTER), 1u);
  EXPECT_EQ(again.Last<wire::Cluster>(wire::CLUSTER)->position(), 2'400u);
  EXPECT_EQ(early.Count(wire::CLUSTER), 1u);
}

TEST_F(BarrierTest, ANewRoundStopsTheLastRoundsBatches) {
  constexpr int kNodes = 1'100;
  Start(kNodes, /*elastic=*/true);
  std::vector<FakePeer*> peers;
  for (int i = 0; i < kNodes; ++i) peers.push_back(&Register(i + 1, std::to_string(i)));
  ASSERT_EQ(context_.posted.size(), 1u);
  ClusterTemplate next;
  next.num_nodes = 2;
  table_->Reset(next);
  barrier_->Reform("c1-1", 1, "a node left", {}, /*hold=*/false);
  context_.RunPosted();
  EXPECT_EQ(peers[1'050]->Count(wire::CLUSTER), 0u);
  EXPECT_EQ(table_->phase(), Phase::kReserving);
}

// Without the node list, a node's frame carries its own entry and
// placement, which the server keeps in its compact form; the driver's
// cluster is laid out again from the table, and is the same layout.
TEST_F(BarrierTest, ANodesOwnPlacementIsTheDriversLayoutOfIt) {
  Start(3, /*elastic=*/true);
  EXPECT_THAT(barrier_->Formed(),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("not formed")));
  std::vector<FakePeer*> peers;
  for (int i = 0; i < 3; ++i) {
    FakePeer& peer = context_.AddPeer(i + 1);
    wire::Register request = RegisterBody(std::to_string(i), 7000 + i);
    request.set_node_list(wire::NODE_LIST_NEVER);
    barrier_->HandleRegister(peer, request);
    peers.push_back(&peer);
  }
  ASSERT_EQ(table_->phase(), Phase::kFormed);
  ASSERT_OK_AND_ASSIGN(FormedCluster formed, barrier_->Formed());
  ASSERT_EQ(formed.placements.size(), 3u);
  for (uint32_t slot = 0; slot < 3; ++slot) {
    std::optional<wire::Cluster> cluster = peers[slot]->Last<wire::Cluster>(wire::CLUSTER);
    ASSERT_TRUE(cluster.has_value());
    EXPECT_EQ(cluster->position(), slot);
    EXPECT_EQ(cluster->node().executor_id(), formed.nodes[slot].executor_id);
    EXPECT_EQ(cluster->placement().SerializeAsString(),
              OwnPlacementToWire(OwnPlacementOf(formed.placements[slot])).SerializeAsString());
  }
  EXPECT_TRUE(formed.placements[0].chief);
  EXPECT_TRUE(formed.placements[2].rank.has_value());

  ClusterTemplate next;
  next.num_nodes = 2;
  table_->Reset(next);
  barrier_->Reform("c1-1", 1, "a node left", {}, /*hold=*/false);
  EXPECT_THAT(barrier_->Formed(),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("not formed")));
}

// The server lays out the nodes' frames in columns, from its table; the
// driver's layout (Formed) is a FormedCluster. Both encode the same bytes.
TEST_F(BarrierTest, TheFramesAreTheEncodingOfTheDriversLayout) {
  ClusterTemplate cluster;
  cluster.num_nodes = 6;
  cluster.num_ps = 1;
  cluster.master_node = "chief";
  Start(cluster);
  std::vector<FakePeer*> peers;
  for (int i = 0; i < 6; ++i) {
    FakePeer& peer = context_.AddPeer(i + 1);
    wire::Register request = RegisterBody(std::to_string(i), 7000 + i);
    request.mutable_node()->set_host(i % 2 == 0 ? "a" : "b");
    request.mutable_node()->add_ports(8000 + i);
    request.set_node_list(i < 3 ? wire::NODE_LIST_ALWAYS : wire::NODE_LIST_NEVER);
    barrier_->HandleRegister(peer, request);
    peers.push_back(&peer);
  }
  ASSERT_EQ(table_->phase(), Phase::kFormed);
  ASSERT_OK_AND_ASSIGN(FormedCluster formed, barrier_->Formed());
  EXPECT_EQ(formed.placements[1].Task(), "chief:0");
  EXPECT_EQ(formed.placements[2].rank->group_rank, 1);  // host a; the chief is on b
  EncodedCluster node_list, summary;
  ASSERT_EQ(EncodeCluster(SharedClusterToWire(formed), &node_list), Z_OK);
  ASSERT_EQ(EncodeCluster(ClusterSummaryToWire(formed), &summary), Z_OK);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(peers[i]->Count(wire::CLUSTER), 1u) << i;
    const EncodedCluster& expected = i < 3 ? node_list : summary;
    EXPECT_EQ(peers[i]->sent.back().shared->bytes, expected.body->bytes) << i;
  }
}

TEST_F(BarrierTest, TheReservationTimeoutNamesTheRegisteredAndTheMissing) {
  Start(3);
  FakePeer& one = Register(1, "1");
  FakePeer& zero = Register(2, "0");
  barrier_->OnReservationTimeout();

  const std::string message =
      "reservation timed out after 60 s: 2 of 3 nodes registered (executors 0, 1); missing 1 "
      "(worker:2)";
  for (FakePeer* peer : {&one, &zero}) {
    ASSERT_TRUE(peer->rejection.has_value());
    EXPECT_EQ(peer->rejection->code, wire::RESERVATION_TIMEOUT);
    EXPECT_EQ(peer->rejection->message, message);
  }
  ASSERT_TRUE(context_.outcome().has_value());
  EXPECT_THAT(*context_.outcome(), StatusIs(Status::Code::kDeadlineExceeded, HasSubstr(message)));
  EXPECT_EQ(table_->phase(), Phase::kStopped);
  EXPECT_TRUE(context_.Logged(message));

  FakePeer& late = Register(3, "2");
  ASSERT_TRUE(late.rejection.has_value());
  EXPECT_EQ(late.rejection->code, wire::STOPPED);
  EXPECT_EQ(late.rejection->message, "executor 2 cannot register: " + message);
}

TEST_F(BarrierTest, TheReservationTimeoutDoesNothingOnceFormed) {
  Start(1);
  FakePeer& peer = Register(1, "0");
  barrier_->OnReservationTimeout();
  EXPECT_FALSE(peer.rejection.has_value());
  EXPECT_EQ(table_->phase(), Phase::kFormed);
  EXPECT_EQ(context_.publications, 1);
}

TEST_F(BarrierTest, ANodeGoneBeforeTheBarrierDoesNotCount) {
  Start(3);
  Register(1, "0");
  barrier_->Disconnected(*table_->Find("0"), "192.0.2.9:1234");
  EXPECT_EQ(table_->size(), 0u);
  EXPECT_TRUE(context_.Logged(
      "executor 0 at 192.0.2.9:1234 disconnected before the cluster formed; its registration "
      "is dropped"));
}

// ---------------------------------------------------------------------------
// Host connections: one agent, several nodes

TEST_F(BarrierTest, AHostConnectionCarriesEachOfItsNodesAndGetsEachCluster) {
  Start(3);
  FakePeer& host = context_.AddPeer(1);
  RegisterOnHost(host, "0");
  RegisterOnHost(host, "1");
  EXPECT_FALSE(host.rejection.has_value());
  EXPECT_EQ(table_->size(), 2u);  // the second did not replace the first
  EXPECT_TRUE(host.host);
  EXPECT_EQ(host.executor_id, "");
  EXPECT_THAT(host.host_executors, ::testing::ElementsAre("0", "1"));
  Register(2, "2");
  ASSERT_EQ(table_->phase(), Phase::kFormed);

  EXPECT_EQ(host.Count(wire::REGISTERED), 2u);
  ASSERT_EQ(host.Count(wire::CLUSTER), 2u);
  std::vector<uint32_t> positions;
  for (const OutFrame& frame : host.sent) {
    if (TypeOf(frame) != wire::CLUSTER) continue;
    wire::Cluster cluster;
    ASSERT_TRUE(cluster.ParseFromString(BodyOf(frame)));
    positions.push_back(cluster.position());
  }
  EXPECT_THAT(positions, ::testing::ElementsAre(0u, 1u));
  EXPECT_EQ(table_->Find("0")->connection, 1u);
  EXPECT_EQ(table_->Find("1")->connection, 1u);
}

TEST_F(BarrierTest, AHostNeedsEachNodesCredentialAndEveryRegisterMarked) {
  Start(4);
  // A node credential's connection carries the nodes whose credentials it
  // holds: its own, and those a REGISTER proved (Handshake::CheckProof).
  FakePeer& node = context_.AddPeer(1);
  node.AsNode("0");
  RegisterOnHost(node, "0");
  node.proven_ids.push_back("2");
  RegisterOnHost(node, "2");
  EXPECT_FALSE(node.rejection.has_value());
  EXPECT_EQ(node.Executors(), (std::vector<std::string>{"0", "2"}));
  RegisterOnHost(node, "1");
  ASSERT_TRUE(node.rejection.has_value());
  EXPECT_EQ(node.rejection->code, wire::PERMISSION_DENIED);
  EXPECT_EQ(node.rejection->message,
            "the node credentials of executor 0 and 1 more may not register executor 1");

  const std::string mixed =
      "a connection carries one node, or a host's nodes (REGISTER with host set on each), not "
      "both";
  FakePeer& single_first = Register(2, "1");
  RegisterOnHost(single_first, "2");
  ASSERT_TRUE(single_first.rejection.has_value());
  EXPECT_EQ(single_first.rejection->code, wire::MALFORMED);
  EXPECT_EQ(single_first.rejection->message, mixed);

  FakePeer& host_first = context_.AddPeer(3);
  RegisterOnHost(host_first, "2");
  barrier_->HandleRegister(host_first, RegisterBody("0"));
  ASSERT_TRUE(host_first.rejection.has_value());
  EXPECT_EQ(host_first.rejection->message, mixed);
  EXPECT_EQ(table_->phase(), Phase::kReserving);
}

TEST_F(BarrierTest, AnElasticClusterTakesNoHost) {
  Start(2, /*elastic=*/true);
  FakePeer& host = context_.AddPeer(1);
  RegisterOnHost(host, "0");
  ASSERT_TRUE(host.rejection.has_value());
  EXPECT_EQ(host.rejection->code, wire::MALFORMED);
  EXPECT_EQ(host.rejection->message,
            "an elastic cluster takes one node per connection, not a host's nodes");
  EXPECT_EQ(table_->size(), 0u);
}

TEST_F(BarrierTest, ANodeTakenOverFromAHostLeavesItsOtherNodesThere) {
  Start(3);
  FakePeer& host = context_.AddPeer(1);
  RegisterOnHost(host, "0");
  RegisterOnHost(host, "1");
  // Executor 1's task, retried on a connection of its own.
  FakePeer& retried = Register(2, "1");
  EXPECT_FALSE(host.closed);
  EXPECT_THAT(host.host_executors, ::testing::ElementsAre("0"));
  EXPECT_EQ(table_->Find("1")->connection, retried.id());
  EXPECT_EQ(table_->Find("0")->connection, host.id());
  // Its last node gone, the host's connection closes.
  Register(3, "0");
  EXPECT_TRUE(host.closed);
  EXPECT_THAT(host.host_executors, ::testing::IsEmpty());
}

}  // namespace
}  // namespace drover::rendezvous_internal

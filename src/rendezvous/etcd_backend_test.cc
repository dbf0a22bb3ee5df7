// The etcd rendezvous backend (RendezvousClient with an etcd:// address)
// against a real etcd the suite starts. The end-to-end runs through etcd
// are tests/etcd; these pin orderings a run cannot force.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>

#include "drover/rendezvous.h"
#include "etcd/etcd_test_suite.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

Deadline Soon() {
  return Clock::now() + 20s;
}

class EtcdBackendTest : public etcd::EtcdTestSuite {
 protected:
  // A node of this test's run: a chief and a worker, both needed.
  std::unique_ptr<RendezvousClient> Node(const std::string& name) {
    std::string members;
    for (const std::string& endpoint : server_->endpoints()) {
      members += (members.empty() ? "" : ",") + endpoint;
    }
    RendezvousClientOptions options;
    options.address = "etcd://" + members + TestPrefix();
    options.name = name;
    options.etcd.cluster.num_nodes = 2;
    options.etcd.cluster.master_node = "chief";
    options.etcd.lease_ttl = 5s;
    Result<std::unique_ptr<RendezvousClient>> client =
        RendezvousClient::Connect(std::move(options), Soon());
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  static NodeInfo Info(const std::string& executor_id) {
    NodeInfo node;
    node.executor_id = executor_id;
    node.host = "127.0.0.1";
    node.ports = {1};
    return node;
  }

  static const NodeStatus* Find(const ClusterState& state, const std::string& executor_id) {
    auto it = std::find_if(state.nodes.begin(), state.nodes.end(), [&](const NodeStatus& node) {
      return node.node.executor_id == executor_id;
    });
    return it == state.nodes.end() ? nullptr : &*it;
  }
};

// A node whose round formed with it but which found the run over before it
// read the cluster (its peers ran to the end first) took no part: it says
// so apart from a run that ended without it, and leaves as stopped rather
// than as a node whose lease expired.
TEST_F(EtcdBackendTest, ARunThatEndedAfterFormingWithANodeCancelsItsRegistration) {
  auto late = Node("late");
  auto quick = Node("quick");
  ASSERT_TRUE(late && quick);
  // The late node's key goes into round 0; its wait runs out before a peer.
  EXPECT_THAT(late->Register(Info("1"), Clock::now() + 300ms),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("did not form in time")));
  ASSERT_OK_AND_ASSIGN(FormedCluster formed, quick->Register(Info("0"), Soon()));
  ASSERT_EQ(formed.nodes.size(), 2u);
  ASSERT_OK(quick->Leave());
  ASSERT_OK(quick->StopAll());

  EXPECT_THAT(late->Register(Info("1"), Soon()),
              StatusIs(Status::Code::kCancelled,
                       HasSubstr("after round 0 formed with executor 1, before it read")));
  ASSERT_OK_AND_ASSIGN(RendezvousClient::Instruction told, late->WaitForInstruction(Soon()));
  EXPECT_EQ(told.kind, RendezvousClient::Instruction::Kind::kStop);
  EXPECT_FALSE(told.failed);
  ASSERT_OK(late->Leave());

  ASSERT_OK_AND_ASSIGN(ClusterState state, quick->QueryState(Soon()));
  const NodeStatus* node = Find(state, "1");
  // Round 0 began before the late node's wait, which ran out first.
  ASSERT_TRUE(state.rendezvous_s.has_value());
  EXPECT_GE(*state.rendezvous_s, 0.3);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->left);
  EXPECT_TRUE(node->ended_before_start);
  EXPECT_TRUE(node->error.empty()) << node->error;
  EXPECT_FALSE(node->program_end.has_value());
  const NodeStatus* other = Find(state, "0");
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->ended_before_start);
}

// A node that never registered in the formed round learns only that the run
// has ended.
TEST_F(EtcdBackendTest, ARunThatEndedWithoutANodeIsUnavailableToIt) {
  auto first = Node("first");
  auto second = Node("second");
  ASSERT_TRUE(first && second);
  Status formed_first;
  std::thread waiting([&] { formed_first = first->Register(Info("0"), Soon()).status(); });
  Status formed_second = second->Register(Info("1"), Soon()).status();
  waiting.join();
  ASSERT_OK(formed_first);
  ASSERT_OK(formed_second);
  ASSERT_OK_AND_ASSIGN(ClusterState formed, first->QueryState(Soon()));
  EXPECT_EQ(formed.phase, "formed");
  EXPECT_TRUE(formed.rendezvous_s.has_value());
  ASSERT_OK(first->StopAll());

  auto stranger = Node("stranger");
  ASSERT_TRUE(stranger);
  EXPECT_THAT(stranger->Register(Info("2"), Soon()),
              StatusIs(Status::Code::kUnavailable, HasSubstr("has ended: stopped by request")));
}

}  // namespace
}  // namespace drover

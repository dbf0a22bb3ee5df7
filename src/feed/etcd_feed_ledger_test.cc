#include "feed/etcd_feed_ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "etcd/etcd_test_suite.h"
#include "testing/status_matchers.h"

namespace drover::feed {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

Deadline Soon() {
  return Clock::now() + 20s;
}

FeedPlan DynamicPlan(int partitions, int epochs) {
  FeedPlan plan;
  plan.read.format = RecordFormat::kCsv;
  plan.epochs = epochs;
  plan.balance = Balance::kDynamic;
  for (int p = 0; p < partitions; ++p) {
    Partition partition;
    partition.path = "/data/part-" + std::to_string(p) + ".csv";
    partition.begin = 0;
    partition.end = 1000;
    plan.partitions.push_back(partition);
  }
  return plan;
}

// One etcd member for the suite; each test has its own run prefix.
class EtcdFeedLedgerTest : public etcd::EtcdTestSuite {
 protected:
  // A ledger of this test's run, as one node sees it (each its own client).
  std::unique_ptr<EtcdFeedLedger> Node() {
    etcd::EtcdOptions options;
    options.endpoints = server_->endpoints();
    Result<std::unique_ptr<etcd::EtcdClient>> client = etcd::EtcdClient::Connect(options, Soon());
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (!client.ok()) return nullptr;
    return std::make_unique<EtcdFeedLedger>(std::move(client).value(), TestPrefix(), 5s);
  }
};

TEST_F(EtcdFeedLedgerTest, TheFirstPlanStaysAndAnotherIsRefused) {
  auto ledger = Node();
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> none, ledger->StoredPlan(Soon()));
  EXPECT_FALSE(none.has_value());
  EXPECT_THAT(ledger->PlanOfRound(0, Soon()), StatusIs(Status::Code::kNotFound, ::testing::_));

  const FeedPlan plan = DynamicPlan(3, 2);
  ASSERT_OK(ledger->Publish(plan, Soon()));
  ASSERT_OK(Node()->Publish(plan, Soon()));  // the same command again
  EXPECT_THAT(
      Node()->Publish(DynamicPlan(4, 2), Soon()),
      StatusIs(Status::Code::kInvalidArgument, HasSubstr("is fed another plan (3 partitions")));
  ASSERT_OK_AND_ASSIGN(std::optional<FeedPlan> stored, Node()->StoredPlan(Soon()));
  EXPECT_EQ(stored, plan);

  FeedPlan equal = plan;
  equal.balance = Balance::kEqual;
  EXPECT_THAT(ledger->Publish(equal, Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("--balance dynamic")));
}

TEST_F(EtcdFeedLedgerTest, ConcurrentClaimsTakeEveryEntryOnce) {
  auto publisher = Node();
  ASSERT_OK(publisher->Publish(DynamicPlan(10, 3), Soon()));
  ASSERT_OK_AND_ASSIGN(EtcdFeedLedger::RoundPlan round, publisher->PlanOfRound(0, Soon()));
  ASSERT_TRUE(round.plan.queue.has_value());
  const uint64_t size = round.plan.queue->size();
  EXPECT_EQ(size, 30u);
  EXPECT_EQ(round.resumed, "");

  std::mutex mu;
  std::multiset<uint64_t> taken;
  std::vector<std::thread> shares;
  for (int share = 0; share < 3; ++share) {
    shares.emplace_back([&, share] {
      auto ledger = Node();
      for (uint32_t seq = 0;; ++seq) {
        Result<std::optional<uint64_t>> claimed = ledger->Claim(0, share, seq, size, Soon());
        ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
        if (!claimed->has_value()) return;
        std::lock_guard<std::mutex> lock(mu);
        taken.insert(**claimed);
      }
    });
  }
  for (std::thread& thread : shares) thread.join();
  ASSERT_EQ(taken.size(), size);
  for (uint64_t entry = 0; entry < size; ++entry) EXPECT_EQ(taken.count(entry), 1u) << entry;
}

TEST_F(EtcdFeedLedgerTest, TheNextRoundResumesAfterTheCommitsAndSealsTheLast) {
  auto node = Node();
  ASSERT_OK(node->Publish(DynamicPlan(4, 1), Soon()));
  ASSERT_OK_AND_ASSIGN(EtcdFeedLedger::RoundPlan first, node->PlanOfRound(0, Soon()));
  // Share 0 takes entries 0 and 1, share 1 takes 2; share 0 commits in the
  // middle of its second feed (entry 1), share 1 never commits.
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> a, node->Claim(0, 0, 0, 4, Soon()));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> b, node->Claim(0, 0, 1, 4, Soon()));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> c, node->Claim(0, 1, 0, 4, Soon()));
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(c, 2u);
  ASSERT_OK(node->Commit(0, 0, FeedPosition{1, 40, false}, Soon()));

  // Round 1 skipped feeding (it never formed); round 2 resumes from round 0.
  ASSERT_OK_AND_ASSIGN(EtcdFeedLedger::RoundPlan next, Node()->PlanOfRound(2, Soon()));
  ASSERT_TRUE(next.plan.queue.has_value());
  EXPECT_THAT(*next.plan.queue,
              ElementsAre(FeedUnit{0, 1, 40}, FeedUnit{0, 2, 0}, FeedUnit{0, 3, 0}));
  EXPECT_EQ(next.resumed, "3 of 4 queued feeds left (1 from a record mid-partition)");
  // Every node of the round reads the same answer.
  ASSERT_OK_AND_ASSIGN(EtcdFeedLedger::RoundPlan again, Node()->PlanOfRound(2, Soon()));
  EXPECT_EQ(again.plan, next.plan);
  EXPECT_EQ(again.resumed, "");

  // Round 0's stragglers count for nothing now.
  EXPECT_THAT(node->Commit(0, 1, FeedPosition{0, 999, true}, Soon()),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("round 0's feed is closed")));
  EXPECT_THAT(node->Claim(0, 1, 1, 4, Soon()),
              StatusIs(Status::Code::kFailedPrecondition, ::testing::_));
  EXPECT_THAT(node->PlanOfRound(0, Soon()),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("round 2 feeds now")));

  // Round 2's claims hand out its own queue's entries.
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> first_of_two, node->Claim(2, 0, 0, 3, Soon()));
  EXPECT_EQ(first_of_two, 0u);
}

TEST_F(EtcdFeedLedgerTest, WithoutACommitTheSameQueueAgain) {
  auto node = Node();
  ASSERT_OK(node->Publish(DynamicPlan(2, 2), Soon()));
  ASSERT_OK_AND_ASSIGN(EtcdFeedLedger::RoundPlan first, node->PlanOfRound(0, Soon()));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> claimed, node->Claim(0, 0, 0, 4, Soon()));
  EXPECT_EQ(claimed, 0u);
  ASSERT_OK_AND_ASSIGN(EtcdFeedLedger::RoundPlan next, node->PlanOfRound(1, Soon()));
  EXPECT_EQ(next.plan.queue, first.plan.queue);
  EXPECT_EQ(next.resumed, "");
}

TEST_F(EtcdFeedLedgerTest, AClaimPastTheQueueIsTheEnd) {
  auto node = Node();
  ASSERT_OK(node->Publish(DynamicPlan(1, 1), Soon()));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> only, node->Claim(0, 0, 0, 1, Soon()));
  EXPECT_EQ(only, 0u);
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> none, node->Claim(0, 1, 0, 1, Soon()));
  EXPECT_FALSE(none.has_value());
  // The same claim asked again (a retried request) gets the same entry.
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> again, node->Claim(0, 0, 0, 1, Soon()));
  EXPECT_EQ(again, 0u);
}

}  // namespace
}  // namespace drover::feed

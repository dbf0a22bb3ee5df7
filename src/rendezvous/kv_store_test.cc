// KvStore: each operation, WAITs parked, woken, timed out and forgotten, the
// bounds, and a reply that closes its connection. Connections are ids and
// replies are recorded; WAIT deadlines run on an io_context in this thread.

#include "rendezvous/kv_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

namespace drover::rendezvous_internal {
namespace {

using ::testing::IsEmpty;

class KvStoreTest : public ::testing::Test {
 protected:
  KvStoreTest() { Open(KvLimits{}); }

  void Open(KvLimits limits) {
    store_ = std::make_unique<KvStore>(limits, io_,
                                       [this](uint64_t connection, const wire::KvReply& reply) {
                                         replies_.emplace_back(connection, reply);
                                         if (on_reply_) on_reply_(connection);
                                       });
  }

  wire::KvRequest Request(wire::KvRequest::Op op, const std::string& key) {
    wire::KvRequest request;
    request.set_op(op);
    request.set_key(key);
    request.set_request_id(next_request_id_++);
    return request;
  }
  // Runs `request` from `connection`; returns the reply it must get now.
  wire::KvReply Run(uint64_t connection, const wire::KvRequest& request) {
    size_t before = replies_.size();
    store_->Handle(connection, request);
    // Its own reply comes first; WAITs it completes may follow.
    EXPECT_GT(replies_.size(), before) << request.ShortDebugString();
    if (replies_.size() <= before) return wire::KvReply();
    EXPECT_EQ(replies_[before].first, connection);
    EXPECT_EQ(replies_[before].second.request_id(), request.request_id());
    return replies_[before].second;
  }
  wire::KvReply Set(const std::string& key, const std::string& value, uint64_t connection = 1) {
    wire::KvRequest request = Request(wire::KvRequest::SET, key);
    request.set_value(value);
    return Run(connection, request);
  }
  wire::KvReply Get(const std::string& key) { return Run(1, Request(wire::KvRequest::GET, key)); }
  wire::KvReply Add(const std::string& key, int64_t delta) {
    wire::KvRequest request = Request(wire::KvRequest::ADD, key);
    request.set_delta(delta);
    return Run(1, request);
  }
  wire::KvRequest Wait(const std::vector<std::string>& keys, uint64_t deadline_ms = 60'000) {
    wire::KvRequest request = Request(wire::KvRequest::WAIT, "");
    for (const std::string& key : keys) request.add_keys(key);
    request.set_deadline_ms(deadline_ms);
    return request;
  }
  // Runs the loop until `count` replies came in all, or 20 s passed.
  void RunUntilReplies(size_t count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (replies_.size() < count && std::chrono::steady_clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(100));
    }
  }

  asio::io_context io_;
  std::vector<std::pair<uint64_t, wire::KvReply>> replies_;
  std::function<void(uint64_t)> on_reply_;
  uint64_t next_request_id_ = 1;
  std::unique_ptr<KvStore> store_;
};

TEST_F(KvStoreTest, SetGetDelete) {
  EXPECT_EQ(Set("k", "v").code(), wire::ERROR_CODE_UNSPECIFIED);
  wire::KvReply got = Get("k");
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.value(), "v");
  EXPECT_EQ(store_->bytes(), 1 + 1 + KvStore::kEntryOverhead);

  EXPECT_TRUE(Run(1, Request(wire::KvRequest::DELETE, "k")).found());
  wire::KvReply missing = Get("k");
  EXPECT_EQ(missing.code(), wire::NOT_FOUND);
  EXPECT_EQ(missing.message(), "no key 'k'");
  EXPECT_EQ(Run(1, Request(wire::KvRequest::DELETE, "k")).code(), wire::NOT_FOUND);
  EXPECT_EQ(store_->keys(), 0u);
  EXPECT_EQ(store_->bytes(), 0u);
}

TEST_F(KvStoreTest, AddCountsAndRefusesWhatIsNotANumber) {
  wire::KvReply first = Add("n", 5);
  EXPECT_EQ(first.number(), 5);
  EXPECT_EQ(first.value(), "5");
  EXPECT_EQ(Add("n", -7).number(), -2);

  Set("x", "abc");
  wire::KvReply text = Add("x", 1);
  EXPECT_EQ(text.code(), wire::MALFORMED);
  EXPECT_EQ(text.message(), "ADD to key 'x': its value 'abc' is not a decimal integer");

  Set("big", std::to_string(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(Add("big", 1).message(), "ADD to key 'big' overflows int64");
}

TEST_F(KvStoreTest, CompareSetStoresOnlyOnAMatch) {
  wire::KvRequest create = Request(wire::KvRequest::COMPARE_SET, "k");
  create.set_value("one");  // "" matches an absent key
  wire::KvReply created = Run(1, create);
  EXPECT_TRUE(created.found());
  EXPECT_EQ(created.value(), "one");

  wire::KvRequest mismatch = Request(wire::KvRequest::COMPARE_SET, "k");
  mismatch.set_expected("zero");
  mismatch.set_value("two");
  EXPECT_EQ(Run(1, mismatch).value(), "one");
  EXPECT_EQ(Get("k").value(), "one");

  wire::KvRequest absent = Request(wire::KvRequest::COMPARE_SET, "other");
  absent.set_expected("x");
  absent.set_value("y");
  EXPECT_FALSE(Run(1, absent).found());
  EXPECT_EQ(store_->keys(), 1u);
}

TEST_F(KvStoreTest, AWaitParksUntilEveryKeyExistsAndTheSetterHearsFirst) {
  wire::KvRequest wait = Wait({"a", "b"});
  store_->Handle(1, wait);
  EXPECT_THAT(replies_, IsEmpty());
  EXPECT_EQ(store_->parked_waits(), 1u);

  Set("a", "1", /*connection=*/2);
  ASSERT_EQ(replies_.size(), 1u);
  Set("b", "2", /*connection=*/2);
  ASSERT_EQ(replies_.size(), 3u);
  EXPECT_EQ(replies_[1].first, 2u);
  EXPECT_EQ(replies_[2].first, 1u);
  EXPECT_EQ(replies_[2].second.request_id(), wait.request_id());
  EXPECT_EQ(replies_[2].second.code(), wire::ERROR_CODE_UNSPECIFIED);
  EXPECT_EQ(store_->parked_waits(), 0u);
  EXPECT_EQ(store_->bytes(), 2 * (1 + 1 + KvStore::kEntryOverhead));
}

TEST_F(KvStoreTest, AWaitForKeysAlreadyThereIsAnsweredAtOnce) {
  Set("a", "1");
  EXPECT_EQ(Run(1, Wait({"a"})).code(), wire::ERROR_CODE_UNSPECIFIED);
  EXPECT_EQ(store_->parked_waits(), 0u);
}

TEST_F(KvStoreTest, AWaitTimesOutNamingTheKeysStillMissing) {
  Set("a", "1");
  wire::KvRequest wait = Wait({"a", "b"}, /*deadline_ms=*/1);
  store_->Handle(3, wait);
  RunUntilReplies(2);
  ASSERT_EQ(replies_.size(), 2u);
  EXPECT_EQ(replies_[1].first, 3u);
  EXPECT_EQ(replies_[1].second.request_id(), wait.request_id());
  EXPECT_EQ(replies_[1].second.code(), wire::TIMEOUT);
  EXPECT_EQ(replies_[1].second.message(), "WAIT timed out after 1 ms; keys still missing: 'b'");
  EXPECT_EQ(store_->parked_waits(), 0u);
  EXPECT_EQ(store_->bytes(), 1 + 1 + KvStore::kEntryOverhead);
}

TEST_F(KvStoreTest, AClosedConnectionsWaitsEndWithoutAReply) {
  store_->Handle(1, Wait({"a"}));
  store_->Handle(1, Wait({"b"}));
  store_->Handle(2, Wait({"a"}));
  store_->Forget(1);
  EXPECT_EQ(store_->parked_waits(), 1u);
  Set("a", "1", /*connection=*/3);
  ASSERT_EQ(replies_.size(), 2u);
  EXPECT_EQ(replies_[1].first, 2u);
  EXPECT_EQ(store_->bytes(), 1 + 1 + KvStore::kEntryOverhead);
}

TEST_F(KvStoreTest, AReplyThatClosesItsConnectionForgetsItsOtherWaits) {
  store_->Handle(1, Wait({"a"}));
  store_->Handle(1, Wait({"a"}));
  // The first wake-up's reply closes connection 1 (over its queue limit).
  on_reply_ = [this](uint64_t connection) {
    if (connection == 1) store_->Forget(1);
  };
  Set("a", "1", /*connection=*/2);
  ASSERT_EQ(replies_.size(), 2u);  // the setter's, then one waiter's
  EXPECT_EQ(replies_[1].first, 1u);
  EXPECT_EQ(store_->parked_waits(), 0u);
}

TEST_F(KvStoreTest, ShutdownEndsEveryWaitWithoutAReply) {
  store_->Handle(1, Wait({"a"}));
  store_->Handle(2, Wait({"b"}));
  store_->Clear();
  EXPECT_EQ(store_->parked_waits(), 0u);
  EXPECT_EQ(store_->bytes(), 0u);
  io_.poll();  // the cancelled timers say nothing
  EXPECT_THAT(replies_, IsEmpty());
}

TEST_F(KvStoreTest, KeysAndBytesAreBounded) {
  KvLimits limits;
  limits.max_keys = 2;
  limits.max_bytes = 200;
  Open(limits);
  Set("a", "1");
  Set("b", "2");
  wire::KvReply third = Set("c", "3");
  EXPECT_EQ(third.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(third.message(),
            "the key-value store holds 2 keys, its limit; SET of new key 'c' refused");
  EXPECT_EQ(Set("a", "11").code(), wire::ERROR_CODE_UNSPECIFIED);  // not a new key

  wire::KvReply big = Set("b", std::string(100, 'x'));
  EXPECT_EQ(big.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(big.message(),
            "the key-value store is full: 133 of 200 bytes used; SET of 'b' "
            "(165 bytes) refused");
  EXPECT_EQ(Get("b").value(), "2");  // unchanged
}

TEST_F(KvStoreTest, ParkedWaitsAreBoundedPerConnectionAndInAll) {
  KvLimits limits;
  limits.max_waits = 2;
  limits.max_waits_per_connection = 1;
  Open(limits);
  store_->Handle(1, Wait({"a"}));
  wire::KvReply second = Run(1, Wait({"b"}));
  EXPECT_EQ(second.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(second.message(), "this connection has 1 WAITs parked, its limit; WAIT refused");
  store_->Handle(2, Wait({"a"}));
  wire::KvReply third = Run(3, Wait({"a"}));
  EXPECT_EQ(third.message(), "2 WAITs are parked, the server's limit; WAIT refused");

  KvLimits small;
  small.max_bytes = 100;
  Open(small);
  wire::KvReply full = Run(1, Wait({"abc", "def"}));
  EXPECT_EQ(full.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(full.message(),
            "the key-value store is full: 0 of 100 bytes used; WAIT for 2 keys "
            "(134 bytes) refused");
}

TEST_F(KvStoreTest, BadRequestsGetAnErrorReply) {
  EXPECT_EQ(Set("", "v").message(), "SET needs a key");
  EXPECT_EQ(Set(std::string(4097, 'k'), "v").message(),
            "key of 4097 bytes is over the limit of 4096");
  wire::KvReply value = Set("k", std::string((1u << 20) + 1, 'v'));
  EXPECT_EQ(value.code(), wire::MALFORMED);
  EXPECT_EQ(value.message(), "value of 1048577 bytes for key 'k' is over the limit of 1048576");
  EXPECT_EQ(Run(1, Wait({})).message(), "WAIT needs at least one key");
  EXPECT_EQ(Run(1, Wait({""})).message(), "WAIT key of 0 bytes: keys must be 1 to 4096 bytes");
  EXPECT_EQ(Run(1, Request(static_cast<wire::KvRequest::Op>(99), "k")).message(),
            "KV_REQUEST with unknown op 99");
  EXPECT_EQ(store_->keys(), 0u);
}

}  // namespace
}  // namespace drover::rendezvous_internal

#include "etcd/etcd_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "etcd/etcd_test_server.h"
#include "etcd/etcd_test_suite.h"
#include "testing/status_matchers.h"

namespace drover::etcd {
namespace {

using ::drover::testing::StatusIs;
using ::testing::_;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using namespace std::chrono_literals;

Deadline In(Clock::duration d) {
  return Clock::now() + d;
}

std::vector<std::string> Keys(const RangeResult& range) {
  std::vector<std::string> keys;
  for (const KeyValue& kv : range.kvs) keys.push_back(kv.key);
  return keys;
}

// One etcd member shared by the tests of this suite; each test works under
// its own prefix.
class EtcdClientTest : public EtcdTestSuite {
 protected:
  void SetUp() override {
    EtcdTestSuite::SetUp();
    if (HasFatalFailure()) return;
    EtcdOptions options;
    options.endpoints = server_->endpoints();
    options.request_timeout = 5s;
    ASSERT_OK_AND_ASSIGN(client_, EtcdClient::Connect(options, In(10s)));
    prefix_ = TestPrefix();
  }

  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

TEST_F(EtcdClientTest, PutGetPrefixDelete) {
  ASSERT_OK_AND_ASSIGN(int64_t first, client_->Put(prefix_ + "/a", "1"));
  ASSERT_OK_AND_ASSIGN(int64_t second, client_->Put(prefix_ + "/b", "2"));
  EXPECT_GT(second, first);
  // A sibling whose name starts with the prefix's text is not under it.
  ASSERT_OK(client_->Put(prefix_ + "x", "outside"));

  ASSERT_OK_AND_ASSIGN(RangeResult one, client_->Get(prefix_ + "/a"));
  ASSERT_EQ(one.kvs.size(), 1u);
  EXPECT_EQ(one.kvs[0].value, "1");
  EXPECT_EQ(one.kvs[0].create_revision, first);
  EXPECT_EQ(one.kvs[0].mod_revision, first);
  EXPECT_EQ(one.kvs[0].version, 1);
  EXPECT_EQ(one.kvs[0].lease, 0);
  EXPECT_GE(one.revision, second);

  ASSERT_OK_AND_ASSIGN(RangeResult all, client_->GetPrefix(prefix_ + "/"));
  EXPECT_THAT(Keys(all), ElementsAre(prefix_ + "/a", prefix_ + "/b"));

  ASSERT_OK_AND_ASSIGN(RangeResult missing, client_->Get(prefix_ + "/none"));
  EXPECT_THAT(missing.kvs, IsEmpty());
  EXPECT_GE(missing.revision, second);

  ASSERT_OK_AND_ASSIGN(int64_t deleted_one, client_->DeleteKey(prefix_ + "/a"));
  EXPECT_EQ(deleted_one, 1);
  ASSERT_OK_AND_ASSIGN(int64_t deleted_none, client_->DeleteKey(prefix_ + "/a"));
  EXPECT_EQ(deleted_none, 0);
  ASSERT_OK(client_->Put(prefix_ + "/c", "3"));
  ASSERT_OK_AND_ASSIGN(int64_t deleted_prefix, client_->DeletePrefix(prefix_ + "/"));
  EXPECT_EQ(deleted_prefix, 2);
  ASSERT_OK_AND_ASSIGN(RangeResult after, client_->GetPrefix(prefix_));
  EXPECT_THAT(Keys(after), ElementsAre(prefix_ + "x"));
}

TEST_F(EtcdClientTest, ValuesKeepEveryByte) {
  // Every padding length of base64, and bytes JSON strings cannot hold raw.
  for (std::string value : {std::string(""), std::string("a"), std::string("ab"),
                            std::string("abc"), std::string("\0\xff\n\"\\", 5)}) {
    ASSERT_OK(client_->Put(prefix_ + "/k", value));
    ASSERT_OK_AND_ASSIGN(RangeResult got, client_->Get(prefix_ + "/k"));
    ASSERT_EQ(got.kvs.size(), 1u);
    EXPECT_EQ(got.kvs[0].value, value);
  }
  std::string binary_key = prefix_ + std::string("/\xff\x01", 3);
  ASSERT_OK(client_->Put(binary_key, "v"));
  ASSERT_OK_AND_ASSIGN(RangeResult got, client_->GetPrefix(prefix_ + "/"));
  EXPECT_THAT(Keys(got), ElementsAre(prefix_ + "/k", binary_key));
}

TEST_F(EtcdClientTest, TxnCreatesOnceAndReturnsTheRangeOnFailure) {
  std::string key = prefix_ + "/leader";
  std::vector<Compare> absent = {Compare::Absent(key)};
  ASSERT_OK_AND_ASSIGN(TxnResult won, client_->Txn(absent, {TxnOp::Put(key, "me"), TxnOp::Get(key)},
                                                   {TxnOp::Get(key)}));
  EXPECT_TRUE(won.succeeded);
  ASSERT_EQ(won.ranges.size(), 1u);
  ASSERT_EQ(won.ranges[0].kvs.size(), 1u);
  EXPECT_EQ(won.ranges[0].kvs[0].value, "me");

  ASSERT_OK_AND_ASSIGN(TxnResult lost, client_->Txn(absent, {TxnOp::Put(key, "other")},
                                                    {TxnOp::Get(key), TxnOp::GetPrefix(prefix_)}));
  EXPECT_FALSE(lost.succeeded);
  EXPECT_EQ(lost.revision, won.revision);
  ASSERT_EQ(lost.ranges.size(), 2u);
  ASSERT_EQ(lost.ranges[0].kvs.size(), 1u);
  EXPECT_EQ(lost.ranges[0].kvs[0].value, "me");
  EXPECT_EQ(lost.ranges[0].kvs[0].create_revision, won.revision);
  EXPECT_THAT(Keys(lost.ranges[1]), ElementsAre(key));

  // Value and mod-revision compares, and deletes inside a transaction.
  ASSERT_OK_AND_ASSIGN(TxnResult by_value,
                       client_->Txn({Compare::ValueIs(key, "me")}, {TxnOp::DeleteKey(key)}));
  EXPECT_TRUE(by_value.succeeded);
  EXPECT_THAT(by_value.ranges, IsEmpty());
  ASSERT_OK_AND_ASSIGN(TxnResult stale,
                       client_->Txn({Compare::ModRevisionIs(key, won.revision)},
                                    {TxnOp::Put(key, "x")}, {TxnOp::GetPrefix(prefix_)}));
  EXPECT_FALSE(stale.succeeded);
  ASSERT_EQ(stale.ranges.size(), 1u);
  EXPECT_THAT(stale.ranges[0].kvs, IsEmpty());
}

TEST_F(EtcdClientTest, LeaseKeepsKeysUntilRevoked) {
  ASSERT_OK_AND_ASSIGN(int64_t lease, client_->GrantLease(30s));
  EXPECT_NE(lease, 0);
  ASSERT_OK(client_->Put(prefix_ + "/alive", "1", lease));
  ASSERT_OK_AND_ASSIGN(RangeResult got, client_->Get(prefix_ + "/alive"));
  ASSERT_EQ(got.kvs.size(), 1u);
  EXPECT_EQ(got.kvs[0].lease, lease);

  ASSERT_OK_AND_ASSIGN(int64_t ttl, client_->KeepAlive(lease));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 30);

  ASSERT_OK(client_->RevokeLease(lease));
  ASSERT_OK_AND_ASSIGN(RangeResult gone, client_->Get(prefix_ + "/alive"));
  EXPECT_THAT(gone.kvs, IsEmpty());
  ASSERT_OK_AND_ASSIGN(int64_t after, client_->KeepAlive(lease));
  EXPECT_EQ(after, 0);

  EXPECT_THAT(client_->RevokeLease(lease),
              StatusIs(Status::Code::kNotFound, HasSubstr("lease not found")));
  EXPECT_THAT(client_->Put(prefix_ + "/orphan", "1", lease),
              StatusIs(Status::Code::kNotFound, HasSubstr("lease not found")));
  EXPECT_THAT(client_->GrantLease(0s), StatusIs(Status::Code::kInvalidArgument, HasSubstr("TTL")));
}

TEST_F(EtcdClientTest, LeaseExpires) {
  ASSERT_OK_AND_ASSIGN(int64_t lease, client_->GrantLease(1s));
  ASSERT_OK(client_->Put(prefix_ + "/short", "1", lease));
  // etcd's minimum TTL is above 1 s (it grants more); wait for the end.
  Deadline deadline = In(20s);
  int64_t ttl = 1;
  while (Clock::now() < deadline) {
    ASSERT_OK_AND_ASSIGN(RangeResult got, client_->Get(prefix_ + "/short"));
    if (got.kvs.empty()) break;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_OK_AND_ASSIGN(ttl, client_->KeepAlive(lease));
  EXPECT_EQ(ttl, 0);
}

TEST_F(EtcdClientTest, WatchSeesAPutMadeAfterItStarted) {
  ASSERT_OK_AND_ASSIGN(RangeResult now, client_->GetPrefix(prefix_));
  std::thread writer([&] {
    std::this_thread::sleep_for(500ms);
    EXPECT_OK(client_->Put(prefix_ + "/late", "news"));
  });
  Result<WatchResult> watched = client_->WatchPrefix(prefix_ + "/", now.revision + 1, In(30s));
  writer.join();
  ASSERT_OK(watched);
  ASSERT_EQ(watched->events.size(), 1u);
  const WatchEvent& event = watched->events[0];
  EXPECT_EQ(event.type, WatchEvent::Type::kPut);
  EXPECT_EQ(event.kv.key, prefix_ + "/late");
  EXPECT_EQ(event.kv.value, "news");
  EXPECT_GT(event.kv.mod_revision, now.revision);
  EXPECT_EQ(watched->revision, event.kv.mod_revision);
}

TEST_F(EtcdClientTest, WatchFromAnOldRevisionReplays) {
  ASSERT_OK_AND_ASSIGN(int64_t first, client_->Put(prefix_ + "/a", "1"));
  ASSERT_OK(client_->Put(prefix_ + "/b", "2"));
  ASSERT_OK(client_->Put(prefix_ + "x", "not under the prefix"));
  ASSERT_OK_AND_ASSIGN(int64_t deleted, client_->DeleteKey(prefix_ + "/a"));
  ASSERT_EQ(deleted, 1);

  std::vector<WatchEvent> events;
  int64_t from = first;
  while (events.size() < 3) {
    ASSERT_OK_AND_ASSIGN(WatchResult watched, client_->WatchPrefix(prefix_ + "/", from, In(10s)));
    ASSERT_FALSE(watched.events.empty());
    events.insert(events.end(), watched.events.begin(), watched.events.end());
    from = watched.revision + 1;
  }
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.key, prefix_ + "/a");
  EXPECT_EQ(events[0].kv.mod_revision, first);
  EXPECT_EQ(events[1].kv.key, prefix_ + "/b");
  EXPECT_EQ(events[1].kv.value, "2");
  EXPECT_EQ(events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[2].kv.key, prefix_ + "/a");

  // Nothing more: an empty answer at the deadline, the revision unchanged.
  ASSERT_OK_AND_ASSIGN(WatchResult idle, client_->WatchPrefix(prefix_ + "/", from, In(1500ms)));
  EXPECT_THAT(idle.events, IsEmpty());
  EXPECT_EQ(idle.revision, from - 1);
}

TEST_F(EtcdClientTest, WatchFromNowReportsTheCurrentRevision) {
  ASSERT_OK_AND_ASSIGN(int64_t revision, client_->Put(prefix_ + "/a", "1"));
  ASSERT_OK_AND_ASSIGN(WatchResult idle, client_->WatchPrefix(prefix_ + "/", 0, In(1200ms)));
  EXPECT_THAT(idle.events, IsEmpty());
  EXPECT_GE(idle.revision, revision);
}

TEST_F(EtcdClientTest, WatchReturnsEmptyWhenWoken) {
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(wake, 0);
  std::thread waker([&] {
    std::this_thread::sleep_for(300ms);
    uint64_t one = 1;
    EXPECT_EQ(::write(wake, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  });
  Clock::time_point start = Clock::now();
  Result<WatchResult> watched = client_->WatchPrefix(prefix_ + "/", 1'000'000, In(60s), wake);
  Clock::duration took = Clock::now() - start;
  waker.join();
  ASSERT_OK(watched);
  EXPECT_THAT(watched->events, IsEmpty());
  EXPECT_EQ(watched->revision, 1'000'000 - 1);
  // Well before the deadline; the watch looks at the fd once a second.
  EXPECT_LT(took, 30s);
  // Polled, never read.
  uint64_t count = 0;
  EXPECT_EQ(::read(wake, &count, sizeof(count)), static_cast<ssize_t>(sizeof(count)));
  EXPECT_EQ(count, 1u);
  ::close(wake);
}

TEST_F(EtcdClientTest, WatchOfACompactedRevisionFails) {
  ASSERT_OK_AND_ASSIGN(int64_t first, client_->Put(prefix_ + "/a", "1"));
  ASSERT_OK_AND_ASSIGN(int64_t second, client_->Put(prefix_ + "/a", "2"));
  ASSERT_OK(server_->Etcdctl({"compact", std::to_string(second)}));
  EXPECT_THAT(client_->WatchPrefix(prefix_ + "/", first, In(10s)),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("compacted")));
}

TEST_F(EtcdClientTest, DescribeNamesTheMembers) {
  EXPECT_EQ(client_->Describe(), "etcd at " + server_->endpoints()[0]);
}

TEST(EtcdConnectTest, NoMemberAnswers) {
  // A port nobody listens on: bound, never listened to.
  EtcdOptions options;
  options.endpoints = {"127.0.0.1:1", "127.0.0.1:2"};
  options.request_timeout = 500ms;
  EXPECT_THAT(EtcdClient::Connect(options, In(1s)),
              StatusIs(Status::Code::kUnavailable,
                       AllOf(HasSubstr("cannot reach any member of 127.0.0.1:1,127.0.0.1:2"),
                             HasSubstr("127.0.0.1:2"))));
  options.endpoints = {"nohostport"};
  EXPECT_THAT(EtcdClient::Connect(options, In(1s)), StatusIs(Status::Code::kInvalidArgument, _));
  options.endpoints = {};
  EXPECT_THAT(EtcdClient::Connect(options, In(1s)), StatusIs(Status::Code::kInvalidArgument, _));
}

TEST(EtcdAddressTest, ParsesMembersAndPrefix) {
  EXPECT_TRUE(IsEtcdAddress("etcd://h:1/p"));
  EXPECT_FALSE(IsEtcdAddress("h:1"));
  EXPECT_FALSE(IsEtcdAddress("http://h:1/p"));

  ASSERT_OK_AND_ASSIGN(EtcdAddress one, ParseEtcdAddress("etcd://10.0.0.1:2379/run1"));
  EXPECT_THAT(one.endpoints, ElementsAre("10.0.0.1:2379"));
  EXPECT_EQ(one.prefix, "/run1");

  ASSERT_OK_AND_ASSIGN(EtcdAddress many,
                       ParseEtcdAddress("etcd://a:1,b.example:2,[fe80::1]:3/jobs/run-7/"));
  EXPECT_THAT(many.endpoints, ElementsAre("a:1", "b.example:2", "[fe80::1]:3"));
  EXPECT_EQ(many.prefix, "/jobs/run-7");
}

TEST(EtcdAddressTest, RejectsBadAddresses) {
  for (const char* bad : {"h:1/p", "etcd://", "etcd:///p", "etcd://h:1", "etcd://h:1/",
                          "etcd://h:1//", "etcd://h/p", "etcd://h:0/p", "etcd://h:1,/p",
                          "etcd://,h:1/p", "etcd://h:1/a b", "etcd://:1/p", "etcd://h:99999/p"}) {
    EXPECT_THAT(ParseEtcdAddress(bad), StatusIs(Status::Code::kInvalidArgument, HasSubstr(bad)))
        << bad;
  }
}

// Three members: the client fails over while two are left, and says "no
// quorum" (or that it cannot reach them) when one is.
TEST(EtcdClusterTest, FailsOverAndReportsLostQuorum) {
  EtcdTestServerOptions server_options;
  server_options.members = 3;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdTestServer> server,
                       EtcdTestServer::Start(server_options));
  EtcdOptions options;
  options.endpoints = server->endpoints();
  // A write caught by the leader's death waits at the member it went to
  // until etcd's own timeout (7 s); after 5 s the next member has a new
  // leader for certain.
  options.request_timeout = 5s;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> client, EtcdClient::Connect(options, In(10s)));
  ASSERT_OK(client->Put("/cluster/a", "1"));

  // The member the client starts with goes.
  ASSERT_OK(server->Kill(0));
  ASSERT_OK(client->Put("/cluster/b", "2")) << server->Logs();
  ASSERT_OK_AND_ASSIGN(RangeResult both, client->GetPrefix("/cluster/"));
  EXPECT_THAT(Keys(both), ElementsAre("/cluster/a", "/cluster/b"));
  // A new client whose first member is dead connects through another.
  options.request_timeout = 2s;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> late, EtcdClient::Connect(options, In(10s)));
  ASSERT_OK(late->Put("/cluster/c", "3"));

  // One of three left: no write can commit. The member left still answers
  // (a watch, its status) but holds every write and linearizable read.
  ASSERT_OK(server->Kill(1));
  Result<int64_t> put = late->Put("/cluster/d", "4");
  EXPECT_THAT(put, StatusIs(Status::Code::kUnavailable,
                            AnyOf(HasSubstr("no quorum"), HasSubstr("cannot reach"))));
  EXPECT_THAT(put.status().message(), HasSubstr(server->endpoints()[2]));
  EXPECT_THAT(late->Get("/cluster/a"), StatusIs(Status::Code::kUnavailable, _));
  ASSERT_OK_AND_ASSIGN(WatchResult watched, late->WatchPrefix("/cluster/", 1, In(10s)));
  EXPECT_FALSE(watched.events.empty());
}

// etcd's own users: root and bob (read-write under "/"), auth enabled, and
// tokens that expire after 1 s unused.
TEST(EtcdAuthTest, LogsInAndRefusesBadPasswords) {
  EtcdTestServerOptions server_options;
  server_options.extra_args = {"--auth-token-ttl=1"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdTestServer> server,
                       EtcdTestServer::Start(server_options));
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"role", "add", "root"},
           {"user", "add", "root", "--new-user-password=rootpw", "--interactive=false"},
           {"user", "grant-role", "root", "root"},
           {"role", "add", "rw"},
           {"role", "grant-permission", "rw", "readwrite", "--prefix=true", "/"},
           {"user", "add", "bob", "--new-user-password=pw2", "--interactive=false"},
           {"user", "grant-role", "bob", "rw"},
           {"auth", "enable"}}) {
    ASSERT_OK(server->Etcdctl(args));
  }

  EtcdOptions options;
  options.endpoints = server->endpoints();
  options.user = "bob";
  options.password = "pw2";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> bob, EtcdClient::Connect(options, In(10s)));
  ASSERT_OK_AND_ASSIGN(int64_t revision, bob->Put("/run/a", "1"));
  ASSERT_OK_AND_ASSIGN(RangeResult got, bob->Get("/run/a"));
  ASSERT_EQ(got.kvs.size(), 1u);
  ASSERT_OK_AND_ASSIGN(WatchResult watched, bob->WatchPrefix("/run/", revision, In(10s)));
  EXPECT_EQ(watched.events.size(), 1u);
  EXPECT_THAT(bob->Put("outside", "1"),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("for user bob")));

  // The token has expired meanwhile: the client logs in again.
  std::this_thread::sleep_for(2500ms);
  ASSERT_OK(bob->Put("/run/b", "2"));
  std::this_thread::sleep_for(2500ms);
  ASSERT_OK_AND_ASSIGN(WatchResult replay, bob->WatchPrefix("/run/", revision, In(10s)));
  EXPECT_FALSE(replay.events.empty());

  options.password = "wrong";
  EXPECT_THAT(EtcdClient::Connect(options, In(10s)),
              StatusIs(Status::Code::kPermissionDenied,
                       AllOf(HasSubstr("user bob"), HasSubstr("invalid user ID or password"))));

  options.user.clear();
  options.password.clear();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> anonymous,
                       EtcdClient::Connect(options, In(10s)));
  EXPECT_THAT(anonymous->Put("/run/c", "3"), StatusIs(Status::Code::kPermissionDenied, _));
}

}  // namespace
}  // namespace drover::etcd

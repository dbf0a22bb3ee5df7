// RendezvousServer over real loopback sockets, driven by RawPeer (a
// hand-made protocol peer), so these tests do not depend on the client.
// Waits are bounded by deadlines; nothing asserts on wall-clock durations.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <zlib.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "drover/rendezvous.h"
#include "rendezvous/node_info_codec.h"
#include "testing/raw_peer.h"
#include "testing/status_matchers.h"
#include "wire/auth.h"
#include "wire/frame.h"

namespace drover {
namespace {

using ::drover::testing::RawPeer;
using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kWait = std::chrono::seconds(20);

Deadline Soon() {
  return Clock::now() + kWait;
}

wire::Token TestToken(unsigned char seed = 7) {
  wire::Token token;
  for (size_t i = 0; i < token.size(); ++i) token[i] = static_cast<unsigned char>(seed + i * 13);
  return token;
}

// Everything the server reports through its callbacks, for tests to wait on.
class Recorder {
 public:
  void Rejected(const std::string& peer, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    rejected_.push_back(reason);
    cv_.notify_all();
  }
  void Event(const NodeEvent& event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(event);
    cv_.notify_all();
  }
  // A line of the server's log; shown on stderr too, as the server would.
  void Log(const std::string& line) {
    std::fprintf(stderr, "drover rendezvous: %s\n", line.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(line);
    cv_.notify_all();
  }

  // Waits for a rejection whose reason contains `text`.
  bool WaitForRejection(const std::string& text) { return WaitForText(rejected_, text); }
  // Waits for a log line that contains `text`.
  bool WaitForLog(const std::string& text) { return WaitForText(log_, text); }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  std::optional<NodeEvent> WaitForEvent(NodeEvent::Kind kind, const std::string& executor_id) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<NodeEvent> found;
    cv_.wait_until(lock, Soon(), [&] {
      for (const NodeEvent& event : events_) {
        if (event.kind == kind && event.node.executor_id == executor_id) {
          found = event;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  int CountEvents(NodeEvent::Kind kind, const std::string& executor_id) {
    std::lock_guard<std::mutex> lock(mu_);
    int count = 0;
    for (const NodeEvent& event : events_) {
      count += event.kind == kind && event.node.executor_id == executor_id;
    }
    return count;
  }
  std::vector<std::string> rejections() {
    std::lock_guard<std::mutex> lock(mu_);
    return rejected_;
  }

 private:
  bool WaitForText(const std::vector<std::string>& lines, const std::string& text) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, Soon(), [&] {
      for (const std::string& line : lines) {
        if (line.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> rejected_;
  std::vector<NodeEvent> events_;
  std::vector<std::string> log_;
};

struct ReceivedCluster {
  wire::Cluster cluster;
  wire::SharedCluster shared;
};

class ServerTest : public ::testing::Test {
 protected:
  RendezvousServerOptions Options(int num_nodes) {
    RendezvousServerOptions options;
    options.bind_address = "127.0.0.1";
    wire::Token token = TestToken();
    options.token.bytes.assign(token.begin(), token.end());
    options.cluster.num_nodes = num_nodes;
    options.reservation_timeout = std::chrono::seconds(60);
    options.handshake_timeout = std::chrono::seconds(20);
    options.on_rejected = [this](const std::string& peer, const std::string& reason) {
      recorder_.Rejected(peer, reason);
    };
    options.on_event = [this](const NodeEvent& event) { recorder_.Event(event); };
    options.log = [this](const std::string& line) { recorder_.Log(line); };
    return options;
  }

  void StartServer(RendezvousServerOptions options) {
    auto server = RendezvousServer::Start(std::move(options));
    ASSERT_OK(server);
    server_ = std::move(server).value();
    port_ = server_->port();
  }

  RawPeer Connect() {
    auto peer = RawPeer::Connect(port_, Soon());
    EXPECT_OK(peer);
    return std::move(peer).value();
  }

  RawPeer Authenticated() {
    RawPeer peer = Connect();
    EXPECT_OK(peer.Handshake(TestToken(), Soon()));
    return peer;
  }

  // Authenticated with executor `id`'s node credential, as an agent is.
  RawPeer AuthenticatedAsNode(const std::string& id) {
    RawPeer peer = Connect();
    Result<wire::Token> key = wire::DeriveNodeKey(TestToken(), id);
    EXPECT_OK(key);
    EXPECT_OK(peer.Handshake(*key, Soon(), "node " + id, id));
    return peer;
  }

  RawPeer JoinAsNode(const std::string& id, uint32_t port) {
    RawPeer peer = AuthenticatedAsNode(id);
    EXPECT_OK(peer.Send(wire::REGISTER, RegisterBody(id, port)));
    wire::Registered registered;
    EXPECT_OK(peer.Read(wire::REGISTERED, &registered, Soon()));
    return peer;
  }

  static wire::Register RegisterBody(const std::string& executor_id, uint32_t port,
                                     const std::string& host = "127.0.0.1") {
    wire::Register request;
    wire::NodeInfo* node = request.mutable_node();
    node->set_executor_id(executor_id);
    node->set_host(host);
    node->add_ports(port);
    node->add_ports(port + 1);
    node->set_pid(1000 + static_cast<int>(port % 1000));
    node->add_gpus(0);
    node->set_agent_address(host + ":" + std::to_string(port + 2));
    return request;
  }

  // A host's REGISTER, with `proof` (Register.credential_mac).
  static wire::Register HostRegisterBody(const std::string& executor_id, uint32_t port,
                                         const std::string& proof = "") {
    wire::Register request = RegisterBody(executor_id, port);
    request.set_host(true);
    request.set_credential_mac(proof);
    return request;
  }

  // Handshake and REGISTER; returns the REGISTERED reply through `registered`.
  RawPeer Join(const std::string& executor_id, uint32_t port, wire::Registered* registered,
               const std::string& host = "127.0.0.1") {
    RawPeer peer = Authenticated();
    EXPECT_OK(peer.Send(wire::REGISTER, RegisterBody(executor_id, port, host)));
    EXPECT_OK(peer.Read(wire::REGISTERED, registered, Soon()));
    return peer;
  }

  RawPeer Join(const std::string& executor_id, uint32_t port) {
    wire::Registered registered;
    return Join(executor_id, port, &registered);
  }

  static Result<ReceivedCluster> ReadCluster(RawPeer& peer) {
    ReceivedCluster out;
    DROVER_RETURN_IF_ERROR(peer.Read(wire::CLUSTER, &out.cluster, Soon()));
    std::string plain(out.cluster.shared_uncompressed_bytes(), '\0');
    uLongf size = plain.size();
    int rc = uncompress(reinterpret_cast<Bytef*>(plain.data()), &size,
                        reinterpret_cast<const Bytef*>(out.cluster.shared().data()),
                        out.cluster.shared().size());
    if (rc != Z_OK || size != plain.size()) {
      return Status::InvalidArgument("shared cluster does not inflate: zlib code " +
                                     std::to_string(rc));
    }
    if (!out.shared.ParseFromString(plain)) {
      return Status::InvalidArgument("shared cluster is not a SharedCluster");
    }
    return out;
  }

  // A bad peer must not stop the cluster: `first` registered before the bad
  // input; one more node joins now and both receive the cluster.
  void ExpectClusterFormsWith(RawPeer& first) {
    RawPeer second = Join("1", 7100);
    ASSERT_OK(ReadCluster(first));
    ASSERT_OK(ReadCluster(second));
    ASSERT_OK_AND_ASSIGN(FormedCluster formed, server_->WaitForCluster(Soon()));
    EXPECT_EQ(formed.nodes.size(), 2u);
  }

  void ExpectErrorAndClose(RawPeer& peer, wire::ErrorCode code, const std::string& text) {
    ASSERT_OK_AND_ASSIGN(wire::Error error, peer.ReadError(Soon()));
    EXPECT_EQ(error.code(), code) << error.message();
    EXPECT_THAT(error.message(), HasSubstr(text));
    EXPECT_OK(peer.WaitForClose(Soon()));
  }

  Recorder recorder_;
  std::unique_ptr<RendezvousServer> server_;
  uint16_t port_ = 0;
};

// ---------------------------------------------------------------------------
// Forming the cluster

TEST_F(ServerTest, FormsClusterWithDeterministicRoles) {
  RendezvousServerOptions options = Options(5);
  options.cluster.num_ps = 1;
  options.cluster.master_node = "chief";
  options.cluster.eval_node = true;
  options.cluster_id = "test-cluster";
  StartServer(std::move(options));

  // Registration order differs from executor-id order, and "10" sorts after
  // "3" only numerically.
  std::vector<std::string> ids = {"10", "3", "1", "2", "4"};
  std::vector<RawPeer> peers;
  for (size_t i = 0; i < ids.size(); ++i) {
    wire::Registered registered;
    peers.push_back(Join(ids[i], 5000 + static_cast<uint32_t>(std::stoi(ids[i])) * 10, &registered,
                         "host-" + ids[i]));
    EXPECT_EQ(registered.registered(), i + 1);
    EXPECT_EQ(registered.expected(), 5u);
  }

  std::map<std::string, std::pair<std::string, int>> expected_roles = {{"1", {"ps", 0}},
                                                                       {"2", {"chief", 0}},
                                                                       {"3", {"evaluator", 0}},
                                                                       {"4", {"worker", 0}},
                                                                       {"10", {"worker", 1}}};
  std::string shared_bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(ReceivedCluster got, ReadCluster(peers[i]));
    ASSERT_LT(got.cluster.position(), 5u);
    const wire::NodeInfo& own = got.shared.nodes(static_cast<int>(got.cluster.position()));
    EXPECT_EQ(own.executor_id(), ids[i]);
    EXPECT_EQ(own.job_name(), expected_roles[ids[i]].first) << "executor " << ids[i];
    EXPECT_EQ(own.task_index(), expected_roles[ids[i]].second) << "executor " << ids[i];
    EXPECT_EQ(got.cluster.heartbeat_interval_ms(), 1000u);
    // Every node gets the very same shared bytes.
    if (i == 0) shared_bytes = got.cluster.shared();
    EXPECT_EQ(got.cluster.shared(), shared_bytes);

    const wire::SharedCluster& shared = got.shared;
    EXPECT_EQ(shared.cluster_id(), "test-cluster");
    ASSERT_EQ(shared.nodes_size(), 5);
    std::vector<std::string> order;
    for (const wire::NodeInfo& node : shared.nodes()) order.push_back(node.executor_id());
    EXPECT_THAT(order, ElementsAre("1", "2", "3", "4", "10"));
    EXPECT_EQ(shared.nodes(4).job_name(), "worker");
    EXPECT_EQ(shared.nodes(4).task_index(), 1);
    EXPECT_EQ(shared.nodes(4).host(), "host-10");
    EXPECT_THAT(shared.nodes(4).ports(), ElementsAre(5100u, 5101u));
    EXPECT_EQ(shared.nodes(4).agent_address(), "host-10:5102");
    // Placements: chief, worker:0, worker:1 ranked in that order; ps and
    // evaluator not; rank 0's second port is torch's store.
    ASSERT_OK_AND_ASSIGN(FormedCluster decoded, rendezvous_internal::SharedClusterFromWire(shared));
    ASSERT_EQ(decoded.placements.size(), 5u);
    EXPECT_FALSE(decoded.placements[0].rank.has_value());
    EXPECT_TRUE(decoded.placements[1].chief);
    EXPECT_EQ(decoded.placements[1].rank->rank, 0);
    EXPECT_FALSE(decoded.placements[2].rank.has_value());
    EXPECT_EQ(decoded.placements[4].rank->rank, 2);
    EXPECT_EQ(decoded.placements[4].rank->store_port, 5021);
    EXPECT_EQ(shared.world_size(), 3u);
    EXPECT_EQ(shared.master(), 1u);
  }

  ASSERT_OK_AND_ASSIGN(FormedCluster formed, server_->WaitForCluster(Soon()));
  EXPECT_EQ(formed.cluster_id, "test-cluster");
  EXPECT_EQ(formed.spec.task_address("worker", 1).value_or(""), "host-10:5100");
  ASSERT_EQ(formed.nodes.size(), 5u);
  EXPECT_EQ(formed.nodes[0].executor_id, "1");
  EXPECT_EQ(formed.nodes[0].job_name, "ps");
  EXPECT_EQ(formed.nodes[0].pid, 1010);
  EXPECT_THAT(formed.nodes[0].gpus, ElementsAre(0));
  EXPECT_EQ(formed.own(), nullptr);
  ASSERT_EQ(formed.placements.size(), 5u);
  EXPECT_EQ(formed.spec.task_address("ps", 0).value_or(""), "host-1:5010");
  EXPECT_EQ(formed.spec.task_address("chief", 0).value_or(""), "host-2:5020");
  EXPECT_EQ(formed.spec.task_address("evaluator", 0).value_or(""), "host-3:5030");
  EXPECT_EQ(formed.spec.task_address("worker", 0).value_or(""), "host-4:5040");
  ASSERT_TRUE(formed.placements[4].rank.has_value());
  EXPECT_EQ(formed.placements[4].rank->master_host, "host-2");
  EXPECT_EQ(formed.placements[4].rank->store_port, 5021);

  ClusterState state = server_->QueryState();
  EXPECT_EQ(state.phase, "formed");
  EXPECT_EQ(state.registered, 5);
  EXPECT_EQ(state.expected, 5);
}

// Many nodes at once: every one gets its own slot and the same shared bytes.
// DROVER_TEST_NODES overrides the count (4000 for a quick scale check).
TEST_F(ServerTest, FormsALargeCluster) {
  int num_nodes = 300;
  if (const char* env = std::getenv("DROVER_TEST_NODES")) num_nodes = std::atoi(env);
  StartServer(Options(num_nodes));
  std::vector<RawPeer> peers;
  peers.reserve(num_nodes);
  for (int i = 0; i < num_nodes; ++i) peers.push_back(Authenticated());
  // All but the last register; the last one's REGISTER completes the barrier.
  for (int i = 0; i + 1 < num_nodes; ++i) {
    ASSERT_OK(peers[i].Send(wire::REGISTER,
                            RegisterBody(std::to_string(i), 10000 + static_cast<uint32_t>(i))));
  }
  for (int i = 0; i + 1 < num_nodes; ++i) {
    wire::Registered registered;
    ASSERT_OK(peers[i].Read(wire::REGISTERED, &registered, Soon()));
  }
  auto start = Clock::now();
  ASSERT_OK(peers.back().Send(wire::REGISTER, RegisterBody(std::to_string(num_nodes - 1), 9999)));
  wire::Registered last;
  ASSERT_OK(peers.back().Read(wire::REGISTERED, &last, Soon()));
  EXPECT_EQ(last.registered(), static_cast<uint32_t>(num_nodes));
  // Inflate one copy; the others must be the very same bytes.
  ASSERT_OK_AND_ASSIGN(ReceivedCluster first, ReadCluster(peers[0]));
  // Past the node list's limit (1,024) each node gets its own entry instead.
  const bool listed = num_nodes <= RendezvousServerOptions{}.node_list_limit;
  ASSERT_EQ(first.shared.nodes_size(), listed ? num_nodes : 0);
  ASSERT_EQ(first.shared.node_count(), listed ? 0u : static_cast<uint32_t>(num_nodes));
  std::set<uint32_t> positions = {first.cluster.position()};
  for (size_t i = 1; i < peers.size(); ++i) {
    wire::Cluster cluster;
    ASSERT_OK(peers[i].Read(wire::CLUSTER, &cluster, Soon()));
    ASSERT_EQ(cluster.shared(), first.cluster.shared());
    if (!listed) {
      ASSERT_EQ(cluster.node().executor_id(), std::to_string(i));
    }
    positions.insert(cluster.position());
  }
  for (const wire::NodeInfo& node : first.shared.nodes()) EXPECT_EQ(node.job_name(), "worker");
  auto took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(positions.size(), static_cast<size_t>(num_nodes));
  std::printf("%d nodes: every cluster read %.3f s after the last REGISTER\n", num_nodes, took);
}

TEST_F(ServerTest, NonIntegerExecutorIdsSortAfterIntegers) {
  StartServer(Options(3));
  RawPeer b = Join("b", 7000);
  RawPeer a = Join("a", 7010);
  RawPeer two = Join("2", 7020);
  ASSERT_OK_AND_ASSIGN(ReceivedCluster got_two, ReadCluster(two));
  ASSERT_OK_AND_ASSIGN(ReceivedCluster got_a, ReadCluster(a));
  ASSERT_OK_AND_ASSIGN(ReceivedCluster got_b, ReadCluster(b));
  EXPECT_EQ(got_two.cluster.position(), 0u);
  EXPECT_EQ(got_a.cluster.position(), 1u);
  EXPECT_EQ(got_b.cluster.position(), 2u);
  EXPECT_EQ(got_b.shared.nodes(2).task_index(), 2);
}

TEST_F(ServerTest, ReRegistrationReplacesTheOldEntry) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  wire::Registered registered;
  RawPeer retry = Join("0", 7200, &registered, "retried-host");
  EXPECT_EQ(registered.registered(), 1u);  // not a second node
  // The first attempt's connection is dropped.
  EXPECT_OK(first.WaitForClose(Soon()));

  RawPeer other = Join("1", 7100);
  ASSERT_OK_AND_ASSIGN(ReceivedCluster got, ReadCluster(retry));
  ASSERT_OK(ReadCluster(other));
  ASSERT_EQ(got.shared.nodes_size(), 2);
  EXPECT_EQ(got.shared.nodes(0).executor_id(), "0");
  EXPECT_EQ(got.shared.nodes(0).host(), "retried-host");
  EXPECT_THAT(got.shared.nodes(0).ports(), ElementsAre(7200u, 7201u));
}

TEST_F(ServerTest, LateRegistrationIsRejected) {
  StartServer(Options(1));
  RawPeer only = Join("0", 7000);
  ASSERT_OK(ReadCluster(only));

  RawPeer late = Authenticated();
  ASSERT_OK(late.Send(wire::REGISTER, RegisterBody("7", 7700)));
  ExpectErrorAndClose(late, wire::CLUSTER_FORMED,
                      "cluster already formed with 1 nodes; executor 7 was not part of it");
  // The member is unaffected.
  ASSERT_OK(only.Send(wire::CONTROL, [] {
    wire::Control control;
    control.set_kind(wire::Control::QUERY_STATE);
    return control;
  }()));
  wire::State state;
  ASSERT_OK(only.Read(wire::STATE, &state, Soon()));
  EXPECT_EQ(state.phase(), "formed");
}

TEST_F(ServerTest, ReservationTimeoutListsRegisteredAndMissing) {
  RendezvousServerOptions options = Options(4);
  options.cluster.num_ps = 1;
  options.reservation_timeout = std::chrono::milliseconds(300);
  StartServer(std::move(options));
  std::vector<RawPeer> peers;
  for (std::string id : {"3", "0", "1"}) peers.push_back(Join(id, 7000 + std::stoi(id)));

  const std::string expected =
      "reservation timed out after 0.3 s: 3 of 4 nodes registered (executors 0, 1, 3); "
      "missing 1 (worker:2)";
  for (RawPeer& peer : peers) ExpectErrorAndClose(peer, wire::RESERVATION_TIMEOUT, expected);
  EXPECT_THAT(server_->WaitForCluster(Soon()), StatusIs(Status::Code::kDeadlineExceeded, expected));
  EXPECT_EQ(server_->QueryState().phase, "stopped");

  // A node arriving after that learns why.
  RawPeer late = Authenticated();
  ASSERT_OK(late.Send(wire::REGISTER, RegisterBody("2", 7002)));
  ExpectErrorAndClose(late, wire::STOPPED, "reservation timed out");
}

// The driver sleeps until the barrier has an outcome instead of polling the
// phase: on_outcome comes once the last node registered (the phase is then
// no longer "reserving") and once a reservation times out.
TEST_F(ServerTest, OnOutcomeComesWhenTheClusterFormsAndWhenTheReservationTimesOut) {
  for (const bool complete : {true, false}) {
    SCOPED_TRACE(complete ? "formed" : "timed out");
    auto outcomes = std::make_shared<std::atomic<int>>(0);
    RendezvousServerOptions options = Options(2);
    options.reservation_timeout = std::chrono::milliseconds(complete ? 60'000 : 200);
    options.on_outcome = [outcomes] { outcomes->fetch_add(1); };
    StartServer(std::move(options));
    std::vector<RawPeer> peers;
    peers.push_back(Join("0", 7100));
    EXPECT_EQ(outcomes->load(), 0) << "one of two registered: no outcome yet";
    if (complete) peers.push_back(Join("1", 7101));
    EXPECT_EQ(server_->WaitForCluster(Soon()).ok(), complete);
    // A call through the loop: the handler that published the outcome is done.
    EXPECT_EQ(server_->QueryState().phase, complete ? "formed" : "stopped");
    EXPECT_EQ(outcomes->load(), 1);
    server_.reset();
  }
}

TEST_F(ServerTest, RegisterWithoutPortsIsMalformed) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  wire::Register request = RegisterBody("5", 7500);
  request.mutable_node()->clear_ports();
  ASSERT_OK(bad.Send(wire::REGISTER, request));
  ExpectErrorAndClose(bad, wire::MALFORMED, "REGISTER needs at least one port (executor 5)");
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, NodeGoneBeforeTheBarrierDoesNotCount) {
  StartServer(Options(2));
  { RawPeer gone = Join("0", 7000); }
  // Its registration is dropped once the server sees the close.
  Deadline deadline = Soon();
  while (server_->QueryState().registered != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server_->QueryState().registered, 0);
  wire::Registered registered;
  RawPeer second = Join("1", 7100, &registered);
  EXPECT_EQ(registered.registered(), 1u);
  RawPeer retried = Join("0", 7000);
  ASSERT_OK(ReadCluster(retried));
  ASSERT_OK(ReadCluster(second));
}

// ---------------------------------------------------------------------------
// Bad input: each costs only its own connection; the cluster still forms.

TEST_F(ServerTest, GarbageBytesAreRejected) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  ASSERT_OK(bad.SendBytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ExpectErrorAndClose(bad, wire::BAD_FRAME, "not a drover frame");
  EXPECT_TRUE(recorder_.WaitForRejection("not a drover frame"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, WrongMagicIsRejected) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::HELLO, 0);
  header[0] = 'X';
  ASSERT_OK(bad.SendBytes(std::string_view(header.data(), header.size())));
  ExpectErrorAndClose(bad, wire::BAD_FRAME, "expected magic");
  EXPECT_TRUE(recorder_.WaitForRejection("expected magic"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, UnknownVersionIsRejectedNamingBothVersions) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::HELLO, 0, 7);
  ASSERT_OK(bad.SendBytes(std::string_view(header.data(), header.size())));
  ExpectErrorAndClose(bad, wire::UNSUPPORTED_VERSION,
                      "peer speaks protocol version 7; this drover speaks 5");
  EXPECT_TRUE(recorder_.WaitForRejection("version 7"));
  // The previous release (version 4, whose server would take a host's
  // second REGISTER as replacing its first) is told so too.
  RawPeer previous = Connect();
  header = wire::EncodeHeader(wire::HELLO, 0, 4);
  ASSERT_OK(previous.SendBytes(std::string_view(header.data(), header.size())));
  ExpectErrorAndClose(previous, wire::UNSUPPORTED_VERSION,
                      "peer speaks protocol version 4; this drover speaks 5");
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, LengthOverTheLimitIsRejected) {
  RendezvousServerOptions options = Options(2);
  options.max_frame_bytes = 2048;
  StartServer(std::move(options));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::REGISTER, 4096);
  ASSERT_OK(bad.SendBytes(std::string_view(header.data(), header.size())));
  ExpectErrorAndClose(bad, wire::FRAME_TOO_LARGE, "4096 bytes is over the limit of 2048");
  EXPECT_TRUE(recorder_.WaitForRejection("over the limit"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, BeforeAuthenticationFramesAreSmall) {
  // A frame an authenticated peer could send (under max_frame_bytes) is
  // refused from a peer that has not authenticated, at its header: the
  // server neither waits for nor buffers the body (#15).
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::HELLO, 2 << 20);
  ASSERT_OK(bad.SendBytes(std::string_view(header.data(), header.size())));
  ExpectErrorAndClose(bad, wire::FRAME_TOO_LARGE, "2097152 bytes is over the limit of 1024");
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, TheLargestValidHelloFits) {
  StartServer(Options(1));
  RawPeer peer = Connect();
  const std::string id(wire::kMaxCredentialIdBytes, '7');
  ASSERT_OK_AND_ASSIGN(wire::Token key, wire::DeriveNodeKey(TestToken(), id));
  ASSERT_OK(peer.Handshake(key, Soon(), std::string(wire::kMaxHelloNameBytes, 'n'), id));
  wire::Hello longer;
  longer.set_client_nonce(std::string(wire::kNonceBytes, 'n'));
  longer.set_name(std::string(wire::kMaxHelloNameBytes + 1, 'n'));
  RawPeer bad = Connect();
  ASSERT_OK(bad.Send(wire::HELLO, longer));
  ExpectErrorAndClose(bad, wire::MALFORMED, "HELLO name of 257 bytes is over the limit of 256");
}

TEST_F(ServerTest, TextFromAnUnauthenticatedPeerIsEscapedInTheLog) {
  StartServer(Options(1));
  RawPeer bad = Connect();
  // Not even UTF-8: a HELLO's name is bytes.
  EXPECT_THAT(bad.Handshake(TestToken(99), Soon(), "\x1b]2;pwned\x07\x1b[31mred\r\n\xff"),
              StatusIs(Status::Code::kUnavailable, HasSubstr("wrong token")));
  ASSERT_TRUE(recorder_.WaitForRejection("wrong token"));
  RawPeer chatty = Connect();
  ASSERT_OK(chatty.SendBytes(wire::EncodeError(wire::MALFORMED, "\x1b[2J\x1b[Hcleared")));
  ASSERT_TRUE(recorder_.WaitForRejection("peer sent ERROR"));
  server_->Shutdown();  // no more log lines after this
  std::string all;
  for (const std::string& line : recorder_.log()) all += line + "\n";
  EXPECT_THAT(all, HasSubstr("wrong token (\\x1b]2;pwned\\x07\\x1b[31mred\\x0d\\x0a\\xff)"));
  EXPECT_THAT(all, HasSubstr("peer sent ERROR MALFORMED: \\x1b[2J\\x1b[Hcleared"));
  EXPECT_EQ(all.find('\x1b'), std::string::npos);
  EXPECT_EQ(all.find('\r'), std::string::npos);
}

TEST_F(ServerTest, FrameCutShortIsLoggedAndClosed) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::HELLO, 40);
  ASSERT_OK(bad.SendBytes(std::string(header.data(), header.size()) + "0123456789"));
  bad.ShutdownWrite();
  EXPECT_OK(bad.WaitForClose(Soon()));
  EXPECT_TRUE(recorder_.WaitForRejection("short frame: connection ended after 22 bytes"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, UnfinishedFrameAfterAuthTimesOut) {
  RendezvousServerOptions options = Options(2);
  options.handshake_timeout = std::chrono::milliseconds(200);
  StartServer(std::move(options));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::REGISTER, 40);
  ASSERT_OK(bad.SendBytes(std::string(header.data(), header.size()) + "01234"));
  EXPECT_OK(bad.WaitForClose(Soon()));
  EXPECT_TRUE(recorder_.WaitForRejection("short frame: 17 bytes of an unfinished frame"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, SilentClientIsDroppedAfterTheHandshakeTimeout) {
  RendezvousServerOptions options = Options(2);
  options.handshake_timeout = std::chrono::milliseconds(200);
  StartServer(std::move(options));
  RawPeer first = Join("0", 7000);
  RawPeer silent = Connect();
  EXPECT_OK(silent.WaitForClose(Soon()));
  EXPECT_TRUE(recorder_.WaitForRejection("no handshake from 127.0.0.1:"));
  EXPECT_TRUE(recorder_.WaitForRejection("within 0.2 s"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, WrongTokenFailsAuthentication) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  EXPECT_THAT(
      bad.Handshake(TestToken(99), Soon(), "intruder"),
      StatusIs(Status::Code::kUnavailable, "AUTH_FAILED: authentication failed: wrong token"));
  EXPECT_OK(bad.WaitForClose(Soon()));
  EXPECT_TRUE(recorder_.WaitForRejection("authentication failed: wrong token (intruder)"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, UnknownMessageTypeIsRejected) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(99, 0);
  ASSERT_OK(bad.SendBytes(std::string_view(header.data(), header.size())));
  ExpectErrorAndClose(bad, wire::UNKNOWN_MESSAGE, "unknown message type 99");
  EXPECT_TRUE(recorder_.WaitForRejection("unknown message type 99"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, RegisterWithMalformedBodyIsRejected) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  ASSERT_OK(bad.SendBytes(bad.Seal(wire::REGISTER, std::string_view("\xff\xff\xff", 3))));
  ExpectErrorAndClose(bad, wire::MALFORMED, "malformed REGISTER body (3 bytes)");
  EXPECT_TRUE(recorder_.WaitForRejection("malformed REGISTER body"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, MessageBeforeAuthIsRejected) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Connect();
  ASSERT_OK(bad.Send(wire::REGISTER, RegisterBody("9", 7900)));
  ExpectErrorAndClose(bad, wire::NOT_AUTHENTICATED, "REGISTER before authentication");
  EXPECT_TRUE(recorder_.WaitForRejection("REGISTER before authentication"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, ServerToClientMessageFromAClientIsRejected) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  ASSERT_OK(bad.Send(wire::CLUSTER, wire::Cluster()));
  ExpectErrorAndClose(bad, wire::UNKNOWN_MESSAGE, "CLUSTER is a server-to-client message");
  ExpectClusterFormsWith(first);
}

// ---------------------------------------------------------------------------
// Bounds on what a peer can hold (#15).

wire::Hello SomeHello() {
  wire::Hello hello;
  hello.set_client_nonce(std::string(wire::kNonceBytes, 'n'));
  return hello;
}

TEST_F(ServerTest, UnauthenticatedConnectionsAreCapped) {
  RendezvousServerOptions options = Options(1);
  options.max_unauthenticated_connections = 2;
  StartServer(std::move(options));
  RawPeer silent = Connect();
  RawPeer slow = Connect();
  ASSERT_TRUE(recorder_.WaitForLog("2 connections are waiting to authenticate, the limit"));
  // A third gets through TCP (the kernel's backlog) but is not served...
  RawPeer third = Connect();
  ASSERT_OK(third.Send(wire::HELLO, SomeHello()));
  EXPECT_THAT(third.ReadFrame(Clock::now() + std::chrono::milliseconds(300)),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("no frame")));
  // ... until one of the two authenticates; then it is.
  ASSERT_OK(slow.Handshake(TestToken(), Soon()));
  wire::Challenge challenge;
  ASSERT_OK(third.Read(wire::CHALLENGE, &challenge, Soon()));
  // Authenticated connections do not count: with `silent` and `third`
  // waiting, the limit is reached again; a close frees a place.
  RawPeer fourth = Connect();
  ASSERT_OK(fourth.Send(wire::HELLO, SomeHello()));
  silent.Close();
  ASSERT_OK(fourth.Read(wire::CHALLENGE, &challenge, Soon()));
}

TEST_F(ServerTest, ARejectedPeerThatStopsReadingIsClosedAtTheDrainDeadline) {
  RendezvousServerOptions options = Options(1);
  options.drain_timeout = std::chrono::milliseconds(200);
  StartServer(std::move(options));
  // A peer with a small receive buffer asks for far more than the socket
  // buffers hold and never reads; then it sends a bad frame. Its ERROR frame
  // waits behind the replies, which will never be written.
  RawPeer greedy = Connect();
  int small = 4096;
  ASSERT_EQ(::setsockopt(greedy.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  ASSERT_OK(greedy.Handshake(TestToken(), Soon()));
  wire::KvRequest set;
  set.set_op(wire::KvRequest::SET);
  set.set_key("big");
  set.set_value(std::string(wire::kMaxKvValueBytes, 'v'));
  ASSERT_OK(greedy.Send(wire::KV_REQUEST, set));
  wire::KvRequest get;
  get.set_op(wire::KvRequest::GET);
  get.set_key("big");
  for (int i = 0; i < 16; ++i) ASSERT_OK(greedy.Send(wire::KV_REQUEST, get));
  ASSERT_OK(greedy.SendBytes(greedy.Seal(wire::CONTROL, std::string_view("\xff", 1))));
  ASSERT_TRUE(recorder_.WaitForRejection("malformed CONTROL body"));
  EXPECT_TRUE(recorder_.WaitForLog("it did not read its ERROR frame within 0.2 s ("));
  // The server has let go: other peers are served, and the cluster forms.
  RawPeer node = Join("0", 7000);
  ASSERT_OK(ReadCluster(node));
}

// ---------------------------------------------------------------------------
// Node credentials: a node authenticates for its own slot only (#15).

TEST_F(ServerTest, NodeCredentialRegistersItsOwnSlot) {
  StartServer(Options(2));
  RawPeer zero = JoinAsNode("0", 7000);
  RawPeer one = JoinAsNode("1", 7100);
  ASSERT_OK_AND_ASSIGN(ReceivedCluster got, ReadCluster(one));
  EXPECT_EQ(got.shared.nodes_size(), 2);
  ASSERT_OK(ReadCluster(zero));
}

TEST_F(ServerTest, NodeCredentialCannotRegisterOrTakeOverAnotherSlot) {
  StartServer(Options(2));
  RawPeer zero = JoinAsNode("0", 7000);
  // Executor 1's credential claims executor 0's slot: refused, and the slot
  // keeps its connection (a re-registration would have dropped it).
  RawPeer intruder = AuthenticatedAsNode("1");
  ASSERT_OK(intruder.Send(wire::REGISTER, RegisterBody("0", 7666, "evil-host")));
  ExpectErrorAndClose(intruder, wire::PERMISSION_DENIED,
                      "the node credential of executor 1 may not register executor 0");
  EXPECT_TRUE(recorder_.WaitForRejection("executor 1's credential: the node credential"));
  ClusterState state = server_->QueryState();
  ASSERT_EQ(state.nodes.size(), 1u);
  EXPECT_EQ(state.nodes[0].node.host, "127.0.0.1");
  RawPeer one = JoinAsNode("1", 7100);
  ASSERT_OK_AND_ASSIGN(ReceivedCluster got, ReadCluster(zero));
  EXPECT_EQ(got.shared.nodes(0).host(), "127.0.0.1");
  EXPECT_THAT(got.shared.nodes(0).ports(), ElementsAre(7000u, 7001u));
}

TEST_F(ServerTest, NodeCredentialOfAnotherClusterOrIdIsRefused) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  // Executor 1's credential, presented as executor 2's.
  RawPeer swapped = Connect();
  ASSERT_OK_AND_ASSIGN(wire::Token one, wire::DeriveNodeKey(TestToken(), "1"));
  EXPECT_THAT(swapped.Handshake(one, Soon(), "node", "2"),
              StatusIs(Status::Code::kUnavailable,
                       "AUTH_FAILED: authentication failed: wrong node credential for executor 2"));
  // Executor 1's credential of another cluster's token.
  RawPeer other = Connect();
  ASSERT_OK_AND_ASSIGN(wire::Token foreign, wire::DeriveNodeKey(TestToken(99), "1"));
  EXPECT_THAT(other.Handshake(foreign, Soon(), "node", "1"),
              StatusIs(Status::Code::kUnavailable, HasSubstr("wrong node credential")));
  ExpectClusterFormsWith(first);
}

// A host's agent holding node credentials only (the ssh and slurm
// engines'): one connection, opened with one node's credential, proving each
// other node's in its REGISTER.
wire::Token NodeKey(const std::string& executor_id) {
  Result<wire::Token> key = wire::DeriveNodeKey(TestToken(), executor_id);
  EXPECT_OK(key);
  return key.ok() ? *key : wire::Token{};
}

TEST_F(ServerTest, AHostConnectionOfNodeCredentialsProvesEachOtherNode) {
  StartServer(Options(3));
  RawPeer host = AuthenticatedAsNode("0");
  ASSERT_OK(host.Send(wire::REGISTER, HostRegisterBody("0", 7000)));
  ASSERT_OK(
      host.Send(wire::REGISTER, HostRegisterBody("1", 7100, host.CredentialProof(NodeKey("1")))));
  wire::Registered registered;
  ASSERT_OK(host.Read(wire::REGISTERED, &registered, Soon()));
  ASSERT_OK(host.Read(wire::REGISTERED, &registered, Soon()));
  RawPeer two = JoinAsNode("2", 7200);
  ASSERT_OK(ReadCluster(host));
  ASSERT_OK(ReadCluster(host));
  ASSERT_OK(ReadCluster(two));
  ASSERT_OK_AND_ASSIGN(FormedCluster formed, server_->WaitForCluster(Soon()));
  EXPECT_EQ(formed.nodes.size(), 3u);

  // The connection acts for node 1 as node 1's credential may: it reports
  // node 1's error and sees it, and sees node 2's place, not its error.
  wire::Control report;
  report.set_kind(wire::Control::REPORT_ERROR);
  report.set_executor_id("2");
  report.set_message("node 2's own");
  ASSERT_OK(two.Send(wire::CONTROL, report));
  ASSERT_TRUE(recorder_.WaitForEvent(NodeEvent::Kind::kError, "2").has_value());
  report.set_executor_id("1");
  report.set_message("exited with code 3");
  ASSERT_OK(host.Send(wire::CONTROL, report));
  ASSERT_TRUE(recorder_.WaitForEvent(NodeEvent::Kind::kError, "1").has_value());
  wire::Control query;
  query.set_kind(wire::Control::QUERY_STATE);
  ASSERT_OK(host.Send(wire::CONTROL, query));
  wire::State state;
  ASSERT_OK(host.Read(wire::STATE, &state, Soon()));
  ASSERT_EQ(state.nodes_size(), 3);
  EXPECT_EQ(state.nodes(1).error(), "exited with code 3");
  EXPECT_TRUE(state.nodes(2).alive());
  EXPECT_EQ(state.nodes(2).error(), "");
  // ... and nothing more: node 2 is not its to report for.
  report.set_executor_id("2");
  ASSERT_OK(host.Send(wire::CONTROL, report));
  ExpectErrorAndClose(host, wire::PERMISSION_DENIED,
                      "the node credentials of executor 0 and 1 more may not report an error for "
                      "executor 2");
}

TEST_F(ServerTest, AHostsNodeWithoutItsCredentialIsRefused) {
  StartServer(Options(2));
  // No proof.
  RawPeer bare = AuthenticatedAsNode("0");
  ASSERT_OK(bare.Send(wire::REGISTER, HostRegisterBody("0", 7000)));
  ASSERT_OK(bare.Send(wire::REGISTER, HostRegisterBody("1", 7100)));
  wire::Registered registered;
  ASSERT_OK(bare.Read(wire::REGISTERED, &registered, Soon()));
  ExpectErrorAndClose(bare, wire::PERMISSION_DENIED,
                      "the node credential of executor 0 may not register executor 1");
  // A proof under another node's credential.
  RawPeer wrong = AuthenticatedAsNode("0");
  ASSERT_OK(
      wrong.Send(wire::REGISTER, HostRegisterBody("1", 7100, wrong.CredentialProof(NodeKey("2")))));
  ExpectErrorAndClose(wrong, wire::AUTH_FAILED, "wrong credential proof for executor 1");
  // A right proof, but another connection's: seen on the wire, replayed.
  RawPeer seen = AuthenticatedAsNode("0");
  RawPeer replayer = AuthenticatedAsNode("0");
  ASSERT_OK(replayer.Send(wire::REGISTER,
                          HostRegisterBody("1", 7100, seen.CredentialProof(NodeKey("1")))));
  ExpectErrorAndClose(replayer, wire::AUTH_FAILED, "wrong credential proof for executor 1");
  // A proof where none goes: a node's own REGISTER, the cluster token's.
  RawPeer single = AuthenticatedAsNode("0");
  wire::Register own = RegisterBody("1", 7100);
  own.set_credential_mac(single.CredentialProof(NodeKey("1")));
  ASSERT_OK(single.Send(wire::REGISTER, own));
  ExpectErrorAndClose(single, wire::MALFORMED, "a credential proof goes with a host's REGISTER");
  RawPeer admin = Authenticated();
  ASSERT_OK(admin.Send(wire::REGISTER, HostRegisterBody("1", 7100, std::string(32, 'p'))));
  ExpectErrorAndClose(admin, wire::MALFORMED, "the cluster token's connection, which needs none");
  EXPECT_TRUE(server_->QueryState().nodes.empty());
  // The refusals cost their connections only.
  RawPeer first = Join("0", 7000);
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, HelloWithABadExecutorIdIsMalformed) {
  StartServer(Options(2));
  RawPeer bad = Connect();
  wire::Hello hello;
  hello.set_client_nonce(std::string(wire::kNonceBytes, 'n'));
  hello.set_executor_id("a b");
  ASSERT_OK(bad.Send(wire::HELLO, hello));
  ExpectErrorAndClose(bad, wire::MALFORMED, "HELLO executor_id: an executor id in a node");
}

// ---------------------------------------------------------------------------
// Authenticated frames: after AUTH_OK a frame the session did not seal, or
// one sealed out of order, ends that connection only (#15).

wire::Control QueryStateBody() {
  wire::Control control;
  control.set_kind(wire::Control::QUERY_STATE);
  return control;
}

wire::Control StopAllBody() {
  wire::Control control;
  control.set_kind(wire::Control::STOP_ALL);
  return control;
}

TEST_F(ServerTest, AlteredFrameEndsTheConnection) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = AuthenticatedAsNode("5");
  ASSERT_OK(bad.Send(wire::CONTROL, QueryStateBody()));
  wire::State state;
  ASSERT_OK(bad.Read(wire::STATE, &state, Soon()));
  std::string frame = bad.Seal(wire::CONTROL, QueryStateBody().SerializeAsString());
  frame[wire::kHeaderBytes] ^= 0x01;  // the body's first byte
  ASSERT_OK(bad.SendBytes(frame));
  ExpectErrorAndClose(bad, wire::FRAME_AUTH_FAILED, "frame MAC check failed (CONTROL, sequence 1)");
  // The server's log line names the peer (Rejected's) and the credential.
  EXPECT_TRUE(recorder_.WaitForRejection(
      "executor 5's credential: frame MAC check failed (CONTROL, sequence 1): altered on the way"));
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, InjectedStopAllWithoutTheSessionKeyStopsNobody) {
  // A hijacker on the path can write into the driver's (cluster token)
  // connection, but cannot seal: its STOP_ALL ends that connection and
  // reaches no node.
  RendezvousServerOptions options = Options(1);
  StartServer(std::move(options));
  RawPeer node = Join("0", 7000);
  ASSERT_OK(ReadCluster(node));
  RawPeer driver = Authenticated();
  wire::FrameSealer forged(TestToken(), wire::Direction::kClientToServer);
  ASSERT_OK(driver.SendBytes(forged.Seal(wire::CONTROL, StopAllBody())));
  ExpectErrorAndClose(driver, wire::FRAME_AUTH_FAILED, "frame MAC check failed");
  // Frames on one connection are handled in order: had STOP_ALL been
  // relayed, it would come before this STATE.
  ASSERT_OK(node.Send(wire::CONTROL, QueryStateBody()));
  wire::State state;
  ASSERT_OK(node.Read(wire::STATE, &state, Soon()));
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kStopped, ""), 0);
}

TEST_F(ServerTest, ReplayedFrameEndsTheConnection) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  std::string frame = bad.Seal(wire::CONTROL, QueryStateBody().SerializeAsString());
  ASSERT_OK(bad.SendBytes(frame));
  wire::State state;
  ASSERT_OK(bad.Read(wire::STATE, &state, Soon()));
  ASSERT_OK(bad.SendBytes(frame));
  ExpectErrorAndClose(bad, wire::FRAME_AUTH_FAILED,
                      "frame out of order (CONTROL): sequence 0, expected 1 (replayed");
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, ReorderedFramesEndTheConnection) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  RawPeer bad = Authenticated();
  std::string earlier = bad.Seal(wire::CONTROL, QueryStateBody().SerializeAsString());
  std::string later = bad.Seal(wire::CONTROL, QueryStateBody().SerializeAsString());
  ASSERT_OK(bad.SendBytes(later + earlier));
  ExpectErrorAndClose(bad, wire::FRAME_AUTH_FAILED, "sequence 1, expected 0");
  ExpectClusterFormsWith(first);
}

TEST_F(ServerTest, FramesFromTheServerAreSealedInOrder) {
  // RawPeer checks every frame it reads; a STATE, a REGISTERED and a
  // CLUSTER (sealed over a shared body) in a row all open.
  StartServer(Options(1));
  RawPeer node = Authenticated();
  ASSERT_OK(node.Send(wire::CONTROL, QueryStateBody()));
  wire::State state;
  ASSERT_OK(node.Read(wire::STATE, &state, Soon()));
  ASSERT_OK(node.Send(wire::REGISTER, RegisterBody("0", 7000)));
  wire::Registered registered;
  ASSERT_OK(node.Read(wire::REGISTERED, &registered, Soon()));
  ASSERT_OK(ReadCluster(node));
}

// ---------------------------------------------------------------------------
// Liveness and control

class FormedServerTest : public ServerTest {
 protected:
  void Form(RendezvousServerOptions options) {
    StartServer(std::move(options));
    peers_.push_back(Join("0", 7000));
    peers_.push_back(Join("1", 7100));
    for (RawPeer& peer : peers_) ASSERT_OK(ReadCluster(peer));
  }

  static wire::Control ControlBody(wire::Control::Kind kind, const std::string& executor_id = "") {
    wire::Control control;
    control.set_kind(kind);
    control.set_executor_id(executor_id);
    return control;
  }

  std::vector<RawPeer> peers_;
};

TEST_F(FormedServerTest, SilentNodeIsDeclaredDeadOnce) {
  RendezvousServerOptions options = Options(2);
  options.heartbeat_interval = std::chrono::milliseconds(100);
  options.missed_heartbeats_until_dead = 5;
  Form(std::move(options));

  // Node 0 heartbeats until node 1 has been declared dead; node 1 is silent.
  std::atomic<bool> done{false};
  std::thread beater([&] {
    wire::Heartbeat heartbeat;
    for (uint64_t i = 0; !done; ++i) {
      heartbeat.set_sequence(i);
      if (!peers_[0].Send(wire::HEARTBEAT, heartbeat).ok()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::optional<NodeEvent> dead = recorder_.WaitForEvent(NodeEvent::Kind::kDead, "1");
  ClusterState state = server_->QueryState();
  done = true;
  beater.join();
  ASSERT_TRUE(dead.has_value());
  EXPECT_THAT(dead->message, HasSubstr("executor 1 (worker:1) missed 5 heartbeats (last "));
  EXPECT_EQ(dead->node.job_name, "worker");
  EXPECT_EQ(dead->node.task_index, 1);
  EXPECT_OK(peers_[1].WaitForClose(Soon()));

  ASSERT_EQ(state.nodes.size(), 2u);
  EXPECT_TRUE(state.nodes[0].alive);
  EXPECT_FALSE(state.nodes[1].alive);
  EXPECT_THAT(state.nodes[1].error, HasSubstr("missed 5 heartbeats"));

  server_->Shutdown();  // no more events after this
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "1"), 1);
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "0"), 0);
}

TEST_F(FormedServerTest, ClosedConnectionIsDeclaredDead) {
  Form(Options(2));
  peers_[1].Close();
  std::optional<NodeEvent> dead = recorder_.WaitForEvent(NodeEvent::Kind::kDead, "1");
  ASSERT_TRUE(dead.has_value());
  EXPECT_EQ(dead->message, "executor 1 (worker:1): connection closed");
  server_->Shutdown();
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "1"), 1);
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "0"), 0);
}

TEST_F(FormedServerTest, ReportErrorReachesTheDriverAndTheState) {
  Form(Options(2));
  wire::Control report = ControlBody(wire::Control::REPORT_ERROR, "1");
  report.set_message("train.py exited with status 1");
  report.add_last_log_lines("Traceback (most recent call last):");
  report.add_last_log_lines("ValueError: bad shape");
  ASSERT_OK(peers_[1].Send(wire::CONTROL, report));

  std::optional<NodeEvent> event = recorder_.WaitForEvent(NodeEvent::Kind::kError, "1");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->message, "train.py exited with status 1");
  EXPECT_THAT(event->last_log_lines,
              ElementsAre("Traceback (most recent call last):", "ValueError: bad shape"));

  ASSERT_OK(peers_[0].Send(wire::CONTROL, ControlBody(wire::Control::QUERY_STATE)));
  wire::State state;
  ASSERT_OK(peers_[0].Read(wire::STATE, &state, Soon()));
  EXPECT_EQ(state.phase(), "formed");
  EXPECT_EQ(state.registered(), 2u);
  EXPECT_EQ(state.expected(), 2u);
  ASSERT_EQ(state.nodes_size(), 2);
  EXPECT_EQ(state.nodes(1).node().executor_id(), "1");
  EXPECT_EQ(state.nodes(1).node().job_name(), "worker");
  EXPECT_TRUE(state.nodes(1).alive());
  EXPECT_EQ(state.nodes(1).error(), "train.py exited with status 1");
  EXPECT_EQ(state.nodes(1).last_log_lines_size(), 2);

  ClusterState driver_view = server_->QueryState();
  ASSERT_EQ(driver_view.nodes.size(), 2u);
  EXPECT_EQ(driver_view.nodes[1].error, "train.py exited with status 1");
}

TEST_F(FormedServerTest, StopNodeFromANodeIsRelayed) {
  Form(Options(2));
  ASSERT_OK(peers_[0].Send(wire::CONTROL, ControlBody(wire::Control::STOP_NODE, "1")));
  wire::Control relayed;
  ASSERT_OK(peers_[1].Read(wire::CONTROL, &relayed, Soon()));
  EXPECT_EQ(relayed.kind(), wire::Control::STOP_NODE);
  EXPECT_EQ(relayed.executor_id(), "1");
  // A stopped node leaving is not a death.
  peers_[1].Close();
  server_->Shutdown();
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "1"), 0);
}

TEST_F(FormedServerTest, StopNodeFromTheDriver) {
  Form(Options(2));
  EXPECT_OK(server_->StopNode("0"));
  wire::Control relayed;
  ASSERT_OK(peers_[0].Read(wire::CONTROL, &relayed, Soon()));
  EXPECT_EQ(relayed.kind(), wire::Control::STOP_NODE);
  EXPECT_EQ(relayed.executor_id(), "0");
  EXPECT_THAT(server_->StopNode("42"),
              StatusIs(Status::Code::kNotFound, HasSubstr("no node with executor id '42'")));
}

TEST_F(FormedServerTest, StopAllFromANodeReachesEveryNode) {
  Form(Options(2));
  ASSERT_OK(peers_[1].Send(wire::CONTROL, ControlBody(wire::Control::STOP_ALL)));
  for (RawPeer& peer : peers_) {
    wire::Control relayed;
    ASSERT_OK(peer.Read(wire::CONTROL, &relayed, Soon()));
    EXPECT_EQ(relayed.kind(), wire::Control::STOP_ALL);
  }
  std::optional<NodeEvent> event = recorder_.WaitForEvent(NodeEvent::Kind::kStopped, "1");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->message, "executor 1 (worker:1) asked to stop all nodes");
}

TEST_F(FormedServerTest, StopAllFromTheDriverReachesEveryNode) {
  Form(Options(2));
  server_->StopAll();
  for (RawPeer& peer : peers_) {
    wire::Control relayed;
    ASSERT_OK(peer.Read(wire::CONTROL, &relayed, Soon()));
    EXPECT_EQ(relayed.kind(), wire::Control::STOP_ALL);
  }
  for (RawPeer& peer : peers_) peer.Close();
  server_->Shutdown();
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "0"), 0);
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kDead, "1"), 0);
}

class NodeCredentialControlTest : public FormedServerTest {
 protected:
  // Two nodes that authenticated as agents do, with their own credentials.
  void FormAsNodes() {
    StartServer(Options(2));
    peers_.push_back(JoinAsNode("0", 7000));
    peers_.push_back(JoinAsNode("1", 7100));
    for (RawPeer& peer : peers_) ASSERT_OK(ReadCluster(peer));
  }

  // Executor 0 still gets answers, and no STOP came before this one.
  void ExpectNodeZeroUnaffected() {
    ASSERT_OK(peers_[0].Send(wire::CONTROL, ControlBody(wire::Control::QUERY_STATE)));
    wire::State state;
    ASSERT_OK(peers_[0].Read(wire::STATE, &state, Soon()));
    EXPECT_EQ(state.phase(), "formed");
  }
};

TEST_F(NodeCredentialControlTest, ANodeCannotStopAll) {
  FormAsNodes();
  ASSERT_OK(peers_[1].Send(wire::CONTROL, ControlBody(wire::Control::STOP_ALL)));
  ExpectErrorAndClose(peers_[1], wire::PERMISSION_DENIED,
                      "the node credential of executor 1 may not stop all nodes");
  ExpectNodeZeroUnaffected();
  EXPECT_EQ(recorder_.CountEvents(NodeEvent::Kind::kStopped, "1"), 0);
}

TEST_F(NodeCredentialControlTest, ANodeCannotStopAnother) {
  FormAsNodes();
  ASSERT_OK(peers_[1].Send(wire::CONTROL, ControlBody(wire::Control::STOP_NODE, "0")));
  ExpectErrorAndClose(peers_[1], wire::PERMISSION_DENIED, "may not stop executor 0");
  ExpectNodeZeroUnaffected();
}

TEST_F(NodeCredentialControlTest, ANodeReportsErrorsForItselfOnly) {
  FormAsNodes();
  wire::Control own = ControlBody(wire::Control::REPORT_ERROR, "1");
  own.set_message("exited with code 3");
  own.add_last_log_lines("secret of node 1");
  ASSERT_OK(peers_[1].Send(wire::CONTROL, own));
  ASSERT_TRUE(recorder_.WaitForEvent(NodeEvent::Kind::kError, "1").has_value());
  // Node 0 sees node 1's place and liveness, not its error or lines.
  ASSERT_OK(peers_[0].Send(wire::CONTROL, ControlBody(wire::Control::QUERY_STATE)));
  wire::State state;
  ASSERT_OK(peers_[0].Read(wire::STATE, &state, Soon()));
  ASSERT_EQ(state.nodes_size(), 2);
  EXPECT_EQ(state.nodes(1).node().executor_id(), "1");
  EXPECT_TRUE(state.nodes(1).alive());
  EXPECT_EQ(state.nodes(1).error(), "");
  EXPECT_EQ(state.nodes(1).last_log_lines_size(), 0);
  // ... while node 1 sees its own.
  ASSERT_OK(peers_[1].Send(wire::CONTROL, ControlBody(wire::Control::QUERY_STATE)));
  ASSERT_OK(peers_[1].Read(wire::STATE, &state, Soon()));
  EXPECT_EQ(state.nodes(1).error(), "exited with code 3");

  wire::Control other = ControlBody(wire::Control::REPORT_ERROR, "0");
  other.set_message("framed");
  ASSERT_OK(peers_[1].Send(wire::CONTROL, other));
  ExpectErrorAndClose(peers_[1], wire::PERMISSION_DENIED, "may not report an error for executor 0");
  EXPECT_EQ(server_->QueryState().nodes[0].error, "");
}

TEST_F(NodeCredentialControlTest, ANodeUsesTheKeyValueStore) {
  FormAsNodes();
  wire::KvRequest set;
  set.set_op(wire::KvRequest::SET);
  set.set_key("rank0/addr");
  set.set_value("10.0.0.1:29500");
  ASSERT_OK(peers_[1].Send(wire::KV_REQUEST, set));
  wire::KvReply reply;
  ASSERT_OK(peers_[1].Read(wire::KV_REPLY, &reply, Soon()));
  EXPECT_EQ(reply.code(), wire::ERROR_CODE_UNSPECIFIED) << reply.message();
}

TEST_F(FormedServerTest, ShutdownTellsNodesAndIsIdempotent) {
  Form(Options(2));
  server_->Shutdown();
  server_->Shutdown();
  ExpectErrorAndClose(peers_[0], wire::STOPPED, "shutting down");
  EXPECT_EQ(server_->QueryState().phase, "stopped");
  EXPECT_THAT(server_->StopNode("0"), StatusIs(Status::Code::kUnavailable, HasSubstr("shut down")));
  // The cluster formed before the shutdown: that outcome stays.
  EXPECT_OK(server_->WaitForCluster(Soon()));
}

TEST_F(ServerTest, WaitForClusterHonoursTheCallersDeadline) {
  StartServer(Options(2));
  RawPeer first = Join("0", 7000);
  EXPECT_THAT(server_->WaitForCluster(Clock::now() + std::chrono::milliseconds(50)),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("1 of 2 nodes registered")));
}

TEST_F(ServerTest, StartRejectsABadTokenAndTemplate) {
  RendezvousServerOptions options = Options(2);
  options.token.bytes.resize(5);
  EXPECT_THAT(RendezvousServer::Start(options),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("got 5")));
  options = Options(1);
  options.cluster.num_ps = 2;
  EXPECT_THAT(RendezvousServer::Start(options),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("cannot hold")));
}

// ---------------------------------------------------------------------------
// Key-value store

class KvTest : public ServerTest {
 protected:
  void SetUp() override {
    StartServer(Options(2));
    peer_ = std::make_unique<RawPeer>(Authenticated());  // KV needs no REGISTER
  }

  wire::KvReply Call(RawPeer& peer, wire::KvRequest request) {
    request.set_request_id(++next_id_);
    EXPECT_OK(peer.Send(wire::KV_REQUEST, request));
    wire::KvReply reply;
    EXPECT_OK(peer.Read(wire::KV_REPLY, &reply, Soon()));
    EXPECT_EQ(reply.request_id(), next_id_);
    return reply;
  }

  static wire::KvRequest Op(wire::KvRequest::Op op, const std::string& key,
                            const std::string& value = "") {
    wire::KvRequest request;
    request.set_op(op);
    request.set_key(key);
    request.set_value(value);
    return request;
  }

  std::unique_ptr<RawPeer> peer_;
  uint64_t next_id_ = 0;
};

TEST_F(KvTest, SetGetDelete) {
  wire::KvReply reply = Call(*peer_, Op(wire::KvRequest::GET, "ckpt"));
  EXPECT_FALSE(reply.found());
  EXPECT_EQ(reply.code(), wire::NOT_FOUND);

  reply = Call(*peer_, Op(wire::KvRequest::SET, "ckpt", std::string("/tmp/\0x", 7)));
  EXPECT_EQ(reply.code(), wire::ERROR_CODE_UNSPECIFIED) << reply.message();
  reply = Call(*peer_, Op(wire::KvRequest::GET, "ckpt"));
  EXPECT_TRUE(reply.found());
  EXPECT_EQ(reply.value(), std::string("/tmp/\0x", 7));

  reply = Call(*peer_, Op(wire::KvRequest::DELETE, "ckpt"));
  EXPECT_TRUE(reply.found());
  reply = Call(*peer_, Op(wire::KvRequest::DELETE, "ckpt"));
  EXPECT_FALSE(reply.found());
  reply = Call(*peer_, Op(wire::KvRequest::GET, "ckpt"));
  EXPECT_FALSE(reply.found());
}

TEST_F(KvTest, AddCounts) {
  wire::KvRequest add = Op(wire::KvRequest::ADD, "n");
  add.set_delta(5);
  EXPECT_EQ(Call(*peer_, add).number(), 5);
  add.set_delta(-2);
  EXPECT_EQ(Call(*peer_, add).number(), 3);
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::GET, "n")).value(), "3");

  Call(*peer_, Op(wire::KvRequest::SET, "text", "abc"));
  add.set_key("text");
  wire::KvReply reply = Call(*peer_, add);
  EXPECT_EQ(reply.code(), wire::MALFORMED);
  EXPECT_THAT(reply.message(), HasSubstr("'abc' is not a decimal integer"));
}

TEST_F(KvTest, CompareSet) {
  wire::KvRequest cas = Op(wire::KvRequest::COMPARE_SET, "leader", "a");
  // Absent matches an empty expected value.
  wire::KvReply reply = Call(*peer_, cas);
  EXPECT_EQ(reply.value(), "a");
  // Absent does not match "x", and a stored "a" does not match "" either.
  cas.set_value("b");
  EXPECT_EQ(Call(*peer_, cas).value(), "a");
  cas.set_expected("x");
  EXPECT_EQ(Call(*peer_, cas).value(), "a");
  cas.set_expected("a");
  EXPECT_EQ(Call(*peer_, cas).value(), "b");
  wire::KvRequest absent = Op(wire::KvRequest::COMPARE_SET, "other", "v");
  absent.set_expected("x");
  reply = Call(*peer_, absent);
  EXPECT_FALSE(reply.found());
  EXPECT_EQ(reply.value(), "");
}

TEST_F(KvTest, WaitIsWokenBySetFromAnotherConnection) {
  wire::KvRequest wait;
  wait.set_op(wire::KvRequest::WAIT);
  wait.add_keys("a");
  wait.add_keys("b");
  wait.set_deadline_ms(60'000);
  wait.set_request_id(77);
  ASSERT_OK(peer_->Send(wire::KV_REQUEST, wait));

  RawPeer other = Authenticated();
  Call(other, Op(wire::KvRequest::SET, "a", "1"));
  // Still waiting for "b": the connection answers nothing yet.
  wire::KvRequest add = Op(wire::KvRequest::ADD, "b");
  add.set_delta(1);
  Call(other, add);

  wire::KvReply reply;
  ASSERT_OK(peer_->Read(wire::KV_REPLY, &reply, Soon()));
  EXPECT_EQ(reply.request_id(), 77u);
  EXPECT_EQ(reply.code(), wire::ERROR_CODE_UNSPECIFIED) << reply.message();
}

TEST_F(KvTest, WaitForKeysAlreadyThereAnswersAtOnce) {
  Call(*peer_, Op(wire::KvRequest::SET, "a", "1"));
  wire::KvRequest wait;
  wait.set_op(wire::KvRequest::WAIT);
  wait.add_keys("a");
  wait.set_deadline_ms(60'000);
  EXPECT_EQ(Call(*peer_, wait).code(), wire::ERROR_CODE_UNSPECIFIED);
}

TEST_F(KvTest, WaitTimesOutNamingMissingKeys) {
  Call(*peer_, Op(wire::KvRequest::SET, "present", "1"));
  wire::KvRequest wait;
  wait.set_op(wire::KvRequest::WAIT);
  wait.add_keys("present");
  wait.add_keys("absent");
  wait.set_deadline_ms(100);
  wire::KvReply reply = Call(*peer_, wait);
  EXPECT_EQ(reply.code(), wire::TIMEOUT);
  EXPECT_EQ(reply.message(), "WAIT timed out after 100 ms; keys still missing: 'absent'");
  // The connection stays usable.
  EXPECT_TRUE(Call(*peer_, Op(wire::KvRequest::GET, "present")).found());
}

TEST_F(KvTest, WaiterThatDisconnectsIsForgotten) {
  {
    RawPeer waiter = Authenticated();
    wire::KvRequest wait;
    wait.set_op(wire::KvRequest::WAIT);
    wait.add_keys("k");
    wait.set_deadline_ms(60'000);
    ASSERT_OK(waiter.Send(wire::KV_REQUEST, wait));
  }
  // Whether the server parked the WAIT before seeing the close or not, a
  // later SET must not write to the closed connection or crash.
  Call(*peer_, Op(wire::KvRequest::SET, "k", "v"));
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::GET, "k")).value(), "v");
}

TEST_F(KvTest, OversizeKeyIsAnErrorReplyNotAClose) {
  wire::KvReply reply = Call(*peer_, Op(wire::KvRequest::SET, std::string(5000, 'k'), "v"));
  EXPECT_EQ(reply.code(), wire::MALFORMED);
  EXPECT_THAT(reply.message(), HasSubstr("key of 5000 bytes is over the limit of 4096"));
  reply = Call(*peer_, Op(wire::KvRequest::SET, "k", "v"));
  EXPECT_EQ(reply.code(), wire::ERROR_CODE_UNSPECIFIED);
}

TEST_F(KvTest, KvBeforeAuthIsRejected) {
  RawPeer bad = Connect();
  ASSERT_OK(bad.Send(wire::KV_REQUEST, Op(wire::KvRequest::GET, "k")));
  ExpectErrorAndClose(bad, wire::NOT_AUTHENTICATED, "KV_REQUEST before authentication");
}

// The store's bounds (#15): each refusal is an answer to that client, whose
// connection stays usable, and the store is unchanged by it.
class KvLimitTest : public KvTest {
 protected:
  void SetUp() override {}
  void Start(RendezvousServerOptions options) {
    StartServer(std::move(options));
    peer_ = std::make_unique<RawPeer>(Authenticated());
  }
  static wire::KvRequest Wait(const std::string& key) {
    wire::KvRequest wait;
    wait.set_op(wire::KvRequest::WAIT);
    wait.add_keys(key);
    wait.set_deadline_ms(60'000);
    return wait;
  }
};

TEST_F(KvLimitTest, KeysAreCapped) {
  RendezvousServerOptions options = Options(1);
  options.max_kv_keys = 2;
  Start(std::move(options));
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "a", "1")).code(), wire::ERROR_CODE_UNSPECIFIED);
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "b", "1")).code(), wire::ERROR_CODE_UNSPECIFIED);
  wire::KvReply reply = Call(*peer_, Op(wire::KvRequest::SET, "c", "1"));
  EXPECT_EQ(reply.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(reply.message(),
            "the key-value store holds 2 keys, its limit; SET of new key 'c' refused");
  wire::KvRequest add = Op(wire::KvRequest::ADD, "d");
  add.set_delta(1);
  EXPECT_EQ(Call(*peer_, add).code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_FALSE(Call(*peer_, Op(wire::KvRequest::GET, "c")).found());
  // Keys already there still change; a deleted one frees its place.
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "a", "2")).code(), wire::ERROR_CODE_UNSPECIFIED);
  EXPECT_TRUE(Call(*peer_, Op(wire::KvRequest::DELETE, "b")).found());
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "c", "1")).code(), wire::ERROR_CODE_UNSPECIFIED);
}

TEST_F(KvLimitTest, BytesAreCapped) {
  RendezvousServerOptions options = Options(1);
  options.max_kv_bytes = 1000;  // each key is charged its bytes and 64 more
  Start(std::move(options));
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "a", std::string(800, 'v'))).code(),
            wire::ERROR_CODE_UNSPECIFIED);  // 865 bytes
  wire::KvReply reply = Call(*peer_, Op(wire::KvRequest::SET, "b", std::string(100, 'v')));
  EXPECT_EQ(reply.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(reply.message(),
            "the key-value store is full: 865 of 1000 bytes used; SET of 'b' (165 bytes) refused");
  wire::KvRequest cas = Op(wire::KvRequest::COMPARE_SET, "a", std::string(950, 'w'));
  cas.set_expected(std::string(800, 'v'));
  EXPECT_EQ(Call(*peer_, cas).code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::GET, "a")).value(), std::string(800, 'v'));
  // Smaller values always fit; what they free is free again.
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "a", "x")).code(), wire::ERROR_CODE_UNSPECIFIED);
  EXPECT_EQ(Call(*peer_, Op(wire::KvRequest::SET, "b", std::string(100, 'v'))).code(),
            wire::ERROR_CODE_UNSPECIFIED);
  // Parked WAITs' keys count too.
  wire::KvReply wait = Call(*peer_, Wait(std::string(900, 'k')));
  EXPECT_EQ(wait.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_THAT(wait.message(), HasSubstr("WAIT for 1 keys (964 bytes) refused"));
}

TEST_F(KvLimitTest, ParkedWaitsAreCappedPerConnectionAndOverall) {
  RendezvousServerOptions options = Options(1);
  options.max_kv_waits_per_connection = 2;
  options.max_kv_waits = 3;
  Start(std::move(options));
  for (uint64_t id : {101, 102}) {
    wire::KvRequest wait = Wait("go");
    wait.set_request_id(id);
    ASSERT_OK(peer_->Send(wire::KV_REQUEST, wait));
  }
  // The third on this connection is answered at once (the two parked ones
  // are not), and the connection goes on.
  wire::KvReply reply = Call(*peer_, Wait("go"));
  EXPECT_EQ(reply.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(reply.message(), "this connection has 2 WAITs parked, its limit; WAIT refused");

  RawPeer other = Authenticated();
  wire::KvRequest third = Wait("go");
  third.set_request_id(201);
  ASSERT_OK(other.Send(wire::KV_REQUEST, third));
  RawPeer late = Authenticated();
  reply = Call(late, Wait("go"));
  EXPECT_EQ(reply.code(), wire::RESOURCE_EXHAUSTED);
  EXPECT_EQ(reply.message(), "3 WAITs are parked, the server's limit; WAIT refused");

  // The parked ones are all still there, and all answered.
  EXPECT_EQ(Call(late, Op(wire::KvRequest::SET, "go", "1")).code(), wire::ERROR_CODE_UNSPECIFIED);
  std::set<uint64_t> answered;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(peer_->Read(wire::KV_REPLY, &reply, Soon()));
    EXPECT_EQ(reply.code(), wire::ERROR_CODE_UNSPECIFIED);
    answered.insert(reply.request_id());
  }
  ASSERT_OK(other.Read(wire::KV_REPLY, &reply, Soon()));
  answered.insert(reply.request_id());
  EXPECT_EQ(answered, (std::set<uint64_t>{101, 102, 201}));
  // Answered waits free their places.
  EXPECT_EQ(Call(*peer_, Wait("go")).code(), wire::ERROR_CODE_UNSPECIFIED);
}

}  // namespace
}  // namespace drover

// RendezvousClient against a scripted fake server on a loopback socket (the
// protocol seen from the client's side), and end to end against the real
// RendezvousServer.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "drover/rendezvous.h"
#include "testing/status_matchers.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Generous: these bound a broken test, they never measure anything.
constexpr Milliseconds kLong{20'000};

Deadline Soon() {
  return Clock::now() + kLong;
}

ClusterToken TestToken(unsigned char fill = 7) {
  ClusterToken token;
  token.bytes.assign(wire::kTokenBytes, fill);
  return token;
}

wire::Token WireToken(const ClusterToken& token) {
  wire::Token out;
  std::copy(token.bytes.begin(), token.bytes.end(), out.begin());
  return out;
}

// One accepted connection of the fake server, with blocking helpers. After
// Handshake() it seals what it sends and checks what it reads.
class FakeConnection {
 public:
  explicit FakeConnection(int fd) : fd_(fd), reader_(wire::kClientMaxFrameBytes) {}
  ~FakeConnection() { ::close(fd_); }

  // The next frame, or nullopt at EOF, error or after kLong.
  std::optional<wire::Frame> Read() {
    Deadline deadline = Soon();
    for (;;) {
      wire::Frame frame;
      wire::FrameError error;
      switch (reader_.Next(&frame, &error)) {
        case wire::FrameReader::Step::kFrame:
          if (opener_ && !opener_->Open(frame, &error)) {
            ADD_FAILURE() << "fake server read a frame that does not open: " << error.message;
            return std::nullopt;
          }
          return frame;
        case wire::FrameReader::Step::kError:
          ADD_FAILURE() << "fake server read a bad frame: " << error.message;
          return std::nullopt;
        case wire::FrameReader::Step::kNeedMore:
          break;
      }
      if (Clock::now() > deadline) return std::nullopt;
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      char buffer[4096];
      ssize_t got = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (got <= 0) return std::nullopt;
      reader_.Append(std::string_view(buffer, got));
    }
  }

  // Reads a frame of `type` into `body`; false (and a test failure) otherwise.
  bool Read(wire::MessageType type, google::protobuf::MessageLite* body) {
    std::optional<wire::Frame> frame = Read();
    if (!frame) {
      ADD_FAILURE() << "fake server expected " << wire::MessageType_Name(type) << ", got EOF";
      return false;
    }
    if (frame->type() != type) {
      ADD_FAILURE() << "fake server expected " << wire::MessageType_Name(type) << ", got "
                    << wire::MessageType_Name(frame->type());
      return false;
    }
    EXPECT_TRUE(body->ParseFromString(frame->body));
    return true;
  }

  void SendRaw(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return;  // the client went away; the test's checks will say so
      bytes.remove_prefix(sent);
    }
  }
  void Send(wire::MessageType type, const google::protobuf::MessageLite& body) {
    SendRaw(sealer_ ? sealer_->Seal(type, body) : wire::EncodeFrame(type, body));
  }
  void SendError(wire::ErrorCode code, std::string_view message) {
    SendRaw(sealer_ ? sealer_->SealError(code, message) : wire::EncodeError(code, message));
  }
  // The next sealed frame, not sent (to alter or send twice).
  std::string Seal(wire::MessageType type, const google::protobuf::MessageLite& body) {
    return sealer_->Seal(type, body);
  }

  // The server's half of the handshake, then the session. With
  // `forge_proof`, AUTH_OK carries a mac made without the token. A client
  // with a node credential is checked against the key derived from `token`.
  bool Handshake(const ClusterToken& token, bool forge_proof = false) {
    wire::Hello hello;
    if (!Read(wire::HELLO, &hello)) return false;
    EXPECT_EQ(hello.client_nonce().size(), wire::kNonceBytes);
    hello_ = hello;
    std::string server_nonce(wire::kNonceBytes, 's');
    wire::Challenge challenge;
    challenge.set_server_nonce(server_nonce);
    Send(wire::CHALLENGE, challenge);
    wire::Auth auth;
    if (!Read(wire::AUTH, &auth)) return false;
    wire::Token key = WireToken(token);
    if (!hello.executor_id().empty()) {
      Result<wire::Token> node_key = wire::DeriveNodeKey(key, hello.executor_id());
      EXPECT_OK(node_key);
      key = *node_key;
    }
    EXPECT_EQ(auth.mac(), wire::ClientMac(key, server_nonce, hello.client_nonce()));
    wire::AuthOk ok;
    ok.set_mac(forge_proof ? std::string(wire::kMacBytes, 'x')
                           : wire::ServerMac(key, hello.client_nonce(), server_nonce));
    Send(wire::AUTH_OK, ok);
    Result<wire::Token> session = wire::DeriveSessionKey(key, hello.client_nonce(), server_nonce);
    EXPECT_OK(session);
    sealer_.emplace(*session, wire::Direction::kServerToClient);
    opener_.emplace(*session, wire::Direction::kClientToServer);
    reader_.set_sealed(true);
    return true;
  }

  const wire::Hello& hello() const { return hello_; }

  // Reads until the client closes the connection.
  void WaitForClose() {
    while (Read()) {
    }
  }

 private:
  int fd_;
  wire::FrameReader reader_;
  wire::Hello hello_;
  std::optional<wire::FrameSealer> sealer_;
  std::optional<wire::FrameOpener> opener_;
};

// A listening socket on 127.0.0.1 (or ::1) whose thread accepts one
// connection and runs a script on it, then closes it.
class FakeServer {
 public:
  using Script = std::function<void(FakeConnection&)>;

  // port 0: an ephemeral port. nullptr if the address family is unavailable.
  static std::unique_ptr<FakeServer> Start(Script script, uint16_t port = 0, bool ipv6 = false) {
    int fd = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage storage{};
    socklen_t length;
    if (ipv6) {
      auto* addr = reinterpret_cast<sockaddr_in6*>(&storage);
      addr->sin6_family = AF_INET6;
      addr->sin6_addr = in6addr_loopback;
      addr->sin6_port = htons(port);
      length = sizeof(*addr);
    } else {
      auto* addr = reinterpret_cast<sockaddr_in*>(&storage);
      addr->sin_family = AF_INET;
      addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr->sin_port = htons(port);
      length = sizeof(*addr);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0 || ::listen(fd, 8) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) {
      ::close(fd);
      return nullptr;
    }
    uint16_t bound = ipv6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port)
                          : ntohs(reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
    return std::unique_ptr<FakeServer>(new FakeServer(fd, bound, std::move(script)));
  }

  ~FakeServer() {
    thread_.join();
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  FakeServer(int fd, uint16_t port, Script script) : listen_fd_(fd), port_(port) {
    thread_ = std::thread([this, script = std::move(script)] {
      pollfd pfd{listen_fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(kLong.count())) != 1) return;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      FakeConnection connection(fd);
      script(connection);
    });
  }

  int listen_fd_;
  uint16_t port_;
  std::thread thread_;
};

// A port on 127.0.0.1 that nothing listens on (bound, then released).
uint16_t UnusedPort() {
  auto server = FakeServer::Start([](FakeConnection&) {});
  uint16_t port = server->port();
  // Let the fake's accept thread finish by connecting once.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::close(fd);
  return port;
}

RendezvousClientOptions Options(const std::string& address) {
  RendezvousClientOptions options;
  options.address = address;
  options.credential = Credential::Cluster(TestToken());
  options.name = "client test";
  options.initial_backoff = Milliseconds(5);
  options.max_backoff = Milliseconds(50);
  return options;
}

// Two placed nodes as the server lays them out: chief:0 on host-a (rank 0,
// with a second port for torch's store) and worker:0 on host-b (rank 1).
wire::SharedCluster TwoNodes() {
  wire::SharedCluster shared;
  shared.set_cluster_id("cluster-1");
  wire::NodeInfo* a = shared.add_nodes();
  a->set_executor_id("0");
  a->set_host("host-a");
  a->add_ports(2222);
  a->add_ports(2230);
  a->set_job_name("chief");
  a->set_task_index(0);
  wire::NodeInfo* b = shared.add_nodes();
  b->set_executor_id("1");
  b->set_host("host-b");
  b->add_ports(2223);
  b->add_gpus(3);
  b->set_job_name("worker");
  b->set_task_index(0);
  // The columns, delta-coded where they count up: ranks 0 and 1, hosts 0
  // and 1, each the first of its job.
  wire::Placements* columns = shared.mutable_placements();
  for (int node : {0, 1}) {
    columns->add_chief(node == 0);
    columns->add_ranked(true);
    columns->add_rank_step(node);
    columns->add_local_rank(0);
    columns->add_local_world_size(1);
    columns->add_group_rank_step(node);
    columns->add_role_rank_step(0);
    columns->add_role_world_size(1);
  }
  shared.set_world_size(2);
  shared.set_group_world_size(2);
  shared.set_master(0);
  return shared;
}

// `shared` zlib-compressed into the CLUSTER of the node at `position`.
wire::Cluster MakeCluster(uint32_t position, const wire::SharedCluster& shared = TwoNodes()) {
  std::string plain = shared.SerializeAsString();
  std::string compressed(::compressBound(plain.size()), '\0');
  uLongf length = compressed.size();
  EXPECT_EQ(::compress2(reinterpret_cast<Bytef*>(compressed.data()), &length,
                        reinterpret_cast<const Bytef*>(plain.data()), plain.size(), 6),
            Z_OK);
  compressed.resize(length);
  wire::Cluster cluster;
  cluster.set_position(position);
  cluster.set_heartbeat_interval_ms(250);
  cluster.set_shared(compressed);
  cluster.set_shared_uncompressed_bytes(plain.size());
  return cluster;
}

// ---------------------------------------------------------------------------
// Connecting.

TEST(RendezvousClientTest, ConnectsAndAuthenticates) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    peer.WaitForClose();
  });
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
}

TEST(RendezvousClientTest, RetriesUntilTheListenerAppears) {
  uint16_t port = UnusedPort();
  Result<std::unique_ptr<RendezvousClient>> client = Status::Internal("not run");
  std::thread connecting([&] {
    client = RendezvousClient::Connect(Options("127.0.0.1:" + std::to_string(port)), Soon());
  });
  // Let a few attempts be refused first.
  std::this_thread::sleep_for(Milliseconds(200));
  auto server = FakeServer::Start(
      [](FakeConnection& peer) {
        ASSERT_TRUE(peer.Handshake(TestToken()));
        peer.WaitForClose();
      },
      port);
  ASSERT_NE(server, nullptr) << "port " << port << " was taken meanwhile";
  connecting.join();
  EXPECT_OK(client);
  client = Status::Internal("closed");  // lets the fake see EOF before it is joined
}

TEST(RendezvousClientTest, DeadlineErrorNamesTheAddress) {
  uint16_t port = UnusedPort();
  std::string address = "127.0.0.1:" + std::to_string(port);
  auto client = RendezvousClient::Connect(Options(address), Clock::now() + Milliseconds(300));
  EXPECT_THAT(client,
              StatusIs(Status::Code::kDeadlineExceeded,
                       ::testing::AllOf(HasSubstr("could not connect to " + address),
                                        HasSubstr("Connection refused"), HasSubstr("attempts"))));
}

TEST(RendezvousClientTest, ConnectsOverIpv6) {
  auto server = FakeServer::Start(
      [](FakeConnection& peer) {
        ASSERT_TRUE(peer.Handshake(TestToken()));
        peer.WaitForClose();
      },
      0, /*ipv6=*/true);
  if (server == nullptr) GTEST_SKIP() << "no IPv6 loopback here";
  ASSERT_OK_AND_ASSIGN(
      auto client,
      RendezvousClient::Connect(Options("[::1]:" + std::to_string(server->port())), Soon()));
}

TEST(RendezvousClientTest, RefusesMalformedAddressesAndTokens) {
  for (std::string address : {"no-port", "host:", ":123", "host:99999", "::1:80", "[::1]80"}) {
    EXPECT_THAT(RendezvousClient::Connect(Options(address), Soon()),
                StatusIs(Status::Code::kInvalidArgument, HasSubstr(address)))
        << address;
  }
  RendezvousClientOptions options = Options("127.0.0.1:1");
  options.credential.key.resize(5);
  EXPECT_THAT(RendezvousClient::Connect(options, Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("32 bytes")));
}

TEST(RendezvousClientTest, ServerWithoutTheTokenIsRefused) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    peer.Handshake(TestToken(), /*forge_proof=*/true);
    peer.WaitForClose();
  });
  EXPECT_THAT(RendezvousClient::Connect(Options(server->address()), Soon()),
              StatusIs(Status::Code::kPermissionDenied,
                       HasSubstr("server failed to prove it holds the cluster token")));
}

TEST(RendezvousClientTest, WrongTokenIsPermissionDeniedWithTheServersMessage) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    wire::Hello hello;
    ASSERT_TRUE(peer.Read(wire::HELLO, &hello));
    wire::Challenge challenge;
    challenge.set_server_nonce(std::string(wire::kNonceBytes, 'n'));
    peer.Send(wire::CHALLENGE, challenge);
    wire::Auth auth;
    ASSERT_TRUE(peer.Read(wire::AUTH, &auth));
    peer.SendError(wire::AUTH_FAILED, "authentication failed: wrong token");
  });
  EXPECT_THAT(
      RendezvousClient::Connect(Options(server->address()), Soon()),
      StatusIs(Status::Code::kPermissionDenied, HasSubstr("authentication failed: wrong token")));
}

TEST(RendezvousClientTest, ServerClosingDuringHandshakeIsUnavailable) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    wire::Hello hello;
    ASSERT_TRUE(peer.Read(wire::HELLO, &hello));
  });
  EXPECT_THAT(RendezvousClient::Connect(Options(server->address()), Soon()),
              StatusIs(Status::Code::kUnavailable,
                       HasSubstr("rendezvous server " + server->address() +
                                 " closed the connection while waiting for CHALLENGE")));
}

TEST(RendezvousClientTest, GarbageFromTheServerIsRefused) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    wire::Hello hello;
    ASSERT_TRUE(peer.Read(wire::HELLO, &hello));
    peer.SendRaw("HTTP/1.1 400 Bad Request\r\n\r\n");
    // The client answers with one ERROR frame before closing.
    std::optional<wire::Frame> reply = peer.Read();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type(), wire::ERROR);
  });
  EXPECT_THAT(RendezvousClient::Connect(Options(server->address()), Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("not a drover frame")));
}

TEST(RendezvousClientTest, ErrorTextBeforeAuthenticationIsEscaped) {
  // Whatever listens on the address may write anything; it reaches a terminal.
  auto server = FakeServer::Start([](FakeConnection& peer) {
    wire::Hello hello;
    ASSERT_TRUE(peer.Read(wire::HELLO, &hello));
    peer.SendError(wire::STOPPED, "\x1b]0;owned\x07\x1b[2Jgone\r\n");
  });
  Result<std::unique_ptr<RendezvousClient>> client =
      RendezvousClient::Connect(Options(server->address()), Soon());
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("\\x1b]0;owned\\x07\\x1b[2Jgone\\x0d\\x0a"));
  EXPECT_EQ(client.status().message().find('\x1b'), std::string::npos);
}

TEST(RendezvousClientTest, ANodeCredentialNamesItsExecutorInHello) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));  // checks the mac under node 3's key
    EXPECT_EQ(peer.hello().executor_id(), "3");
    wire::KvRequest request;
    ASSERT_TRUE(peer.Read(wire::KV_REQUEST, &request));
    wire::KvReply reply;
    reply.set_request_id(request.request_id());
    peer.Send(wire::KV_REPLY, reply);
    peer.WaitForClose();
  });
  RendezvousClientOptions options = Options(server->address());
  ASSERT_OK_AND_ASSIGN(options.credential, Credential::ForNode(TestToken(), "3"));
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(options, Soon()));
  EXPECT_OK(client->Set("k", "v", Soon()));
}

TEST(RendezvousClientTest, TheStatusKeyIsRefusedBeforeConnecting) {
  RendezvousClientOptions options = Options("127.0.0.1:1");
  ASSERT_OK_AND_ASSIGN(options.credential, Credential::ForStatus(TestToken()));
  EXPECT_THAT(RendezvousClient::Connect(options, Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("status key")));
}

TEST(RendezvousClientTest, AnAlteredFrameFromTheServerBreaksTheConnection) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Control control;
    ASSERT_TRUE(peer.Read(wire::CONTROL, &control));
    wire::State state;
    state.set_phase("formed");
    std::string frame = peer.Seal(wire::STATE, state);
    frame[frame.size() - 1] ^= 0x01;  // the MAC's last byte
    peer.SendRaw(frame);
    // The client says why before it closes, sealed as it should be.
    wire::Error error;
    ASSERT_TRUE(peer.Read(wire::ERROR, &error));
    EXPECT_EQ(error.code(), wire::FRAME_AUTH_FAILED);
    EXPECT_THAT(error.message(), HasSubstr("frame MAC check failed (STATE, sequence 0)"));
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->QueryState(Soon()),
              StatusIs(Status::Code::kPermissionDenied,
                       HasSubstr("a frame failed its authentication while this client waited for "
                                 "STATE: frame MAC check failed")));
  EXPECT_THAT(client->Set("k", "v", Soon()),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("MAC")));
}

// ---------------------------------------------------------------------------
// Registering.

TEST(RendezvousClientTest, RegisterReceivesTheCluster) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    EXPECT_EQ(request.node().executor_id(), "1");
    EXPECT_EQ(request.node().host(), "host-b");
    EXPECT_THAT(request.node().ports(), ElementsAre(2223u, 2224u));
    EXPECT_EQ(request.node().pid(), 42);
    EXPECT_THAT(request.node().gpus(), ElementsAre(3));
    EXPECT_EQ(request.node().agent_address(), "host-b:7000");
    wire::Registered progress;
    progress.set_registered(1);
    progress.set_expected(2);
    peer.Send(wire::REGISTERED, progress);
    peer.Send(wire::CLUSTER, MakeCluster(1));
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  NodeInfo node;
  node.executor_id = "1";
  node.host = "host-b";
  node.ports = {2223, 2224};
  node.pid = 42;
  node.gpus = {3};
  node.agent_address = "host-b:7000";
  ASSERT_OK_AND_ASSIGN(FormedCluster cluster, client->Register(node, Soon()));
  EXPECT_EQ(cluster.cluster_id, "cluster-1");
  EXPECT_EQ(cluster.heartbeat_interval, Milliseconds(250));
  ASSERT_OK_AND_ASSIGN(std::string chief, cluster.spec.task_address("chief", 0));
  EXPECT_EQ(chief, "host-a:2222");
  ASSERT_EQ(cluster.nodes.size(), 2u);
  EXPECT_EQ(cluster.nodes[1].executor_id, "1");
  EXPECT_EQ(cluster.nodes[1].job_name, "worker");
  EXPECT_THAT(cluster.nodes[1].gpus, ElementsAre(3));
  // The placement as sent, the cluster-wide parts filled in.
  ASSERT_NE(cluster.own(), nullptr);
  const Placement& own = *cluster.own();
  EXPECT_EQ(own.Task(), "worker:0");
  EXPECT_FALSE(own.chief);
  EXPECT_THAT(own.gpus, ElementsAre(3));
  ASSERT_TRUE(own.rank.has_value());
  EXPECT_EQ(own.rank->rank, 1);
  EXPECT_EQ(own.rank->world_size, 2);
  EXPECT_EQ(own.rank->group_world_size, 2);
  EXPECT_EQ(own.rank->master_host, "host-a");
  EXPECT_EQ(own.rank->master_port, 2222);
  EXPECT_EQ(own.rank->store_port, 2230);
  EXPECT_EQ(own.feed, (FeedShare{1, 2}));
  EXPECT_TRUE(cluster.placements[0].chief);
}

// Executor 1 on host-b registers; what it got back.
Status RegisterExecutor1(RendezvousClient& client) {
  NodeInfo node;
  node.executor_id = "1";
  node.host = "host-b";
  node.ports = {2223};
  return client.Register(node, Soon()).status();
}

// A server that contradicts itself is named, never trusted: each case is one
// CLUSTER frame the client must refuse with what is wrong in it.
TEST(RendezvousClientTest, ClusterWithBadPlacementsIsRefused) {
  struct Case {
    const char* name;
    uint32_t position;
    std::function<void(wire::SharedCluster&)> spoil;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"position", 2, [](wire::SharedCluster&) {}, "position 2"},
      {"count", 1,
       [](wire::SharedCluster& s) { s.mutable_placements()->mutable_rank_step()->RemoveLast(); },
       "2 nodes but placement columns of other lengths"},
      {"rank", 1, [](wire::SharedCluster& s) { s.mutable_placements()->set_rank_step(1, 5); },
       "rank 5 of 2"},
      {"not rank 0", 1, [](wire::SharedCluster& s) { s.set_master(1); }, "not rank 0"},
      {"master", 1, [](wire::SharedCluster& s) { s.set_master(9); }, "master is node 9"},
      {"twice", 1, [](wire::SharedCluster& s) { s.mutable_nodes(1)->set_job_name("chief"); },
       "placed twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    wire::SharedCluster shared = TwoNodes();
    c.spoil(shared);
    wire::Cluster frame = MakeCluster(c.position, shared);
    auto server = FakeServer::Start([&frame](FakeConnection& peer) {
      ASSERT_TRUE(peer.Handshake(TestToken()));
      wire::Register request;
      ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
      peer.Send(wire::CLUSTER, frame);
      peer.WaitForClose();
    });
    ASSERT_NE(server, nullptr);
    ASSERT_OK_AND_ASSIGN(auto client,
                         RendezvousClient::Connect(Options(server->address()), Soon()));
    EXPECT_THAT(RegisterExecutor1(*client),
                StatusIs(Status::Code::kInvalidArgument, HasSubstr(c.says)));
  }
}

// A frame without the node list is checked as closely as one with it.
TEST(RendezvousClientTest, ClusterWithoutTheNodeListThatDoesNotFitIsRefused) {
  struct Case {
    const char* name;
    std::function<void(wire::SharedCluster&, wire::Cluster&)> spoil;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"position", [](wire::SharedCluster&, wire::Cluster& c) { c.set_position(2); },
       "position 2 is not among the 2 nodes"},
      {"jobs", [](wire::SharedCluster& s, wire::Cluster&) { s.mutable_jobs(0)->set_tasks(5); },
       "the jobs have 6 tasks but the cluster 2 nodes"},
      {"rank", [](wire::SharedCluster&, wire::Cluster& c) { c.mutable_placement()->set_rank(2); },
       "rank 2 of 2"},
      {"master", [](wire::SharedCluster& s, wire::Cluster&) { s.clear_master_node(); },
       "rank 0 is not named"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    wire::SharedCluster summary;
    summary.set_cluster_id("cluster-1");
    summary.set_node_count(2);
    summary.set_world_size(2);
    summary.set_group_world_size(2);
    for (const char* job : {"chief", "worker"}) {
      wire::JobSize* size = summary.add_jobs();
      size->set_job_name(job);
      size->set_tasks(1);
    }
    *summary.mutable_master_node() = TwoNodes().nodes(0);
    wire::Cluster own;
    own.set_position(1);
    *own.mutable_node() = TwoNodes().nodes(1);
    own.mutable_placement()->set_ranked(true);
    own.mutable_placement()->set_rank(1);
    own.mutable_placement()->set_local_world_size(1);
    own.mutable_placement()->set_group_rank(1);
    own.mutable_placement()->set_role_world_size(1);
    c.spoil(summary, own);
    wire::Cluster frame = MakeCluster(own.position(), summary);
    frame.MergeFrom(own);
    auto server = FakeServer::Start([&frame](FakeConnection& peer) {
      ASSERT_TRUE(peer.Handshake(TestToken()));
      wire::Register request;
      ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
      EXPECT_EQ(request.node_list(), wire::NODE_LIST_NEVER);
      peer.Send(wire::CLUSTER, frame);
      peer.WaitForClose();
    });
    ASSERT_NE(server, nullptr);
    RendezvousClientOptions options = Options(server->address());
    options.node_list = NodeList::kNever;
    ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(options, Soon()));
    EXPECT_THAT(RegisterExecutor1(*client),
                StatusIs(Status::Code::kInvalidArgument, HasSubstr(c.says)));
  }
}

TEST(RendezvousClientTest, ClusterFrameOverTheLimitIsRefused) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    wire::Cluster cluster = MakeCluster(1);
    cluster.set_shared(std::string(4096, 'z'));
    peer.Send(wire::CLUSTER, cluster);
    peer.WaitForClose();
  });
  RendezvousClientOptions options = Options(server->address());
  options.max_frame_bytes = 1024;
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(options, Soon()));
  EXPECT_THAT(client->Register(NodeInfo{.executor_id = "1"}, Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("over the limit of 1024")));
  // The connection is unusable afterwards, and says why.
  EXPECT_THAT(client->Set("k", "v", Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("over the limit")));
}

TEST(RendezvousClientTest, ClusterExpandingPastTheLimitIsRefused) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    wire::Cluster cluster = MakeCluster(1);
    cluster.set_shared_uncompressed_bytes(uint64_t{1} << 40);
    peer.Send(wire::CLUSTER, cluster);
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->Register(NodeInfo{.executor_id = "1"}, Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("expands to")));
}

TEST(RendezvousClientTest, ReservationTimeoutKeepsTheServersMessage) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    peer.SendError(wire::RESERVATION_TIMEOUT,
                   "reservation timed out: 1 of 2 registered; missing worker:0");
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->Register(NodeInfo{.executor_id = "1"}, Soon()),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("missing worker:0")));
}

TEST(RendezvousClientTest, RegisteringAfterTheBarrierIsAlreadyExists) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    peer.SendError(wire::CLUSTER_FORMED,
                   "cluster already formed with 2 nodes; executor 9 was not part of it");
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->Register(NodeInfo{.executor_id = "9"}, Soon()),
              StatusIs(Status::Code::kAlreadyExists, HasSubstr("executor 9 was not part of it")));
}

TEST(RendezvousClientTest, RegisterDeadlineSaysHowManyRegistered) {
  auto server = FakeServer::Start([&](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    wire::Registered progress;
    progress.set_registered(3);
    progress.set_expected(4);
    peer.Send(wire::REGISTERED, progress);
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->Register(NodeInfo{.executor_id = "1"}, Clock::now() + Milliseconds(300)),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("3 of 4 nodes")));
}

// ---------------------------------------------------------------------------
// Control, heartbeats, the key-value store.

TEST(RendezvousClientTest, RelayedStopIsSeenByWaitForStop) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::KvRequest request;
    ASSERT_TRUE(peer.Read(wire::KV_REQUEST, &request));
    // A STOP arrives while the client waits for a KV reply: it is kept.
    wire::Control stop;
    stop.set_kind(wire::Control::STOP_NODE);
    stop.set_executor_id("1");
    peer.Send(wire::CONTROL, stop);
    wire::KvReply reply;
    reply.set_request_id(request.request_id());
    peer.Send(wire::KV_REPLY, reply);
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_OK(client->Set("k", "v", Soon()));
  ASSERT_OK_AND_ASSIGN(bool stopped, client->WaitForStop(Clock::now()));
  EXPECT_TRUE(stopped);
}

TEST(RendezvousClientTest, WaitForStopReadsUntilAStopComes) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Control stop;
    stop.set_kind(wire::Control::STOP_ALL);
    peer.Send(wire::CONTROL, stop);
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  ASSERT_OK_AND_ASSIGN(bool stopped, client->WaitForStop(Soon()));
  EXPECT_TRUE(stopped);
}

TEST(RendezvousClientTest, WaitForStopIsFalseAtTheDeadline) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  ASSERT_OK_AND_ASSIGN(bool stopped, client->WaitForStop(Clock::now() + Milliseconds(50)));
  EXPECT_FALSE(stopped);
}

// The agent's STOP watcher waits with no deadline (an idle agent must not
// wake); its wake fd ends the wait, and a STOP still comes through after it.
TEST(RendezvousClientTest, WaitForStopEndsWhenItsWakeFdIsReadable) {
  std::atomic<bool> send_stop{false};
  auto server = FakeServer::Start([&](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    while (!send_stop) std::this_thread::sleep_for(Milliseconds(5));
    wire::Control stop;
    stop.set_kind(wire::Control::STOP_ALL);
    peer.Send(wire::CONTROL, stop);
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  int wake[2];
  ASSERT_EQ(::pipe(wake), 0);
  std::thread waker([&] {
    std::this_thread::sleep_for(Milliseconds(50));
    ASSERT_EQ(::write(wake[1], "x", 1), 1);
  });
  const Clock::time_point started = Clock::now();
  ASSERT_OK_AND_ASSIGN(bool stopped, client->WaitForStop(Clock::time_point::max(), wake[0]));
  waker.join();
  EXPECT_FALSE(stopped);
  EXPECT_LT(Clock::now() - started, Milliseconds(5'000));
  send_stop = true;
  ::close(wake[0]);
  ::close(wake[1]);
  ASSERT_OK_AND_ASSIGN(stopped, client->WaitForStop(Soon()));
  EXPECT_TRUE(stopped);
}

TEST(RendezvousClientTest, ControlMessagesAndState) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Control control;
    ASSERT_TRUE(peer.Read(wire::CONTROL, &control));
    EXPECT_EQ(control.kind(), wire::Control::REPORT_ERROR);
    EXPECT_EQ(control.executor_id(), "3");
    EXPECT_EQ(control.message(), "trainer crashed");
    EXPECT_THAT(control.last_log_lines(), ElementsAre("line 1", "line 2"));
    ASSERT_TRUE(peer.Read(wire::CONTROL, &control));
    EXPECT_EQ(control.kind(), wire::Control::QUERY_STATE);
    wire::State state;
    state.set_phase("formed");
    state.set_registered(2);
    state.set_expected(2);
    wire::NodeState* node = state.add_nodes();
    node->mutable_node()->set_executor_id("3");
    node->set_alive(false);
    node->set_last_heartbeat_age_ms(6000);
    node->set_error("trainer crashed");
    peer.Send(wire::STATE, state);
    ASSERT_TRUE(peer.Read(wire::CONTROL, &control));
    EXPECT_EQ(control.kind(), wire::Control::STOP_ALL);
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_OK(client->ReportError("3", "trainer crashed", {"line 1", "line 2"}));
  ASSERT_OK_AND_ASSIGN(ClusterState state, client->QueryState(Soon()));
  EXPECT_EQ(state.phase, "formed");
  EXPECT_EQ(state.expected, 2);
  ASSERT_EQ(state.nodes.size(), 1u);
  EXPECT_EQ(state.nodes[0].node.executor_id, "3");
  EXPECT_FALSE(state.nodes[0].alive);
  EXPECT_EQ(state.nodes[0].last_heartbeat_age, Milliseconds(6000));
  EXPECT_EQ(state.nodes[0].error, "trainer crashed");
  EXPECT_OK(client->StopAll());
}

TEST(RendezvousClientTest, HeartbeatsFlowUntilTheClientIsDestroyed) {
  std::atomic<int> heartbeats{0};
  auto server = FakeServer::Start([&](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    uint64_t last = 0;
    while (std::optional<wire::Frame> frame = peer.Read()) {
      ASSERT_EQ(frame->type(), wire::HEARTBEAT);
      wire::Heartbeat heartbeat;
      ASSERT_TRUE(heartbeat.ParseFromString(frame->body));
      EXPECT_GT(heartbeat.sequence(), last);
      last = heartbeat.sequence();
      ++heartbeats;
    }
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  client->StartHeartbeats(Milliseconds(5));
  Deadline deadline = Soon();
  while (heartbeats < 3 && Clock::now() < deadline) std::this_thread::sleep_for(Milliseconds(5));
  EXPECT_GE(heartbeats, 3);
  client.reset();  // joins the heartbeat thread and closes: the fake's loop ends
}

// Registers node 1 of TwoNodes with a fake server whose CLUSTER gives
// heartbeats every 10 ms and `quiet_ms`, then hands the connection to `check`.
void HeartbeatAgainstFakeServer(uint32_t quiet_ms, std::function<HeartbeatPayload()> payload,
                                std::function<void(FakeConnection&)> check) {
  std::atomic<bool> done{false};
  auto server = FakeServer::Start([&](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::Register request;
    ASSERT_TRUE(peer.Read(wire::REGISTER, &request));
    wire::Cluster cluster = MakeCluster(1);
    cluster.set_heartbeat_interval_ms(10);
    cluster.set_quiet_heartbeat_interval_ms(quiet_ms);
    peer.Send(wire::CLUSTER, cluster);
    check(peer);
    done = true;
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  NodeInfo node;
  node.executor_id = "1";
  node.host = "host-b";
  ASSERT_OK_AND_ASSIGN(FormedCluster formed, client->Register(node, Soon()));
  EXPECT_EQ(formed.quiet_heartbeat_interval, Milliseconds(quiet_ms));
  client->StartHeartbeats(formed.heartbeat_interval, std::move(payload));
  Deadline deadline = Soon();
  while (!done && Clock::now() < deadline) std::this_thread::sleep_for(Milliseconds(5));
  EXPECT_TRUE(done);
  client.reset();
}

// A payload that announces its changes: quiet once it stays the same, then
// nothing until it changes (the quiet interval here outlasts the test), and
// the next heartbeat carries the change.
TEST(RendezvousClientTest, HeartbeatsGoQuietUntilThePayloadAnnouncesAChange) {
  int change[2];
  ASSERT_EQ(::pipe2(change, O_CLOEXEC | O_NONBLOCK), 0);
  std::atomic<double> loss{1.0};
  auto payload = [&] {
    char drained[16];
    while (::read(change[0], drained, sizeof(drained)) > 0) {
    }
    HeartbeatPayload out;
    out.metrics = {MetricValue{"loss", loss.load(), std::nullopt}};
    out.changes_announced = true;
    out.change_fd = change[0];
    return out;
  };
  HeartbeatAgainstFakeServer(600'000, payload, [&](FakeConnection& peer) {
    wire::Heartbeat heartbeat;
    ASSERT_TRUE(peer.Read(wire::HEARTBEAT, &heartbeat));
    EXPECT_FALSE(heartbeat.quiet());  // the first says what there is
    for (int i = 0; i < 100 && !heartbeat.quiet(); ++i) {
      ASSERT_TRUE(peer.Read(wire::HEARTBEAT, &heartbeat));
    }
    ASSERT_TRUE(heartbeat.quiet());
    loss = 0.25;
    ASSERT_EQ(::write(change[1], "x", 1), 1);
    ASSERT_TRUE(peer.Read(wire::HEARTBEAT, &heartbeat));
    EXPECT_FALSE(heartbeat.quiet());
    ASSERT_EQ(heartbeat.metrics_size(), 1);
    EXPECT_EQ(heartbeat.metrics(0).value(), 0.25);  // not an unchanged one before it
    ASSERT_TRUE(peer.Read(wire::HEARTBEAT, &heartbeat));
    EXPECT_TRUE(heartbeat.quiet());
    EXPECT_EQ(heartbeat.metrics(0).value(), 0.25);
  });
  ::close(change[0]);
  ::close(change[1]);
}

// Never quiet: a payload that may change unannounced (a feed's counters),
// or a cluster without a quiet interval (an older server).
TEST(RendezvousClientTest, HeartbeatsStayEveryIntervalUnlessQuietIsAllowedAndSafe) {
  auto never_quiet = [](FakeConnection& peer) {
    wire::Heartbeat heartbeat;
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(peer.Read(wire::HEARTBEAT, &heartbeat));
      EXPECT_FALSE(heartbeat.quiet()) << "heartbeat " << i;
    }
  };
  HeartbeatAgainstFakeServer(
      600'000,
      [] {
        HeartbeatPayload out;
        out.program_pid = 5;
        out.feed = FeedProgress{};
        return out;  // changes_announced: false
      },
      never_quiet);
  HeartbeatAgainstFakeServer(0, {}, never_quiet);
}

TEST(RendezvousClientTest, KeyValueRequestsMatchRepliesByRequestId) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    auto reply_to = [&](const wire::KvRequest& request, wire::KvReply reply) {
      // A stale reply to some earlier request first: the client skips it.
      wire::KvReply stale;
      stale.set_request_id(request.request_id() + 1000);
      stale.set_value("stale");
      peer.Send(wire::KV_REPLY, stale);
      reply.set_request_id(request.request_id());
      peer.Send(wire::KV_REPLY, reply);
    };
    wire::KvRequest request;
    uint64_t last_id = 0;
    auto next = [&](wire::KvRequest::Op op) {
      EXPECT_TRUE(peer.Read(wire::KV_REQUEST, &request));
      EXPECT_EQ(request.op(), op);
      EXPECT_GT(request.request_id(), last_id);
      last_id = request.request_id();
    };

    next(wire::KvRequest::SET);
    EXPECT_EQ(request.key(), "path");
    EXPECT_EQ(request.value(), std::string("/ckpt\0x", 7));
    reply_to(request, {});

    next(wire::KvRequest::GET);
    wire::KvReply found;
    found.set_found(true);
    found.set_value(std::string("/ckpt\0x", 7));
    reply_to(request, found);

    next(wire::KvRequest::GET);
    reply_to(request, {});  // not found

    next(wire::KvRequest::ADD);
    EXPECT_EQ(request.delta(), -5);
    wire::KvReply number;
    number.set_number(37);
    reply_to(request, number);

    next(wire::KvRequest::COMPARE_SET);
    EXPECT_EQ(request.expected(), "");
    EXPECT_EQ(request.value(), "mine");
    wire::KvReply stored;
    stored.set_value("theirs");
    reply_to(request, stored);

    next(wire::KvRequest::DELETE);
    wire::KvReply deleted;
    deleted.set_found(true);
    reply_to(request, deleted);

    next(wire::KvRequest::WAIT);
    EXPECT_THAT(request.keys(), ElementsAre("a", "b"));
    EXPECT_GT(request.deadline_ms(), 0u);
    EXPECT_LE(request.deadline_ms(), static_cast<uint64_t>(kLong.count()));
    wire::KvReply timeout;
    timeout.set_code(wire::TIMEOUT);
    timeout.set_message("keys still missing after 1000 ms: 'b'");
    reply_to(request, timeout);

    next(wire::KvRequest::WAIT);
    reply_to(request, {});
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_OK(client->Set("path", std::string("/ckpt\0x", 7), Soon()));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> value, client->Get("path", Soon()));
  EXPECT_EQ(value, std::string("/ckpt\0x", 7));
  ASSERT_OK_AND_ASSIGN(value, client->Get("missing", Soon()));
  EXPECT_EQ(value, std::nullopt);
  ASSERT_OK_AND_ASSIGN(int64_t sum, client->Add("counter", -5, Soon()));
  EXPECT_EQ(sum, 37);
  ASSERT_OK_AND_ASSIGN(std::string now, client->CompareSet("owner", "", "mine", Soon()));
  EXPECT_EQ(now, "theirs");
  ASSERT_OK_AND_ASSIGN(bool deleted, client->Delete("owner", Soon()));
  EXPECT_TRUE(deleted);
  EXPECT_THAT(
      client->Wait({"a", "b"}, Soon()),
      StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("still missing after 1000 ms: 'b'")));
  EXPECT_OK(client->Wait({"a"}, Soon()));
}

TEST(RendezvousClientTest, KeyAndValueLimitsAreCheckedBeforeSending) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    peer.WaitForClose();
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->Set(std::string(5000, 'k'), "v", Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("key is at most")));
  EXPECT_THAT(client->Set("k", std::string((1 << 20) + 1, 'v'), Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("value is at most")));
}

TEST(RendezvousClientTest, ServerClosingMidCallIsUnavailable) {
  auto server = FakeServer::Start([](FakeConnection& peer) {
    ASSERT_TRUE(peer.Handshake(TestToken()));
    wire::KvRequest request;
    ASSERT_TRUE(peer.Read(wire::KV_REQUEST, &request));
  });
  ASSERT_OK_AND_ASSIGN(auto client, RendezvousClient::Connect(Options(server->address()), Soon()));
  EXPECT_THAT(client->Get("k", Soon()),
              StatusIs(Status::Code::kUnavailable,
                       HasSubstr("closed the connection while waiting for the reply to GET 'k'")));
  EXPECT_THAT(client->WaitForStop(Soon()),
              StatusIs(Status::Code::kUnavailable, HasSubstr("closed")));
}

// Entries of /proc/self/fd or /proc/self/task.
int CountEntries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) return -1;
  int count = 0;
  while (::readdir(d) != nullptr) ++count;
  ::closedir(d);
  return count;
}

TEST(RendezvousClientTest, LeavesNoThreadsOrDescriptorsBehind) {
  int fds = CountEntries("/proc/self/fd");
  int threads = CountEntries("/proc/self/task");
  {
    // A refused connect, then a client with heartbeats running.
    auto refused = RendezvousClient::Connect(Options("127.0.0.1:" + std::to_string(UnusedPort())),
                                             Clock::now() + Milliseconds(50));
    EXPECT_FALSE(refused.ok());
    auto server = FakeServer::Start([](FakeConnection& peer) {
      ASSERT_TRUE(peer.Handshake(TestToken()));
      peer.WaitForClose();
    });
    ASSERT_OK_AND_ASSIGN(auto client,
                         RendezvousClient::Connect(Options(server->address()), Soon()));
    client->StartHeartbeats(Milliseconds(1));
    client->StartHeartbeats(Milliseconds(2));  // a second call: a new interval, one beat now
    std::this_thread::sleep_for(Milliseconds(10));
  }
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  EXPECT_EQ(CountEntries("/proc/self/task"), threads);
}

// ---------------------------------------------------------------------------
// End to end, against the real RendezvousServer.

std::unique_ptr<RendezvousServer> StartServer(RendezvousServerOptions options) {
  options.bind_address = "127.0.0.1";
  options.token = TestToken();
  Result<std::unique_ptr<RendezvousServer>> server = RendezvousServer::Start(std::move(options));
  EXPECT_OK(server);
  return server.ok() ? std::move(server).value() : nullptr;
}

std::string ServerAddress(const RendezvousServer& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

// The server's state once the node in `slot` is no longer alive (or at
// the test's deadline, for the caller's checks to say so).
ClusterState StateOnceGone(RendezvousServer& server, size_t slot) {
  ClusterState state;
  for (Deadline deadline = Soon(); Clock::now() < deadline;) {
    state = server.QueryState();
    if (!state.nodes[slot].alive) break;
  }
  return state;
}

NodeInfo Node(int i) {
  NodeInfo node;
  node.executor_id = std::to_string(i);
  node.host = "127.0.0.1";
  node.ports = {static_cast<uint32_t>(20000 + i)};
  node.pid = 1000 + i;
  node.gpus = {i};
  return node;
}

// Connects and registers `count` nodes, each from its own thread.
// `lists[i]`, when given, is node i's NodeList.
std::vector<std::unique_ptr<RendezvousClient>> JoinCluster(const RendezvousServer& server,
                                                           int count,
                                                           std::vector<FormedCluster>* formed,
                                                           std::vector<NodeList> lists = {}) {
  std::vector<std::unique_ptr<RendezvousClient>> clients(count);
  formed->assign(count, FormedCluster{});
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      RendezvousClientOptions options = Options(ServerAddress(server));
      options.name = "node " + std::to_string(i);
      if (static_cast<size_t>(i) < lists.size()) options.node_list = lists[i];
      auto client = RendezvousClient::Connect(options, Soon());
      ASSERT_OK(client);
      Result<FormedCluster> cluster = (*client)->Register(Node(i), Soon());
      ASSERT_OK(cluster);
      (*formed)[i] = std::move(cluster).value();
      clients[i] = std::move(client).value();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return clients;
}

TEST(RendezvousEndToEndTest, ThreeNodesReceiveOneClusterWithDistinctRoles) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 3;
  options.cluster.master_node.emplace("chief");
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 3, &formed);
  ASSERT_FALSE(::testing::Test::HasFailure());

  std::set<std::pair<std::string, int>> roles;
  for (const FormedCluster& cluster : formed) {
    EXPECT_EQ(cluster.cluster_id, formed[0].cluster_id);
    EXPECT_EQ(cluster.spec, formed[0].spec);
    ASSERT_EQ(cluster.nodes.size(), 3u);
    ASSERT_NE(cluster.own(), nullptr);
    roles.insert({cluster.own()->job, cluster.own()->index});
    // Every node holds the same layout, the driver's too.
    EXPECT_EQ(cluster.placements, formed[0].placements);
  }
  EXPECT_EQ(roles,
            (std::set<std::pair<std::string, int>>{{"chief", 0}, {"worker", 0}, {"worker", 1}}));
  // Roles follow executor ids: "0" is the chief.
  EXPECT_EQ(formed[0].own()->job, "chief");
  EXPECT_TRUE(formed[0].own()->chief);
  EXPECT_EQ(formed[2].own()->rank->rank, 2);
  ASSERT_OK_AND_ASSIGN(std::string chief, formed[0].spec.task_address("chief", 0));
  EXPECT_EQ(chief, "127.0.0.1:20000");
  EXPECT_THAT(formed[2].nodes[2].gpus, ElementsAre(2));

  ASSERT_OK_AND_ASSIGN(FormedCluster on_driver, server->WaitForCluster(Soon()));
  EXPECT_EQ(on_driver.spec, formed[0].spec);
  EXPECT_EQ(on_driver.placements, formed[0].placements);
  EXPECT_EQ(on_driver.own(), nullptr);

  // A fourth node is too late.
  ASSERT_OK_AND_ASSIGN(auto late,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  EXPECT_THAT(late->Register(Node(3), Soon()),
              StatusIs(Status::Code::kAlreadyExists, HasSubstr("cluster already formed")));
}

// Past the server's limit a node that did not ask for the node list gets its
// own entry and placement, the same as the driver's, and the sizes; one that
// asked gets the whole list, whatever the size.
TEST(RendezvousEndToEndTest, OnlyTheNodesThatAskGetTheNodeList) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 4;
  options.cluster.num_ps = 1;
  options.cluster.master_node.emplace("chief");
  options.node_list_limit = 3;
  options.heartbeat_interval = Milliseconds(700);
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(
      *server, 4, &formed, {NodeList::kAuto, NodeList::kNever, NodeList::kAlways, NodeList::kAuto});
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_OK_AND_ASSIGN(FormedCluster on_driver, server->WaitForCluster(Soon()));
  ASSERT_EQ(on_driver.placements.size(), 4u);

  const FormedCluster& asked = formed[2];
  EXPECT_TRUE(asked.has_node_list);
  EXPECT_EQ(asked.nodes.size(), 4u);
  EXPECT_EQ(asked.spec, on_driver.spec);
  EXPECT_EQ(asked.placements, on_driver.placements);
  EXPECT_EQ(asked.own()->Task(), "worker:0");

  const std::map<std::string, int> sizes = {{"chief", 1}, {"ps", 1}, {"worker", 2}};
  for (int i : {0, 1, 3}) {
    SCOPED_TRACE("node " + std::to_string(i));
    const FormedCluster& own = formed[static_cast<size_t>(i)];
    EXPECT_FALSE(own.has_node_list);
    EXPECT_EQ(own.node_count, 4);
    EXPECT_EQ(own.job_sizes, sizes);
    EXPECT_EQ(own.cluster_id, on_driver.cluster_id);
    EXPECT_EQ(own.heartbeat_interval, Milliseconds(700));
    EXPECT_TRUE(own.spec.jobs().empty());
    ASSERT_EQ(own.nodes.size(), 1u);
    EXPECT_EQ(own.nodes[0].executor_id, std::to_string(i));
    ASSERT_NE(own.own(), nullptr);
    EXPECT_EQ(*own.own(), on_driver.placements[static_cast<size_t>(i)]);
  }
  // Ranks, the master and the feed share without the list: the chief is
  // rank 0 and MASTER_ADDR; the ps is not ranked.
  EXPECT_EQ(formed[0].own()->job, "ps");
  EXPECT_FALSE(formed[0].own()->rank.has_value());
  EXPECT_TRUE(formed[1].own()->chief);
  ASSERT_TRUE(formed[3].own()->rank.has_value());
  EXPECT_EQ(formed[3].own()->rank->rank, 2);
  EXPECT_EQ(formed[3].own()->rank->world_size, 3);
  EXPECT_EQ(formed[3].own()->rank->master_port, 20001);
  EXPECT_EQ(formed[3].own()->feed, (FeedShare{2, 3}));
}

// Two hosts' agents, two nodes each, one connection each: every node gets
// its own view, in the order the agent gave them; a host's LEAVE names its
// node; a host's connection closing is each of its remaining nodes' death.
TEST(RendezvousEndToEndTest, HostConnectionsCarryEachHostsNodes) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 4;
  options.cluster.master_node.emplace("chief");
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<RendezvousClient>> hosts(2);
  std::vector<std::vector<FormedCluster>> formed(2);
  std::vector<std::thread> threads;
  for (int h = 0; h < 2; ++h) {
    threads.emplace_back([&, h] {
      RendezvousClientOptions client_options = Options(ServerAddress(*server));
      client_options.node_list = h == 0 ? NodeList::kNever : NodeList::kAlways;
      ASSERT_OK_AND_ASSIGN(hosts[h], RendezvousClient::Connect(client_options, Soon()));
      // Given out of executor order: the result follows the order given.
      ASSERT_OK_AND_ASSIGN(formed[h],
                           hosts[h]->RegisterHost({Node(2 * h + 1), Node(2 * h)}, Soon()));
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_OK_AND_ASSIGN(FormedCluster on_driver, server->WaitForCluster(Soon()));
  for (int h = 0; h < 2; ++h) {
    ASSERT_EQ(formed[h].size(), 2u);
    for (int k = 0; k < 2; ++k) {
      const FormedCluster& view = formed[h][k];
      const int executor = 2 * h + 1 - k;
      SCOPED_TRACE("executor " + std::to_string(executor));
      ASSERT_NE(view.own(), nullptr);
      EXPECT_EQ(view.nodes[static_cast<size_t>(view.self)].executor_id, std::to_string(executor));
      EXPECT_EQ(*view.own(), on_driver.placements[static_cast<size_t>(executor)]);
      EXPECT_EQ(view.node_count, 4);
      EXPECT_EQ(view.has_node_list, h == 1);
    }
  }
  EXPECT_TRUE(formed[0][1].own()->chief);  // executor 0

  ASSERT_OK(hosts[1]->LeaveNode("2"));
  ASSERT_OK(hosts[1]->QueryState(Soon()).status());  // orders the LEAVE first
  hosts[1].reset();
  ClusterState state = StateOnceGone(*server, 3);
  EXPECT_TRUE(state.nodes[2].left);
  EXPECT_FALSE(state.nodes[3].alive);
  EXPECT_FALSE(state.nodes[3].left);
  EXPECT_EQ(state.nodes[3].error, "executor 3 (worker:2): connection closed");
  EXPECT_TRUE(state.nodes[0].alive);
  EXPECT_TRUE(state.nodes[1].alive);
}

// A host's heartbeats carry each of its nodes' payload, and LeaveNode sends
// the last ones before the LEAVE.
TEST(RendezvousEndToEndTest, AHostsHeartbeatsCarryEachNodesPayload) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto host,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  EXPECT_THAT(host->StartHostHeartbeats(Milliseconds(10)),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("call RegisterHost first")));
  ASSERT_OK(host->RegisterHost({Node(0), Node(1)}, Soon()).status());
  std::atomic<uint64_t> records{10};
  ASSERT_OK(host->StartHostHeartbeats(Milliseconds(10), [&] {
    std::vector<NodeHeartbeat> nodes(2);
    for (size_t i = 0; i < nodes.size(); ++i) {
      nodes[i].executor_id = std::to_string(i);
      nodes[i].payload.program_pid = 500 + static_cast<int32_t>(i);
    }
    FeedProgress feed;
    feed.records = records.load();
    nodes[1].payload.feed = feed;
    return nodes;
  }));

  ClusterState state;
  for (Deadline deadline = Soon(); Clock::now() < deadline;) {
    state = server->QueryState();
    if (state.nodes.size() == 2 && state.nodes[1].feed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(state.nodes[1].feed.has_value());
  EXPECT_EQ(state.nodes[0].program_pid, 500);
  EXPECT_EQ(state.nodes[1].program_pid, 501);
  EXPECT_FALSE(state.nodes[0].feed.has_value());

  records = 777;
  ASSERT_OK(host->LeaveNode("1"));
  ASSERT_OK(host->QueryState(Soon()).status());  // orders the LEAVE first
  state = server->QueryState();
  EXPECT_TRUE(state.nodes[1].left);
  ASSERT_TRUE(state.nodes[1].feed.has_value());
  EXPECT_EQ(state.nodes[1].feed->records, 777u);
  EXPECT_TRUE(state.nodes[0].alive);
}

// The driver's STOP for one node of a host reaches the host as that node's,
// once; a STOP for all is every node's, every time.
TEST(RendezvousEndToEndTest, AStopForOneOfAHostsNodesNamesIt) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto host,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  ASSERT_OK(host->RegisterHost({Node(0), Node(1)}, Soon()).status());
  ASSERT_OK(server->StopNode("1"));
  ASSERT_OK_AND_ASSIGN(RendezvousClient::Instruction told, host->WaitForInstruction(Soon()));
  EXPECT_EQ(told.kind, RendezvousClient::Instruction::Kind::kStop);
  EXPECT_EQ(told.executor_id, "1");
  ASSERT_OK_AND_ASSIGN(told, host->WaitForInstruction(Clock::now() + Milliseconds(50)));
  EXPECT_EQ(told.kind, RendezvousClient::Instruction::Kind::kNone);  // node 0 goes on
  server->StopAll();
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(told, host->WaitForInstruction(Soon()));
    EXPECT_EQ(told.kind, RendezvousClient::Instruction::Kind::kStop);
    EXPECT_EQ(told.executor_id, "");
  }
}

TEST(RendezvousEndToEndTest, AHostRegistersWithTheClusterTokenAndDistinctNodes) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto host,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  EXPECT_THAT(host->RegisterHost({}, Soon()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("at least one node")));
  EXPECT_THAT(host->RegisterHost({Node(0), Node(0)}, Soon()),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("executor 0 is twice among the host's nodes")));

  // With a node credential, every other node's must be given: checked
  // before anything is sent, so the connection goes on.
  RendezvousClientOptions as_node = Options(ServerAddress(*server));
  as_node.credential = Credential::ForNode(TestToken(), "0").value();
  ASSERT_OK_AND_ASSIGN(auto node, RendezvousClient::Connect(as_node, Soon()));
  EXPECT_THAT(node->RegisterHost({Node(0), Node(1)}, Soon()),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("registers executor 1 only with that node's credential too")));
  EXPECT_OK(node->QueryState(Soon()).status());
}

// The ssh and slurm engines' host agents hold node credentials only: one
// connection, opened with one, proving the others, forms the cluster as the
// cluster token's would; a credential of another cluster proves nothing.
TEST(RendezvousEndToEndTest, AHostRegistersWithItsNodesCredentials) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 3;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  RendezvousClientOptions client_options = Options(ServerAddress(*server));
  client_options.credential = *Credential::ForNode(TestToken(), "1");
  client_options.host_credentials = {*Credential::ForNode(TestToken(9), "0"),
                                     *Credential::ForNode(TestToken(), "2")};
  ASSERT_OK_AND_ASSIGN(auto forged, RendezvousClient::Connect(client_options, Soon()));
  EXPECT_THAT(forged->RegisterHost({Node(1), Node(0), Node(2)}, Soon()),
              StatusIs(Status::Code::kPermissionDenied,
                       HasSubstr("wrong credential proof for executor 0")));

  client_options.host_credentials[0] = *Credential::ForNode(TestToken(), "0");
  ASSERT_OK_AND_ASSIGN(auto host, RendezvousClient::Connect(client_options, Soon()));
  ASSERT_OK_AND_ASSIGN(std::vector<FormedCluster> formed,
                       host->RegisterHost({Node(1), Node(0), Node(2)}, Soon()));
  ASSERT_EQ(formed.size(), 3u);
  EXPECT_EQ(formed[1].nodes[static_cast<size_t>(formed[1].self)].executor_id, "0");
  ASSERT_OK(host->ReportError("2", "exited with code 3", {"its last line"}));
  ASSERT_OK_AND_ASSIGN(ClusterState state, host->QueryState(Soon()));
  EXPECT_EQ(state.nodes[2].error, "exited with code 3");
  EXPECT_EQ(state.nodes[2].last_log_lines, std::vector<std::string>{"its last line"});
  EXPECT_OK(host->StopAll());  // sent; the refusal comes back on the connection
  EXPECT_THAT(host->QueryState(Soon()),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("may not stop all nodes")));
}

TEST(RendezvousEndToEndTest, WrongTokenIsPermissionDenied) {
  RendezvousServerOptions options;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  RendezvousClientOptions client_options = Options(ServerAddress(*server));
  client_options.credential = Credential::Cluster(TestToken(9));
  EXPECT_THAT(RendezvousClient::Connect(client_options, Soon()),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("wrong token")));
}

TEST(RendezvousEndToEndTest, ANodeCredentialActsForItsOwnSlotOnly) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto as_node = [&](const std::string& id) {
    RendezvousClientOptions client_options = Options(ServerAddress(*server));
    client_options.credential = *Credential::ForNode(TestToken(), id);
    return RendezvousClient::Connect(client_options, Soon());
  };
  ASSERT_OK_AND_ASSIGN(auto intruder, as_node("1"));
  EXPECT_THAT(intruder->Register(Node(0), Soon()),
              StatusIs(Status::Code::kPermissionDenied,
                       HasSubstr("the node credential of executor 1 may not register executor 0")));

  ASSERT_OK_AND_ASSIGN(auto stopper, as_node("1"));
  EXPECT_OK(stopper->StopAll());  // sent; the refusal comes back on the connection
  EXPECT_THAT(stopper->QueryState(Soon()),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("may not stop all nodes")));

  std::vector<std::unique_ptr<RendezvousClient>> nodes;
  std::vector<std::thread> threads;
  std::vector<Result<FormedCluster>> formed(2, Status::Unavailable("not yet"));
  for (int i = 0; i < 2; ++i) {
    auto client = as_node(std::to_string(i));
    ASSERT_OK(client);
    nodes.push_back(std::move(client).value());
  }
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] { formed[i] = nodes[i]->Register(Node(i), Soon()); });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_OK(formed[0]);
  ASSERT_OK(formed[1]);
  EXPECT_EQ(formed[1]->own()->index, 1);
  EXPECT_EQ(server->QueryState().phase, "formed");
}

TEST(RendezvousEndToEndTest, AFullKeyValueStoreIsFailedPreconditionAndTheConnectionGoesOn) {
  RendezvousServerOptions options;
  options.max_kv_keys = 1;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto client,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  EXPECT_OK(client->Set("a", "1", Soon()));
  EXPECT_THAT(client->Set("b", "1", Soon()),
              StatusIs(Status::Code::kFailedPrecondition,
                       HasSubstr("the key-value store holds 1 keys, its limit")));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> a, client->Get("a", Soon()));
  EXPECT_EQ(a, "1");
}

TEST(RendezvousEndToEndTest, KeyValueWaitIsWokenByAnotherClientsSet) {
  RendezvousServerOptions options;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto waiter,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  ASSERT_OK_AND_ASSIGN(auto setter,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));

  Status waited = Status::Internal("not run");
  std::thread waiting([&] { waited = waiter->Wait({"ready", "path"}, Soon()); });
  EXPECT_OK(setter->Set("path", "/ckpt/7", Soon()));
  std::this_thread::sleep_for(
      Milliseconds(50));  // usually parks the WAIT first; either order passes
  EXPECT_OK(setter->Set("ready", "1", Soon()));
  waiting.join();
  EXPECT_OK(waited);

  ASSERT_OK_AND_ASSIGN(std::optional<std::string> path, waiter->Get("path", Soon()));
  EXPECT_EQ(path, "/ckpt/7");
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> missing, waiter->Get("nope", Soon()));
  EXPECT_EQ(missing, std::nullopt);
  ASSERT_OK_AND_ASSIGN(int64_t count, waiter->Add("count", 2, Soon()));
  EXPECT_EQ(count, 2);
  ASSERT_OK_AND_ASSIGN(count, setter->Add("count", 3, Soon()));
  EXPECT_EQ(count, 5);
  ASSERT_OK_AND_ASSIGN(std::string owner, waiter->CompareSet("owner", "", "waiter", Soon()));
  EXPECT_EQ(owner, "waiter");
  ASSERT_OK_AND_ASSIGN(owner, setter->CompareSet("owner", "", "setter", Soon()));
  EXPECT_EQ(owner, "waiter");
  ASSERT_OK_AND_ASSIGN(bool deleted, setter->Delete("owner", Soon()));
  EXPECT_TRUE(deleted);
  ASSERT_OK_AND_ASSIGN(deleted, setter->Delete("owner", Soon()));
  EXPECT_FALSE(deleted);
  EXPECT_THAT(waiter->Wait({"path", "never"}, Clock::now() + Milliseconds(300)),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("never")));
  // The connection is still good after a timed-out WAIT.
  EXPECT_OK(waiter->Set("after", "x", Soon()));
}

TEST(RendezvousEndToEndTest, ReservationTimeoutTellsTheWaitingNodeWhatIsMissing) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  options.reservation_timeout = Milliseconds(200);
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  ASSERT_OK_AND_ASSIGN(auto client,
                       RendezvousClient::Connect(Options(ServerAddress(*server)), Soon()));
  Result<FormedCluster> cluster = client->Register(Node(0), Soon());
  EXPECT_THAT(cluster, StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("1 of 2")));
  EXPECT_THAT(cluster.status().message(), HasSubstr("rendezvous server " + ServerAddress(*server)));
}

TEST(RendezvousEndToEndTest, HeartbeatsKeepANodeAlive) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<NodeEvent> events;
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  options.heartbeat_interval = Milliseconds(25);
  // Generous, so a loaded machine does not starve the heartbeating node.
  options.missed_heartbeats_until_dead = 40;
  options.on_event = [&](const NodeEvent& event) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(event);
    cv.notify_all();
  };
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 2, &formed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(formed[0].heartbeat_interval, Milliseconds(25));
  clients[0]->StartHeartbeats(formed[0].heartbeat_interval);  // node 1 stays silent

  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_until(lock, Soon(), [&] { return !events.empty(); }));
    EXPECT_EQ(events[0].kind, NodeEvent::Kind::kDead);
    EXPECT_EQ(events[0].node.executor_id, "1");
  }
  ASSERT_OK_AND_ASSIGN(ClusterState state, clients[0]->QueryState(Soon()));
  EXPECT_EQ(state.phase, "formed");
  ASSERT_EQ(state.nodes.size(), 2u);
  for (const NodeStatus& node : state.nodes) {
    EXPECT_EQ(node.alive, node.node.executor_id == "0") << node.node.executor_id;
  }
}

TEST(RendezvousEndToEndTest, StopsAndErrorsReachTheNodes) {
  std::mutex mu;
  std::vector<NodeEvent> events;
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  int registered = 0;
  options.on_event = [&](const NodeEvent& event) {
    std::lock_guard<std::mutex> lock(mu);
    if (event.kind == NodeEvent::Kind::kRegistered) {
      ++registered;  // every registration, in an elastic server
    } else {
      events.push_back(event);
    }
  };
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 2, &formed);
  ASSERT_FALSE(::testing::Test::HasFailure());

  EXPECT_OK(clients[1]->ReportError("1", "trainer crashed", {"Traceback", "OOM"}));
  ASSERT_OK_AND_ASSIGN(ClusterState state, clients[0]->QueryState(Soon()));
  ASSERT_EQ(state.nodes.size(), 2u);
  bool seen = false;
  for (const NodeStatus& node : state.nodes) {
    if (node.node.executor_id != "1") continue;
    seen = true;
    EXPECT_THAT(node.error, HasSubstr("trainer crashed"));
    EXPECT_THAT(node.last_log_lines, ElementsAre("Traceback", "OOM"));
  }
  EXPECT_TRUE(seen);

  EXPECT_OK(clients[0]->StopAll());
  for (auto& client : clients) {
    ASSERT_OK_AND_ASSIGN(bool stopped, client->WaitForStop(Soon()));
    EXPECT_TRUE(stopped);
  }
}

}  // namespace
}  // namespace drover

namespace drover {
namespace {

// Regression: a node whose program finished used to be reported dead when
// its connection closed ("connection closed; declared dead" on every run).
TEST(RendezvousEndToEndTest, ANodeThatLeavesIsNotReportedDead) {
  std::mutex mu;
  std::vector<NodeEvent> events;
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  int registered = 0;
  options.on_event = [&](const NodeEvent& event) {
    std::lock_guard<std::mutex> lock(mu);
    if (event.kind == NodeEvent::Kind::kRegistered) {
      ++registered;  // every registration, in an elastic server
    } else {
      events.push_back(event);
    }
  };
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 2, &formed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_OK(clients[1]->Leave());
  // Leave is one-way; a round trip on the same connection orders it first.
  ASSERT_OK(clients[1]->QueryState(Soon()).status());
  clients[1].reset();  // the connection closes

  ClusterState state = StateOnceGone(*server, 1);
  EXPECT_TRUE(state.nodes[1].left);
  EXPECT_FALSE(state.nodes[1].alive);
  EXPECT_EQ(state.nodes[1].error, "");
  EXPECT_TRUE(state.nodes[0].alive);
  // The other node's view agrees, and nobody was declared dead.
  ASSERT_OK_AND_ASSIGN(ClusterState seen, clients[0]->QueryState(Soon()));
  EXPECT_TRUE(seen.nodes[1].left);
  // It is reported as having left (the driver bounds its launcher's exit by
  // it), never as dead.
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(events.size(), 1u) << events.back().message;
  EXPECT_EQ(events[0].kind, NodeEvent::Kind::kLeft);
  EXPECT_EQ(events[0].node.executor_id, "1");
}

// The agent heartbeats from the barrier on, without a payload, and gives the
// payload once its program runs: that heartbeat goes at once, not an
// interval later (the interval here outlasts the test).
TEST(RendezvousEndToEndTest, ANewHeartbeatPayloadIsSentAtOnce) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 1;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 1, &formed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  clients[0]->StartHeartbeats(Milliseconds(600'000));
  clients[0]->StartHeartbeats(Milliseconds(600'000), [] {
    HeartbeatPayload payload;
    payload.program_pid = 4242;
    return payload;
  });
  ClusterState state;
  for (Deadline deadline = Soon(); Clock::now() < deadline;) {
    state = server->QueryState();
    if (state.nodes[0].program_pid != 0) break;
    std::this_thread::sleep_for(Milliseconds(5));
  }
  EXPECT_EQ(state.nodes[0].program_pid, 4242);
}

// Issue #9: heartbeats carry the program's pid and its feed counters; the
// server keeps the last ones for the driver and the nodes, and Leave sends
// one last heartbeat so the final counts are exact.
TEST(RendezvousEndToEndTest, HeartbeatsCarryFeedProgressAndLeaveSendsTheLast) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  std::mutex log_mu;
  std::vector<std::string> log;
  options.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu);
    log.push_back(line);
  };
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 2, &formed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::atomic<uint64_t> records{10};
  clients[0]->StartHeartbeats(Milliseconds(10), [&] {
    HeartbeatPayload payload;
    payload.program_pid = 4242;
    FeedProgress feed;
    feed.records = records.load();
    feed.partitions_total = 8;
    feed.queue_capacity = 1 << 20;
    feed.ingest = "extent";
    payload.feed = feed;
    return payload;
  });
  clients[1]->StartHeartbeats(Milliseconds(10));  // no payload: not fed

  ClusterState state;
  for (Deadline deadline = Soon(); Clock::now() < deadline;) {
    state = server->QueryState();
    if (state.nodes[0].feed) break;
  }
  ASSERT_TRUE(state.nodes[0].feed.has_value());
  EXPECT_EQ(state.nodes[0].program_pid, 4242);
  EXPECT_EQ(state.nodes[0].feed->partitions_total, 8u);
  EXPECT_EQ(state.nodes[0].feed->queue_capacity, 1u << 20);
  EXPECT_FALSE(state.nodes[1].feed.has_value());
  EXPECT_EQ(state.nodes[1].program_pid, 0);

  // The nodes' own view carries the same, over the wire.
  ASSERT_OK_AND_ASSIGN(ClusterState seen, clients[1]->QueryState(Soon()));
  ASSERT_TRUE(seen.nodes[0].feed.has_value());
  EXPECT_EQ(seen.nodes[0].feed->ingest, "extent");
  EXPECT_EQ(seen.nodes[0].program_pid, 4242);
  EXPECT_FALSE(seen.nodes[1].feed.has_value());

  records = 12345;
  ASSERT_OK(clients[0]->Leave());
  ASSERT_OK(clients[0]->QueryState(Soon()).status());  // orders the Leave first
  state = server->QueryState();
  EXPECT_TRUE(state.nodes[0].left);
  ASSERT_TRUE(state.nodes[0].feed.has_value());
  EXPECT_EQ(state.nodes[0].feed->records, 12345u);

  // The server's own lines went to the log callback.
  std::lock_guard<std::mutex> lock(log_mu);
  bool formed_line = false;
  for (const std::string& line : log)
    formed_line |= line.find("formed with 2 nodes") != std::string::npos;
  EXPECT_TRUE(formed_line);
}

}  // namespace
}  // namespace drover

namespace drover {
namespace {

// Regression: a value at the documented 1 MiB limit did not fit the server's
// 1 MiB frame limit once the key and framing were added.
TEST(RendezvousEndToEndTest, ValuesAtTheLimitFitInARequest) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = 1;
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto client = RendezvousClient::Connect(Options(ServerAddress(*server)), Soon());
  ASSERT_OK(client);
  std::string key(4 << 10, 'k');
  std::string big(1 << 20, 'a');
  std::string other(1 << 20, 'b');
  ASSERT_OK((*client)->Set(key, big, Soon()));
  ASSERT_OK_AND_ASSIGN(std::string stored, (*client)->CompareSet(key, big, other, Soon()));
  EXPECT_EQ(stored, other);
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> read, (*client)->Get(key, Soon()));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, other);
}

}  // namespace
}  // namespace drover

namespace drover {
namespace {

// Elastic rounds over the same connections: members told to REFORM
// register again, a late node waits as a joiner and is admitted, and a
// round can form with fewer nodes than its template once the caller says so.
// Round 1 of a 2-node elastic run, admitting executor 2.
ReformPlan RoundWithExecutor2() {
  ReformPlan plan;
  plan.cluster.num_nodes = 3;
  plan.cluster_id = "run-restart1";
  plan.round = 1;
  plan.reason = "executor 2 joined";
  plan.admit = {"2"};
  return plan;
}

// Each member told to REFORM for `plan` registers again, each from its thread.
std::vector<FormedCluster> RegisterAgain(
    const std::vector<std::unique_ptr<RendezvousClient>>& clients, const ReformPlan& plan) {
  std::vector<FormedCluster> again(clients.size());
  std::vector<std::thread> members;
  for (size_t i = 0; i < clients.size(); ++i) {
    members.emplace_back([&, i] {
      ASSERT_OK_AND_ASSIGN(RendezvousClient::Instruction told,
                           clients[i]->WaitForInstruction(Soon()));
      EXPECT_EQ(told.kind, RendezvousClient::Instruction::Kind::kReform);
      EXPECT_EQ(told.round, plan.round);
      EXPECT_EQ(told.reason, plan.reason);
      ASSERT_OK_AND_ASSIGN(again[i], clients[i]->Register(Node(static_cast<int>(i)), Soon()));
    });
  }
  for (std::thread& member : members) member.join();
  return again;
}

TEST(RendezvousEndToEndTest, ElasticRoundsReformOverTheSameConnections) {
  std::mutex mu;
  std::vector<NodeEvent> events;
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  options.elastic = true;
  int registered = 0;
  options.on_event = [&](const NodeEvent& event) {
    std::lock_guard<std::mutex> lock(mu);
    if (event.kind == NodeEvent::Kind::kRegistered) {
      ++registered;  // every registration, in an elastic server
    } else {
      events.push_back(event);
    }
  };
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 2, &formed);
  ASSERT_OK(server->WaitForCluster(Soon()));
  ASSERT_OK((*clients[0]).Set("drover/feed/claimed", "3", Soon()));
  ASSERT_OK((*clients[0]).Set("user/key", "kept", Soon()));

  // A third node registers late: it waits, and the server says so.
  Result<FormedCluster> joined = Status::Internal("not yet");
  std::unique_ptr<RendezvousClient> joiner;
  std::thread late([&] {
    auto client = RendezvousClient::Connect(Options(ServerAddress(*server)), Soon());
    ASSERT_OK(client);
    joiner = std::move(client).value();
    joined = joiner->Register(Node(2), Soon());
  });
  for (Deadline until = Soon(); Clock::now() < until;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!events.empty()) break;
    }
    std::this_thread::sleep_for(Milliseconds(5));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, NodeEvent::Kind::kJoining);
    EXPECT_EQ(events[0].node.executor_id, "2");
    EXPECT_EQ(registered, 2);
  }

  EXPECT_EQ(server->DeleteKeys("drover/feed/"), 1u);
  EXPECT_EQ(server->StoredValue("user/key"), "kept");
  ReformPlan plan = RoundWithExecutor2();
  ASSERT_OK(server->Reform(plan));
  std::vector<FormedCluster> again = RegisterAgain(clients, plan);
  late.join();
  ASSERT_OK(joined);
  ASSERT_OK_AND_ASSIGN(FormedCluster cluster, server->WaitForCluster(Soon()));
  EXPECT_EQ(cluster.cluster_id, "run-restart1");
  ASSERT_EQ(cluster.nodes.size(), 3u);
  EXPECT_EQ(joined->own()->Task(), "worker:2");
  EXPECT_EQ(again[1].own()->Task(), "worker:1");

  // The next round, one member short: it forms when told to, with 2.
  plan.cluster_id = "run-restart2";
  plan.round = 2;
  plan.admit.clear();
  ASSERT_OK(server->Reform(plan));
  EXPECT_THAT(server->FormWithRegistered(1),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("0 of 3")));
  std::vector<FormedCluster> third(2);
  std::vector<std::thread> survivors;
  for (int i : {0, 2}) {
    RendezvousClient& client = i == 0 ? *clients[0] : *joiner;
    survivors.emplace_back([&, i] {
      ASSERT_OK_AND_ASSIGN(RendezvousClient::Instruction told, client.WaitForInstruction(Soon()));
      EXPECT_EQ(told.kind, RendezvousClient::Instruction::Kind::kReform);
      ASSERT_OK_AND_ASSIGN(third[i == 0 ? 0 : 1], client.Register(Node(i), Soon()));
    });
  }
  for (Deadline until = Soon(); Clock::now() < until;) {
    if (server->QueryState().registered == 2) break;
    std::this_thread::sleep_for(Milliseconds(5));
  }
  ASSERT_OK_AND_ASSIGN(int size, server->FormWithRegistered(2));
  EXPECT_EQ(size, 2);
  for (std::thread& survivor : survivors) survivor.join();
  EXPECT_EQ(third[0].own()->Task(), "worker:0");
  EXPECT_EQ(third[1].own()->Task(), "worker:1");
  EXPECT_EQ(third[1].nodes.size(), 2u);

  // A server that is not elastic refuses.
  RendezvousServerOptions fixed;
  fixed.cluster.num_nodes = 1;
  auto plain = StartServer(fixed);
  EXPECT_THAT(plain->Reform(plan),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("not elastic")));
}

// Rounds keep each node's ask: after REFORM, and for a joiner, the cluster
// comes without the node list to the nodes that said never.
TEST(RendezvousEndToEndTest, ARoundWithoutTheNodeListKeepsItsRoundAndSizes) {
  std::atomic<bool> waiting{false};
  RendezvousServerOptions options;
  options.cluster.num_nodes = 2;
  options.elastic = true;
  options.on_event = [&](const NodeEvent& event) {
    if (event.kind == NodeEvent::Kind::kJoining) waiting = true;
  };
  auto server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::vector<FormedCluster> formed;
  auto clients = JoinCluster(*server, 2, &formed, {NodeList::kNever, NodeList::kNever});
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_OK(server->WaitForCluster(Soon()));
  EXPECT_FALSE(formed[0].has_node_list);

  RendezvousClientOptions late_options = Options(ServerAddress(*server));
  late_options.node_list = NodeList::kNever;
  ASSERT_OK_AND_ASSIGN(auto joiner, RendezvousClient::Connect(late_options, Soon()));
  Result<FormedCluster> joined = Status::Internal("not yet");
  std::thread late([&] { joined = joiner->Register(Node(2), Soon()); });
  for (Deadline until = Soon(); Clock::now() < until && !waiting;) {
    std::this_thread::sleep_for(Milliseconds(5));
  }
  if (!waiting) {
    late.join();
    FAIL() << "executor 2 never waited to join";
  }
  ASSERT_OK(server->Reform(RoundWithExecutor2()));
  std::vector<FormedCluster> again = RegisterAgain(clients, RoundWithExecutor2());
  late.join();
  ASSERT_OK(joined);
  again.push_back(*joined);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("node " + std::to_string(i));
    const FormedCluster& own = again[static_cast<size_t>(i)];
    EXPECT_FALSE(own.has_node_list);
    EXPECT_EQ(own.node_count, 3);
    EXPECT_EQ(own.round, 1);
    EXPECT_EQ(own.round_reason, "executor 2 joined");
    EXPECT_EQ(own.cluster_id, "run-restart1");
    ASSERT_NE(own.own(), nullptr);
    EXPECT_EQ(own.own()->Task(), "worker:" + std::to_string(i));
    EXPECT_EQ(own.own()->rank->world_size, 3);
  }
}

}  // namespace
}  // namespace drover

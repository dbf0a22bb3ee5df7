// Connection over real loopback sockets, with a fake host: frames in order,
// bad bytes, the pre-handshake frame limit, a frame cut short, the
// handshake and drain deadlines, sealed frames both ways after a real
// handshake (handshake.h), and shared bodies sent by gather write. The
// connection runs on an io_context thread; the test speaks through RawPeer.

#include "rendezvous/connection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "rendezvous/handshake.h"
#include "rendezvous/server_fakes.h"
#include "testing/raw_peer.h"
#include "testing/status_matchers.h"
#include "wire/auth.h"
#include "wire/frame.h"

namespace drover::rendezvous_internal {
namespace {

using asio::ip::tcp;
using ::drover::testing::RawPeer;
using ::testing::ElementsAre;

Deadline Soon() {
  return Clock::now() + std::chrono::seconds(20);
}

wire::Token TestToken() {
  wire::Token token;
  for (size_t i = 0; i < token.size(); ++i) token[i] = static_cast<unsigned char>(3 + i * 7);
  return token;
}

// Records what the connection reports; the loop thread writes, the test
// thread waits.
class FakeHost : public ConnectionHost {
 public:
  // Runs on the loop thread for every frame, before it is recorded.
  std::function<void(Connection&, const wire::Frame&)> on_frame;

  void HandleFrame(Connection& conn, const wire::Frame& frame) override {
    if (on_frame) on_frame(conn, frame);
    Record([&] { frames_.push_back(frame); });
  }
  void OnClosed(Connection&) override {
    Record([&] { ++closed_; });
  }
  void Rejected(const std::string&, const std::string& reason) override {
    Record([&] { rejections_.push_back(reason); });
  }
  void LeftHandshake(Connection& conn) override {
    Record([&] { left_ += conn.unauthenticated; });
    conn.unauthenticated = false;
  }
  void Log(const std::string& line) override {
    Record([&] { log_.push_back(line); });
  }
  std::vector<char>& read_buffer() override { return buffer_; }

  // Waits until `done` holds (under the lock), or 20 s.
  bool WaitFor(const std::function<bool()>& done) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, Soon(), done);
  }
  bool WaitForFrames(size_t count) {
    return WaitFor([&] { return frames_.size() >= count; });
  }
  // Close() tells the host last (LeftHandshake), after a rejection too.
  bool WaitForClose() {
    return WaitFor([&] { return left_ > 0; });
  }
  bool WaitForRejection(const std::string& text) {
    return WaitFor([&] {
      for (const std::string& reason : rejections_) {
        if (reason.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }
  std::vector<wire::MessageType> types() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<wire::MessageType> types;
    for (const wire::Frame& frame : frames_) types.push_back(frame.type());
    return types;
  }
  std::vector<wire::Frame> frames() {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_;
  }
  int closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  int left() {
    std::lock_guard<std::mutex> lock(mu_);
    return left_;
  }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

 private:
  void Record(const std::function<void()>& change) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      change();
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<wire::Frame> frames_;
  std::vector<std::string> rejections_;
  std::vector<std::string> log_;
  int closed_ = 0;
  int left_ = 0;
  std::vector<char> buffer_ = std::vector<char>(64 * 1024);
};

class ConnectionTest : public ::testing::Test {
 protected:
  ConnectionTest() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    loop_ = std::thread([this] { io_.run(); });
  }
  ~ConnectionTest() override {
    OnLoop([this] {
      if (conn_) conn_->Close();
    });
    work_.reset();
    io_.stop();
    loop_.join();
  }

  // Runs `fn` on the loop thread and waits for it.
  void OnLoop(std::function<void()> fn) {
    std::promise<void> done;
    asio::post(io_, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }

  // A client connected to a started Connection.
  RawPeer Connect(ConnectionOptions options = {}) {
    Result<RawPeer> client = RawPeer::Connect(acceptor_.local_endpoint().port(), Soon());
    EXPECT_OK(client);
    tcp::socket socket(io_);
    acceptor_.accept(socket);
    OnLoop([&] {
      conn_ = std::make_shared<Connection>(&host_, std::move(socket), 1, "client", options);
      conn_->Start();
    });
    return std::move(client).value();
  }

  Peer::State State() {
    Peer::State state;
    OnLoop([&] { state = conn_->state(); });
    return state;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  tcp::acceptor acceptor_;
  std::thread loop_;
  FakeHost host_;
  std::shared_ptr<Connection> conn_;
};

TEST_F(ConnectionTest, FramesReachTheHostInOrder) {
  RawPeer client = Connect();
  wire::Hello hello;
  hello.set_name("first");
  ASSERT_OK(client.Send(wire::HELLO, hello));
  ASSERT_OK(client.Send(wire::AUTH, wire::Auth()));
  ASSERT_TRUE(host_.WaitForFrames(2));
  EXPECT_THAT(host_.types(), ElementsAre(wire::HELLO, wire::AUTH));
  wire::Hello received;
  ASSERT_TRUE(received.ParseFromString(host_.frames()[0].body));
  EXPECT_EQ(received.name(), "first");
}

TEST_F(ConnectionTest, BytesThatAreNotDroverGetOneErrorFrameAndAClose) {
  RawPeer client = Connect();
  ASSERT_OK(client.SendBytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_OK_AND_ASSIGN(wire::Error error, client.ReadError(Soon()));
  EXPECT_EQ(error.code(), wire::BAD_FRAME);
  EXPECT_OK(client.WaitForClose(Soon()));
  client.Close();
  ASSERT_TRUE(host_.WaitForClose());
  EXPECT_EQ(host_.closed(), 1);
  EXPECT_EQ(host_.left(), 1);  // no longer counted as waiting to authenticate
  EXPECT_THAT(host_.types(), ::testing::IsEmpty());
}

TEST_F(ConnectionTest, BeforeTheHandshakeAFrameIsAtMostOneKiB) {
  RawPeer client = Connect();
  std::array<char, wire::kHeaderBytes> header = wire::EncodeHeader(wire::HELLO, 2000);
  ASSERT_OK(client.SendBytes(std::string_view(header.data(), header.size())));
  ASSERT_OK_AND_ASSIGN(wire::Error error, client.ReadError(Soon()));
  EXPECT_EQ(error.code(), wire::FRAME_TOO_LARGE);
  EXPECT_EQ(error.message(), "frame of 2000 bytes is over the limit of 1024 bytes");
  EXPECT_TRUE(host_.WaitForRejection("frame of 2000 bytes is over the limit of 1024 bytes"));
}

TEST_F(ConnectionTest, AFrameCutShortIsReported) {
  RawPeer client = Connect();
  ASSERT_OK(client.SendBytes("DRVR\x02"));
  client.Close();
  EXPECT_TRUE(
      host_.WaitForRejection("short frame: connection ended after 5 bytes of an unfinished frame"));
}

TEST_F(ConnectionTest, NoHandshakeInTimeClosesTheConnection) {
  ConnectionOptions options;
  options.handshake_timeout = Milliseconds(50);
  RawPeer client = Connect(options);
  EXPECT_TRUE(host_.WaitForRejection("no handshake from client within 0.05 s"));
  EXPECT_OK(client.WaitForClose(Soon()));
}

TEST_F(ConnectionTest, ARejectedPeerGetsItsErrorAndTheConnectionClosesAfterIt) {
  RawPeer client = Connect();
  OnLoop([this] { conn_->Reject(wire::MALFORMED, "no thanks", "the reason"); });
  EXPECT_TRUE(host_.WaitForRejection("the reason"));
  EXPECT_EQ(host_.closed(), 1);  // the host forgets it at once
  EXPECT_EQ(State(), Peer::State::kDraining);
  ASSERT_OK_AND_ASSIGN(wire::Error error, client.ReadError(Soon()));
  EXPECT_EQ(error.code(), wire::MALFORMED);
  EXPECT_EQ(error.message(), "no thanks");
  OnLoop([this] { conn_->Send(wire::STATE, wire::State()); });  // refused while draining
  EXPECT_OK(client.WaitForClose(Soon()));
  client.Close();
  ASSERT_TRUE(host_.WaitForClose());
  EXPECT_EQ(State(), Peer::State::kClosed);
  EXPECT_EQ(host_.closed(), 1);
}

TEST_F(ConnectionTest, APeerThatNeverClosesIsClosedAtTheDrainDeadline) {
  ConnectionOptions options;
  options.drain_timeout = Milliseconds(50);
  RawPeer client = Connect(options);
  OnLoop([this] { conn_->Reject(wire::MALFORMED, "go away", "the reason"); });
  ASSERT_OK_AND_ASSIGN(wire::Error error, client.ReadError(Soon()));
  EXPECT_EQ(error.message(), "go away");
  // The client keeps its end open; the server does not wait for it.
  ASSERT_TRUE(host_.WaitForClose());
  EXPECT_EQ(State(), Peer::State::kClosed);
}

TEST_F(ConnectionTest, AfterTheHandshakeFramesAreSealedBothWays) {
  FakeContext context;
  Handshake handshake(TestToken(), context);
  host_.on_frame = [&](Connection& conn, const wire::Frame& frame) {
    if (frame.type() == wire::HELLO) {
      wire::Hello hello;
      if (ParseOrReject(conn, frame, &hello)) handshake.HandleHello(conn, hello);
    } else if (frame.type() == wire::AUTH) {
      wire::Auth auth;
      if (ParseOrReject(conn, frame, &auth)) handshake.HandleAuth(conn, auth);
    }
  };
  RawPeer client = Connect();
  ASSERT_OK(client.Handshake(TestToken(), Soon()));

  // A sealed frame in, opened before the host sees it; a sealed frame out.
  wire::Heartbeat heartbeat;
  heartbeat.set_program_pid(42);
  ASSERT_OK(client.Send(wire::HEARTBEAT, heartbeat));
  ASSERT_TRUE(host_.WaitForFrames(3));
  ASSERT_THAT(host_.types(), ElementsAre(wire::HELLO, wire::AUTH, wire::HEARTBEAT));
  wire::State state;
  state.set_phase("formed");
  OnLoop([&] { conn_->Send(wire::STATE, state); });
  wire::State received;
  ASSERT_OK(client.Read(wire::STATE, &received, Soon()));
  EXPECT_EQ(received.phase(), "formed");

  // A frame replayed under the session is refused.
  std::string sealed = client.Seal(wire::HEARTBEAT, heartbeat.SerializeAsString());
  ASSERT_OK(client.SendBytes(sealed));
  ASSERT_OK(client.SendBytes(sealed));
  EXPECT_TRUE(host_.WaitForRejection("frame out of order (HEARTBEAT)"));
}

TEST_F(ConnectionTest, ASharedBodyGoesOutWithTheFramesOwnBytes) {
  RawPeer client = Connect();
  auto shared = std::make_shared<SharedBody>();
  wire::State part;
  part.set_phase("formed");
  shared->bytes = part.SerializeAsString();
  shared->digest.Update(shared->bytes);
  wire::State tail;
  tail.set_registered(3);
  OutFrame frame;
  frame.tail = tail.SerializeAsString();
  std::array<char, wire::kHeaderBytes> header =
      wire::EncodeHeader(wire::STATE, shared->bytes.size() + frame.tail.size());
  frame.head.assign(header.data(), header.size());
  frame.shared = shared;
  OnLoop([&] { conn_->Send(std::move(frame)); });

  wire::State received;
  ASSERT_OK(client.Read(wire::STATE, &received, Soon()));
  EXPECT_EQ(received.phase(), "formed");
  EXPECT_EQ(received.registered(), 3u);
}

}  // namespace
}  // namespace drover::rendezvous_internal

// Drives a real RendezvousServer (in this process, over loopback) with
// arbitrary frame sequences from one client: raw bytes, HELLOs with any
// fields, AUTHs with the right or a wrong key, sealed or unsealed frames of
// any type and body, valid messages of every kind, altered and replayed
// sealed frames. The input is a list of operations (see Op below), so the
// fuzzer gets through the handshake (it cannot guess a MAC) and on to what
// comes after it.
//
// Checks, besides the sanitizers: every frame the server sends after the
// handshake opens; the server keeps answering (QueryState) and shuts down; a
// client that never authenticated registered nothing and caused no event; a
// client with executor X's node credential registered nothing but X and
// stopped nobody (docs/security.md). A failed check says which on stderr.
//
// Each input gets a fresh server, so a crash reproduces from its input alone.
// The client ends with a reset: no TIME_WAIT is left to use up the ports
// over millions of runs.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "drover/rendezvous.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace {

using namespace drover;
using drover::wire::Direction;

// How long to wait for a reply the handshake needs, and for whatever else
// came (a reply missed here is read later, or at the end).
constexpr auto kReplyWait = std::chrono::milliseconds(200);
constexpr auto kGlanceWait = std::chrono::milliseconds(2);

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "handshake_fuzzer: %s\n", what);
  std::abort();
}

wire::Token ClusterKey() {
  wire::Token key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<unsigned char>(i * 7 + 1);
  return key;
}

// Reads the fuzz input front to back; past its end every read is 0 / empty.
class Input {
 public:
  explicit Input(std::string_view data) : data_(data) {}
  bool done() const { return data_.empty(); }
  uint8_t Byte() {
    if (data_.empty()) return 0;
    uint8_t b = static_cast<uint8_t>(data_.front());
    data_.remove_prefix(1);
    return b;
  }
  std::string Bytes(size_t n) {
    n = std::min(n, data_.size());
    std::string out(data_.substr(0, n));
    data_.remove_prefix(n);
    return out;
  }

 private:
  std::string_view data_;
};

// The one client connection, with the session once the handshake succeeds.
class Client {
 public:
  explicit Client(uint16_t port) : reader_(wire::kHandshakeMaxFrameBytes) {
    // Loopback connect() to a listening server fails, rarely, on a busy
    // host (seen once in CI among ~6,000 runs, never reproduced by its
    // input): the fuzz target is the server, not the kernel, so a refused
    // attempt is retried; a server that stays unreachable is still a failure.
    int last_errno = 0;
    for (int attempt = 0; attempt < 20; ++attempt) {
      if (attempt > 0) ::usleep(10'000);
      last_errno = Connect(port);
      if (last_errno == 0) return;
    }
    const std::string why =
        std::string("cannot connect to the server: ") + std::strerror(last_errno);
    Fail(why.c_str());
  }
  ~Client() { ::close(fd_); }

  void Write(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the server closed: later writes go nowhere
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  // A frame of any type: sealed once the session started, as a real client
  // would; `last_sealed_` keeps it for a replay.
  void SendFrame(uint16_t type, std::string_view body) {
    std::array<char, wire::kHeaderBytes> header =
        wire::EncodeHeader(type, static_cast<uint32_t>(body.size()));
    std::string frame(header.data(), header.size());
    frame.append(body);
    if (sealer_) {
      wire::BodyDigest digest;
      digest.Update(body);
      frame += sealer_->Trailer(std::string_view(header.data(), header.size()), digest);
      last_sealed_ = frame;
    }
    Write(frame);
  }

  // The next frame from the server within `wait`; nullopt on timeout, close
  // or a frame this client cannot read.
  std::optional<wire::Frame> Read(std::chrono::milliseconds wait = kReplyWait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      if (broken_) return std::nullopt;
      wire::Frame frame;
      wire::FrameError error;
      switch (reader_.Next(&frame, &error)) {
        case wire::FrameReader::Step::kFrame:
          if (opener_ && !opener_->Open(frame, &error))
            Fail("a frame from the server does not open");
          return frame;
        case wire::FrameReader::Step::kError:
          broken_ = true;
          return std::nullopt;
        case wire::FrameReader::Step::kNeedMore:
          break;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd pfd{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
        return std::nullopt;
      }
      char buffer[65536];
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        broken_ = true;
        return std::nullopt;
      }
      reader_.Append(std::string_view(buffer, static_cast<size_t>(n)));
    }
  }

  // Reads until a frame of `type` (nullopt if an ERROR, the close or the
  // wait comes first).
  std::optional<wire::Frame> Await(wire::MessageType type) {
    for (;;) {
      std::optional<wire::Frame> frame = Read();
      if (!frame || frame->type() == wire::ERROR) return std::nullopt;
      if (frame->type() == type) return frame;
    }
  }

  // Makes sure the server has handled everything sent (a QUERY_STATE's
  // answer comes after it), reading and checking what came; then the
  // destructor resets the connection.
  void Finish() {
    if (sealer_ && !broken_) {
      wire::Control query;
      query.set_kind(wire::Control::QUERY_STATE);
      SendFrame(wire::CONTROL, query.SerializeAsString());
      Await(wire::STATE);
    }
    while (Read(kGlanceWait)) {
    }
  }

  void StartSession(const wire::Token& session) {
    sealer_.emplace(session, Direction::kClientToServer);
    opener_.emplace(session, Direction::kServerToClient);
    reader_.set_sealed(true);
    reader_.set_max_frame_bytes(wire::kClientMaxFrameBytes);
  }

  bool in_session() const { return sealer_.has_value(); }
  const std::string& last_sealed() const { return last_sealed_; }
  std::optional<wire::FrameSealer>& sealer() { return sealer_; }

 private:
  // 0 once connected; else the errno of the failed attempt (socket closed).
  int Connect(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) Fail("socket() failed");
    // A reset on close: no TIME_WAIT piling up over millions of runs.
    linger off{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return 0;
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    return error;
  }

  int fd_ = -1;
  wire::FrameReader reader_;
  std::optional<wire::FrameSealer> sealer_;
  std::optional<wire::FrameOpener> opener_;
  std::string last_sealed_;
  bool broken_ = false;
};

// Text as a peer might send it: mostly printable, with the control
// characters a terminal would act on (valid UTF-8 either way).
std::string Text(Input& in, size_t max) {
  static constexpr char kChars[] = "abcXYZ019 :-_\x1b[]\r\n\x07";
  std::string out;
  for (size_t n = in.Byte() % (max + 1); n > 0; --n)
    out += kChars[in.Byte() % (sizeof(kChars) - 1)];
  return out;
}

std::string ExecutorId(uint8_t b) {
  static const char* const kIds[] = {"0", "1", "2", "10", "a", "", "0 1", "\x1b[31m"};
  return kIds[b % 8];
}

// A valid message body of some kind, as a client would send it.
std::pair<wire::MessageType, std::string> SomeMessage(Input& in) {
  switch (in.Byte() % 4) {
    case 0: {
      wire::Register request;
      wire::NodeInfo* node = request.mutable_node();
      node->set_executor_id(ExecutorId(in.Byte()));
      node->set_host(in.Byte() % 2 ? "127.0.0.1" : "");
      if (in.Byte() % 4) node->add_ports(20000 + in.Byte());
      return {wire::REGISTER, request.SerializeAsString()};
    }
    case 1: {
      wire::Heartbeat heartbeat;
      heartbeat.set_sequence(in.Byte());
      if (in.Byte() % 2) heartbeat.mutable_feed()->set_records(in.Byte());
      return {wire::HEARTBEAT, heartbeat.SerializeAsString()};
    }
    case 2: {
      wire::Control control;
      control.set_kind(static_cast<wire::Control::Kind>(in.Byte() % 7));
      control.set_executor_id(ExecutorId(in.Byte()));
      control.set_message(Text(in, 16));
      return {wire::CONTROL, control.SerializeAsString()};
    }
    default: {
      wire::KvRequest request;
      request.set_op(static_cast<wire::KvRequest::Op>(in.Byte() % 8));
      request.set_key(in.Bytes(in.Byte() % 8));
      request.set_value(in.Bytes(in.Byte() % 32));
      request.set_expected(in.Bytes(in.Byte() % 4));
      request.set_delta(static_cast<int8_t>(in.Byte()));
      for (int i = in.Byte() % 3; i > 0; --i) request.add_keys(in.Bytes(1 + in.Byte() % 4));
      request.set_deadline_ms(in.Byte() % 50);
      request.set_request_id(in.Byte());
      return {wire::KV_REQUEST, request.SerializeAsString()};
    }
  }
}

struct Run {
  std::string client_nonce;
  std::string server_nonce;   // the CHALLENGE's
  std::string credential_id;  // what HELLO claimed
  bool hello_sent = false;
  bool authenticated = false;
  std::string authenticated_as;  // "" : the cluster token
  std::set<std::string> proven;  // ids a host's REGISTER carried a right proof for
};

// Makes a REGISTER a host's, sometimes, with no proof, a random one, or the
// right one for this connection (docs/protocol.md, "Host connections").
std::string MaybeHostRegister(Input& in, Run& run, const std::string& body) {
  const uint8_t flags = in.Byte();
  if (flags % 2 == 0) return body;
  wire::Register request;
  if (!request.ParseFromString(body)) Fail("SomeMessage made a REGISTER that does not parse");
  request.set_host(true);
  const std::string& id = request.node().executor_id();
  switch ((flags >> 1) % 3) {
    case 0:
      break;
    case 1:
      request.set_credential_mac(in.Bytes(wire::kMacBytes));
      break;
    default: {
      Result<wire::Token> key = wire::DeriveNodeKey(ClusterKey(), id);
      if (!key.ok()) break;
      request.set_credential_mac(wire::ClaimMac(*key, run.server_nonce, run.client_nonce));
      run.proven.insert(id);
      break;
    }
  }
  return request.SerializeAsString();
}

void RunOps(Input& in, Client& client, Run& run) {
  const wire::Token cluster = ClusterKey();
  for (int ops = 0; !in.done() && ops < 64; ++ops) {
    switch (in.Byte() % 8) {
      case 0:  // raw bytes
        client.Write(in.Bytes(in.Byte()));
        break;
      case 1: {  // HELLO
        uint8_t flags = in.Byte();
        wire::Hello hello;
        run.client_nonce = std::string(flags & 1 ? wire::kNonceBytes - 1 : wire::kNonceBytes,
                                       static_cast<char>(in.Byte()));
        hello.set_client_nonce(run.client_nonce);
        hello.set_name(flags & 2 ? std::string(300, 'n') : Text(in, 16));
        run.credential_id = flags & 4 ? ExecutorId(in.Byte()) : "";
        hello.set_executor_id(run.credential_id);
        client.SendFrame(wire::HELLO, hello.SerializeAsString());
        run.hello_sent = true;
        break;
      }
      case 2: {  // AUTH, with the key HELLO named or a wrong one
        uint8_t flags = in.Byte();
        if (!run.hello_sent || client.in_session()) {
          client.SendFrame(wire::AUTH, std::string(in.Byte() % 40, 'm'));
          break;
        }
        std::optional<wire::Frame> frame = client.Await(wire::CHALLENGE);
        if (!frame) break;
        wire::Challenge challenge;
        if (!challenge.ParseFromString(frame->body)) Fail("a CHALLENGE that does not parse");
        run.server_nonce = challenge.server_nonce();
        wire::Token key = cluster;
        if (!run.credential_id.empty()) {
          Result<wire::Token> node = wire::DeriveNodeKey(cluster, run.credential_id);
          if (node.ok()) key = *node;
        }
        if (flags & 1) key[0] ^= 1;
        wire::Auth auth;
        auth.set_mac(wire::ClientMac(key, challenge.server_nonce(), run.client_nonce));
        client.SendFrame(wire::AUTH, auth.SerializeAsString());
        std::optional<wire::Frame> ok = client.Await(wire::AUTH_OK);
        if (!ok) break;
        if (flags & 1) Fail("AUTH_OK for a wrong key");
        Result<wire::Token> session =
            wire::DeriveSessionKey(key, run.client_nonce, challenge.server_nonce());
        if (!session.ok()) Fail("no session key");
        client.StartSession(*session);
        run.authenticated = true;
        run.authenticated_as = run.credential_id;
        break;
      }
      case 3: {  // any type, any body
        uint16_t type = static_cast<uint16_t>(in.Byte() % 48);
        client.SendFrame(type, in.Bytes(in.Byte()));
        break;
      }
      case 4: {  // a valid message
        auto [type, body] = SomeMessage(in);
        if (type == wire::REGISTER) body = MaybeHostRegister(in, run, body);
        client.SendFrame(type, body);
        break;
      }
      case 5: {  // a sealed frame, altered at one byte
        auto [type, body] = SomeMessage(in);
        if (!client.in_session()) break;
        std::array<char, wire::kHeaderBytes> header =
            wire::EncodeHeader(type, static_cast<uint32_t>(body.size()));
        std::string frame(header.data(), header.size());
        frame += body;
        wire::BodyDigest digest;
        digest.Update(body);
        frame += client.sealer()->Trailer(std::string_view(header.data(), header.size()), digest);
        const size_t at = in.Byte() % frame.size();
        frame[at] = static_cast<char>(frame[at] ^ (1 + in.Byte() % 255));
        client.Write(frame);
        break;
      }
      case 6:  // the last sealed frame again
        client.Write(client.last_sealed());
        break;
      default:  // read what came
        while (client.Read(kGlanceWait)) {
        }
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(std::string_view(reinterpret_cast<const char*>(data), size));
  std::atomic<bool> stopped{false};
  std::atomic<int> events{0};
  RendezvousServerOptions options;
  options.bind_address = "127.0.0.1";
  const wire::Token cluster = ClusterKey();
  options.token.bytes.assign(cluster.begin(), cluster.end());
  options.cluster.num_nodes = 1 + in.Byte() % 2;
  options.handshake_timeout = std::chrono::seconds(5);
  options.drain_timeout = std::chrono::milliseconds(100);
  options.max_kv_keys = 4;
  options.max_kv_bytes = 4096;
  options.max_kv_waits_per_connection = 2;
  // DROVER_FUZZ_LOG=1 shows the server's log (to see what an input does).
  static const bool show_log = std::getenv("DROVER_FUZZ_LOG") != nullptr;
  options.log = [](const std::string& line) {
    if (show_log) std::fprintf(stderr, "server: %s\n", line.c_str());
  };
  options.on_event = [&](const NodeEvent& event) {
    ++events;
    if (event.kind == NodeEvent::Kind::kStopped) stopped = true;
  };
  Result<std::unique_ptr<RendezvousServer>> started = RendezvousServer::Start(std::move(options));
  if (!started.ok()) Fail(started.status().ToString().c_str());
  std::unique_ptr<RendezvousServer> server = std::move(started).value();

  Run run;
  {
    Client client(server->port());
    RunOps(in, client, run);
    client.Finish();
  }
  ClusterState state = server->QueryState();
  if (state.phase.empty()) Fail("the server does not answer QueryState");
  for (const NodeStatus& node : state.nodes) {
    if (!run.authenticated) Fail("a node registered without authenticating");
    if (!run.authenticated_as.empty() && node.node.executor_id != run.authenticated_as &&
        run.proven.count(node.node.executor_id) == 0) {
      Fail("a node credential registered another slot without proving its credential");
    }
  }
  if (!run.authenticated && events != 0) Fail("an event without authenticating");
  if (!run.authenticated_as.empty() && stopped) Fail("a node credential stopped the cluster");
  server->Shutdown();
  return 0;
}

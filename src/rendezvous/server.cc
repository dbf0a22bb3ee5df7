// RendezvousServer: one Asio event loop thread owns every connection, the
// registrations, the formed cluster, the liveness table and the key-value
// store (docs/protocol.md). Public methods post work to the loop and wait for
// its answer; nothing here is touched by two threads except the few fields
// under `mu_` (the outcome WaitForCluster waits on) and `post_mu_`.

#include <google/protobuf/io/coded_stream.h>
#include <sys/socket.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "drover/host_port.h"
#include "drover/rendezvous.h"
#include "rendezvous/node_info_codec.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover {
namespace rendezvous_internal {
namespace {

using asio::ip::tcp;

constexpr size_t kReadChunk = 64 * 1024;
// Reads per wake-up before the loop yields to other connections.
constexpr int kMaxReadsPerWakeup = 16;
using wire::kMaxKvKeyBytes;
using wire::kMaxKvValueBytes;
// A peer that sends requests but does not read the replies is cut off once
// this much (not counting shared cluster bytes) waits to be written to it.
constexpr size_t kMaxQueuedBytes = 64u << 20;
// What the key-value store charges a key for its bookkeeping, on top of its
// bytes (and its value's), against max_kv_bytes: the map node, the string
// headers, a waiter's index entry.
constexpr uint64_t kKvEntryOverhead = 64;
// Long lists in error messages (4,000 executors) are cut to this many items.
constexpr size_t kMaxListedItems = 32;

// "600 s", "0.25 s".
std::string FormatSeconds(double seconds) {
  char buffer[32];
  if (seconds == static_cast<double>(static_cast<int64_t>(seconds))) {
    std::snprintf(buffer, sizeof(buffer), "%lld s", static_cast<long long>(seconds));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3g s", seconds);
  }
  return buffer;
}

std::string FormatSeconds(Milliseconds ms) {
  return FormatSeconds(ms.count() / 1000.0);
}

// Key bytes are arbitrary: escape what does not print, and cut long ones.
std::string Printable(std::string_view bytes) {
  return wire::PrintableBytes(bytes, 64);
}

std::string JoinLimited(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListedItems; ++i) {
    if (i > 0) out += ", ";
    out += items[i];
  }
  if (items.size() > kMaxListedItems) {
    out += " and " + std::to_string(items.size() - kMaxListedItems) + " more";
  }
  return out;
}

// An executor id that is a plain non-negative decimal integer.
std::optional<uint64_t> ParseExecutorNumber(const std::string& id) {
  if (id.empty()) return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
  if (ec != std::errc() || end != id.data() + id.size()) return std::nullopt;
  return value;
}

// A registration: what the node sent, less the role, which is the server's to assign.
NodeInfo RegisteredNode(const wire::NodeInfo& node) {
  NodeInfo out = rendezvous_internal::NodeFromWire(node);
  out.job_name.clear();
  out.task_index = -1;
  return out;
}

// Body bytes many frames share (the formed cluster), with their SHA-256
// state, so that sealing a frame for each connection hashes them only once.
struct SharedBody {
  std::string bytes;
  wire::BodyDigest digest;  // of `bytes`
};

// One frame to send: `head` (the header, then the body when nothing is
// shared), then, if set, `shared` (the start of the body, sent straight from
// the shared buffer with scatter-gather I/O; head is the header alone then),
// then `tail` (the rest of the body; the trailer is added to it when the
// frame is sealed).
struct OutFrame {
  std::string head;
  std::shared_ptr<const SharedBody> shared;
  std::string tail;
};

OutFrame MakeFrame(wire::MessageType type, const google::protobuf::MessageLite& body) {
  return OutFrame{wire::EncodeFrame(type, body), nullptr, {}};
}

}  // namespace

class Server;

// One TCP connection: reads and frames its bytes, writes queued frames, and
// runs its own deadline timer (handshake, unfinished frame, drain). Lives on
// the loop thread only; owned by Server::connections_ and by its pending
// handlers (shared_from_this), so a handler never sees a freed connection.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class State { kAwaitHello, kAwaitAuth, kReady, kDraining, kClosed };

  Connection(Server* server, tcp::socket socket, uint64_t id, std::string peer,
             uint32_t max_frame_bytes, Milliseconds drain_timeout)
      : server_(server),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        id_(id),
        peer_(std::move(peer)),
        reader_(wire::kHandshakeMaxFrameBytes),  // until StartSession
        max_frame_bytes_(max_frame_bytes),
        drain_timeout_(drain_timeout) {}

  void Start(Milliseconds handshake_timeout);
  void Send(OutFrame frame);
  void Send(wire::MessageType type, const google::protobuf::MessageLite& body) {
    Send(MakeFrame(type, body));
  }
  // Sends one ERROR frame, reports `reason` (log + on_rejected), then closes
  // once the frame is out and the peer has closed, or after drain_timeout
  // whatever the peer does. The connection stops handling frames at once.
  void Reject(wire::ErrorCode code, const std::string& message, const std::string& reason);
  // Closes now. A non-empty `reason` is logged and passed to on_rejected.
  void Close(const std::string& reason = "");
  // One ERROR frame, best-effort and non-blocking, then Close(): for
  // shutdown, where the loop will not wait.
  void SendErrorNowAndClose(wire::ErrorCode code, const std::string& message);
  // The handshake succeeded and AUTH_OK is queued: from now on every frame
  // either way is sealed under `session_key`, and frames may be as large as
  // max_frame_bytes.
  void StartSession(const wire::Token& session_key);
  // `reason` for the log, after whose connection this is ("executor 3: ",
  // "executor 3's credential: "), when known; the log line names the peer.
  std::string Why(const std::string& reason) const;

  uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }
  State state() const { return state_; }
  void set_state(State state) { state_ = state; }
  bool open() const { return state_ != State::kClosed && state_ != State::kDraining; }

  // Handshake and registration state, kept by Server.
  std::string client_nonce;
  std::string server_nonce;
  std::string name;             // from HELLO, escaped for logs
  std::string credential_id;    // HELLO's executor_id: "" the cluster token
  bool admin = false;           // authenticated with the cluster token
  bool unauthenticated = true;  // counted in Server::unauthenticated_
  std::string executor_id;      // "" until REGISTER
  std::vector<uint64_t> kv_waiters;

 private:
  enum class TimerKind { kNone, kHandshake, kFrame, kDrain };

  void ReadMore();
  void WaitReadable();
  void HandleBuffered();
  void ArmTimer(Milliseconds after, TimerKind kind);
  void CancelTimer();
  void OnTimer(TimerKind kind);
  void WriteNext();
  void BeginDrain();

  Server* server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  TimerKind timer_kind_ = TimerKind::kNone;
  uint64_t timer_generation_ = 0;
  Milliseconds handshake_timeout_{0};
  uint64_t id_;
  std::string peer_;
  State state_ = State::kAwaitHello;
  wire::FrameReader reader_;
  uint32_t max_frame_bytes_;
  Milliseconds drain_timeout_;
  std::optional<wire::FrameSealer> sealer_;  // set once the session starts
  std::optional<wire::FrameOpener> opener_;
  std::deque<OutFrame> out_;
  size_t queued_bytes_ = 0;  // sum of out_[i].head and .tail sizes
  bool writing_ = false;
  bool detached_ = false;  // Server::OnClosed already ran
};

// The loop's state and its handlers. RendezvousServer::Impl is this class.
class Server {
 public:
  explicit Server(RendezvousServerOptions options)
      : options_(std::move(options)),
        work_(asio::make_work_guard(io_)),
        acceptor_(io_),
        reservation_timer_(io_),
        heartbeat_timer_(io_),
        accept_retry_timer_(io_),
        read_buffer_(kReadChunk) {}
  ~Server() { Shutdown(); }

  Status Listen();
  uint16_t port() const { return port_; }
  Result<FormedCluster> WaitForCluster(Deadline deadline);
  ClusterState QueryState();
  Status StopNode(const std::string& executor_id);
  void StopAll();
  void Shutdown();

  // Loop thread only: one line of the server's own log (RendezvousServerOptions::log).
  void Log(const std::string& line) const {
    if (options_.log) return options_.log(line);
    std::string text = "drover rendezvous: " + line + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
  }

  // Loop thread only: called by Connection.
  void HandleFrame(Connection& conn, const wire::Frame& frame);
  void OnClosed(Connection& conn);
  void Rejected(const std::string& peer, const std::string& reason);
  // `conn` no longer counts as waiting to authenticate: it did, or it is
  // closed (a rejected one counts while it drains). Resumes accepting if
  // the limit paused it. Idempotent.
  void LeftHandshake(Connection& conn);
  std::vector<char>& read_buffer() { return read_buffer_; }

 private:
  struct NodeRecord {
    NodeInfo info;
    uint64_t sequence = 0;          // registration order
    Connection* conn = nullptr;     // borrowed; cleared by OnClosed
    Clock::time_point last_seen{};  // registration, then last heartbeat
    bool alive = true;
    bool left = false;  // said LEAVE: finished, not dead
    bool stop_sent = false;
    std::string error;
    std::vector<std::string> last_log_lines;
    int32_t program_pid = 0;           // from the last heartbeat
    std::optional<FeedProgress> feed;  // from the last heartbeat
  };

  struct KvWaiter {
    Connection* conn = nullptr;
    uint64_t request_id = 0;
    std::vector<std::string> keys;
    uint64_t bytes = 0;  // charged to kv_bytes_
    Milliseconds timeout{0};
    std::unique_ptr<asio::steady_timer> timer;
  };

  enum class Phase { kReserving, kFormed, kStopped };

  // Runs `fn` on the loop and returns its value, or `fallback` once the loop
  // no longer takes work.
  template <typename R>
  R RunOnLoop(std::function<R()> fn, R fallback);

  void Accept();
  void OnReservationTimeout();
  void ScheduleHeartbeatCheck();
  void CheckHeartbeats();
  void StopOnLoop();

  void HandleHello(Connection& conn, const wire::Frame& frame);
  void HandleAuth(Connection& conn, const wire::Frame& frame);
  void HandleRegister(Connection& conn, const wire::Frame& frame);
  void HandleHeartbeat(Connection& conn, const wire::Frame& frame);
  void HandleControl(Connection& conn, const wire::Frame& frame);
  void HandleKv(Connection& conn, const wire::Frame& frame);
  // True when `conn` may act for `executor_id` ("" : for no node: STOP_ALL);
  // otherwise rejects it with PERMISSION_DENIED, saying it may not `what`.
  bool Permitted(Connection& conn, const std::string& executor_id, const std::string& what);

  void RemoveRegistration(size_t index);
  void RebuildIndex();
  void FormCluster();
  void SendCluster(NodeRecord& node);
  void DeclareDead(NodeRecord& node, const std::string& why);
  bool RelayStop(NodeRecord& node, const wire::Control& control);
  void RelayStopAll();
  NodeRecord* FindNode(const std::string& executor_id);
  std::string Describe(const NodeRecord& node) const;
  std::string DescribeRegistrations() const;
  ClusterState BuildState() const;
  void Publish(Result<FormedCluster> outcome);

  // Stores `value` under `key` if the store's bounds allow; otherwise
  // fills `reply` with RESOURCE_EXHAUSTED naming the bound and `what`.
  bool KvStore(const std::string& key, std::string value, const std::string& what,
               wire::KvReply* reply);
  void KvErase(std::map<std::string, std::string>::iterator it);
  void KvNotify(const std::string& key);
  void KvFinishWaiter(uint64_t waiter_id, bool timed_out);
  std::vector<std::string> KvMissing(const KvWaiter& waiter) const;

  const RendezvousServerOptions options_;
  wire::Token token_{};
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  asio::steady_timer reservation_timer_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer accept_retry_timer_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_id_{};
  std::mutex join_mu_;

  // Guards loop_accepting_: posts happen under it, so none is posted after
  // the shutdown task (whose successors would never run).
  std::mutex post_mu_;
  bool loop_accepting_ = false;

  // The outcome WaitForCluster reports, set once by the loop.
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<FormedCluster>> outcome_;

  // ---- Loop thread only below. ----
  bool stopping_ = false;
  Phase phase_ = Phase::kReserving;
  std::string stop_reason_;        // why the phase is kStopped
  std::vector<char> read_buffer_;  // shared by every connection's reads
  uint64_t next_connection_id_ = 1;
  size_t unauthenticated_ = 0;  // connections accepted, not yet authenticated
  bool accept_paused_ = false;  // at max_unauthenticated_connections
  Clock::time_point cap_logged_at_{};
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections_;
  uint64_t next_sequence_ = 1;
  // Before the barrier in registration order, after it in slot order.
  std::vector<NodeRecord> nodes_;
  std::unordered_map<std::string, size_t> node_index_;
  std::string cluster_id_;
  // Cluster field 4 (its tag, its length, then zlib(SharedCluster)), the
  // same bytes in every node's CLUSTER frame, hashed once.
  std::shared_ptr<const SharedBody> shared_cluster_;
  size_t compressed_cluster_bytes_ = 0;
  uint64_t shared_uncompressed_bytes_ = 0;
  std::map<std::string, std::string> kv_;
  // Charged against max_kv_bytes: stored keys and values and parked WAITs'
  // keys, kKvEntryOverhead more per key.
  uint64_t kv_bytes_ = 0;
  uint64_t next_waiter_id_ = 1;
  std::unordered_map<uint64_t, KvWaiter> kv_waiters_;
  std::unordered_multimap<std::string, uint64_t> kv_waiters_by_key_;
};

// ---------------------------------------------------------------------------
// Connection

void Connection::Start(Milliseconds handshake_timeout) {
  handshake_timeout_ = handshake_timeout;
  asio::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
  ArmTimer(handshake_timeout, TimerKind::kHandshake);
  ReadMore();
}

// Reads until the socket would block, then parks on readiness. Draining the
// socket before waiting matters: the reactor is edge-triggered, so readiness
// that came before the wait was queued would otherwise be lost.
void Connection::ReadMore() {
  std::vector<char>& buffer = server_->read_buffer();
  for (int i = 0; i < kMaxReadsPerWakeup; ++i) {
    if (state_ == State::kClosed) return;
    asio::error_code ec;
    size_t n = socket_.read_some(asio::buffer(buffer), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      WaitReadable();
      return;
    }
    if (ec == asio::error::interrupted) continue;
    if (ec) {
      if (state_ == State::kDraining) {
        Close();
      } else if (reader_.mid_frame()) {
        Close("short frame: connection ended after " + std::to_string(reader_.buffered_bytes()) +
              " bytes of an unfinished frame (" + ec.message() + ")");
      } else {
        Close();
      }
      return;
    }
    if (state_ == State::kDraining) continue;  // discard
    reader_.Append(std::string_view(buffer.data(), n));
    HandleBuffered();
  }
  if (state_ == State::kClosed) return;
  // Fairness: let other connections run, then continue.
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->ReadMore(); });
}

void Connection::WaitReadable() {
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](asio::error_code ec) {
    if (self->state_ == State::kClosed) return;
    if (ec) {
      self->Close();
      return;
    }
    self->ReadMore();
  });
}

void Connection::HandleBuffered() {
  while (state_ != State::kClosed && state_ != State::kDraining) {
    wire::Frame frame;
    wire::FrameError error;
    switch (reader_.Next(&frame, &error)) {
      case wire::FrameReader::Step::kFrame:
        if (opener_ && !opener_->Open(frame, &error)) {
          Reject(error.code, error.message, Why(error.message));
          return;
        }
        server_->HandleFrame(*this, frame);
        continue;
      case wire::FrameReader::Step::kError:
        Reject(error.code, error.message, error.message);
        return;
      case wire::FrameReader::Step::kNeedMore:
        break;
    }
    break;
  }
  if (state_ != State::kReady) return;
  // After the handshake an idle connection is fine (heartbeats judge
  // liveness), but a frame once started must finish in time.
  if (reader_.mid_frame()) {
    if (timer_kind_ != TimerKind::kFrame) ArmTimer(handshake_timeout_, TimerKind::kFrame);
  } else {
    if (timer_kind_ == TimerKind::kFrame || timer_kind_ == TimerKind::kHandshake) CancelTimer();
    // Release the consumed bytes: a parked connection should hold no buffer.
    if (reader_.buffered_bytes() == 0) {
      reader_ = wire::FrameReader(max_frame_bytes_);
      reader_.set_sealed(opener_.has_value());
    }
  }
}

void Connection::ArmTimer(Milliseconds after, TimerKind kind) {
  uint64_t generation = ++timer_generation_;
  timer_kind_ = kind;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation, kind](asio::error_code ec) {
    if (ec || generation != self->timer_generation_ || self->state_ == State::kClosed) return;
    self->OnTimer(kind);
  });
}

void Connection::CancelTimer() {
  ++timer_generation_;
  timer_kind_ = TimerKind::kNone;
  timer_.cancel();
}

void Connection::OnTimer(TimerKind kind) {
  timer_kind_ = TimerKind::kNone;
  switch (kind) {
    case TimerKind::kHandshake:
      if (reader_.mid_frame()) {
        Close("short frame: " + std::to_string(reader_.buffered_bytes()) +
              " bytes of an unfinished frame, then nothing; no handshake from " + peer_ +
              " within " + FormatSeconds(handshake_timeout_));
      } else {
        Close("no handshake from " + peer_ + " within " + FormatSeconds(handshake_timeout_));
      }
      break;
    case TimerKind::kFrame:
      Close("short frame: " + std::to_string(reader_.buffered_bytes()) +
            " bytes of an unfinished frame, then nothing for " + FormatSeconds(handshake_timeout_));
      break;
    case TimerKind::kDrain:
      if (writing_) {
        server_->Log("closing connection from " + peer_ +
                     ": it did not read its ERROR frame within " + FormatSeconds(drain_timeout_) +
                     " (" + std::to_string(queued_bytes_) + " bytes unsent)");
      }
      Close();
      break;
    case TimerKind::kNone:
      break;
  }
}

std::string Connection::Why(const std::string& reason) const {
  if (!executor_id.empty()) return "executor " + Printable(executor_id) + ": " + reason;
  if (!credential_id.empty()) return "executor " + credential_id + "'s credential: " + reason;
  return reason;
}

void Connection::StartSession(const wire::Token& session_key) {
  sealer_.emplace(session_key, wire::Direction::kServerToClient);
  opener_.emplace(session_key, wire::Direction::kClientToServer);
  reader_.set_sealed(true);
  reader_.set_max_frame_bytes(max_frame_bytes_);
}

void Connection::Send(OutFrame frame) {
  if (!open()) return;
  if (sealer_) {
    // The header is the first kHeaderBytes of head; the body follows it,
    // in up to three pieces.
    std::string_view head(frame.head);
    wire::BodyDigest digest = frame.shared ? frame.shared->digest : wire::BodyDigest();
    digest.Update(head.substr(wire::kHeaderBytes));
    digest.Update(frame.tail);
    frame.tail += sealer_->Trailer(head.substr(0, wire::kHeaderBytes), digest);
  }
  queued_bytes_ += frame.head.size() + frame.tail.size();
  if (queued_bytes_ > kMaxQueuedBytes) {
    Close("peer does not read its replies: over " + std::to_string(kMaxQueuedBytes) +
          " bytes queued for it");
    return;
  }
  out_.push_back(std::move(frame));
  if (!writing_) WriteNext();
}

void Connection::WriteNext() {
  if (out_.empty() || state_ == State::kClosed) {
    writing_ = false;
    if (state_ == State::kDraining) BeginDrain();
    return;
  }
  writing_ = true;
  const OutFrame& frame = out_.front();
  std::array<asio::const_buffer, 3> buffers = {
      asio::buffer(frame.head),
      frame.shared ? asio::buffer(frame.shared->bytes) : asio::const_buffer(),
      asio::buffer(frame.tail)};
  asio::async_write(
      socket_, buffers, [self = shared_from_this()](asio::error_code ec, size_t /*bytes*/) {
        if (self->state_ == State::kClosed) return;
        if (ec) {
          self->Close();
          return;
        }
        self->queued_bytes_ -= self->out_.front().head.size() + self->out_.front().tail.size();
        self->out_.pop_front();
        self->WriteNext();
      });
}

void Connection::Reject(wire::ErrorCode code, const std::string& message,
                        const std::string& reason) {
  if (!open()) return;
  auto self = shared_from_this();  // OnClosed drops the server's reference
  server_->Rejected(peer_, reason);
  // Queue the ERROR frame first: Send() refuses once draining.
  out_.push_back(OutFrame{
      sealer_ ? sealer_->SealError(code, message) : wire::EncodeError(code, message), nullptr, {}});
  queued_bytes_ += out_.back().head.size();
  state_ = State::kDraining;
  // One deadline for writing what is queued and the peer's close: a peer
  // that stops reading cannot hold the connection (or the server's
  // shutdown) longer.
  ArmTimer(drain_timeout_, TimerKind::kDrain);
  if (!detached_) {
    detached_ = true;
    server_->OnClosed(*this);
  }
  if (!writing_) WriteNext();
}

// All is written: read (discarding) until the peer closes or the drain
// deadline passes. Closing with unread bytes would make the kernel send a
// reset, which can destroy the ERROR frame in flight.
void Connection::BeginDrain() {
  asio::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
}

void Connection::SendErrorNowAndClose(wire::ErrorCode code, const std::string& message) {
  if (state_ == State::kClosed) return;
  // Only onto an idle connection: bytes after part of a queued frame would
  // garble the stream.
  if (state_ != State::kDraining && !writing_ && socket_.is_open()) {
    std::string bytes =
        sealer_ ? sealer_->SealError(code, message) : wire::EncodeError(code, message);
    ::send(socket_.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  Close();
}

void Connection::Close(const std::string& reason) {
  if (state_ == State::kClosed) return;
  auto self = shared_from_this();  // OnClosed drops the server's reference
  if (!reason.empty() && state_ != State::kDraining) server_->Rejected(peer_, reason);
  state_ = State::kClosed;
  ++timer_generation_;
  timer_.cancel();
  asio::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  // out_ stays until the connection is destroyed: an aborted write's buffers
  // point into it.
  if (!detached_) {
    detached_ = true;
    server_->OnClosed(*this);
  }
  server_->LeftHandshake(*this);
}

// ---------------------------------------------------------------------------
// Server: public side

template <typename R>
R Server::RunOnLoop(std::function<R()> fn, R fallback) {
  if (std::this_thread::get_id() == loop_thread_id_) return fn();
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    if (!loop_accepting_) return fallback;
    asio::post(io_, [promise, fn = std::move(fn)] { promise->set_value(fn()); });
  }
  return future.get();
}

Status Server::Listen() {
  DROVER_RETURN_IF_ERROR(options_.cluster.Validate());
  if (options_.token.bytes.size() != wire::kTokenBytes) {
    return Status::InvalidArgument("the cluster token must be " +
                                   std::to_string(wire::kTokenBytes) + " bytes, got " +
                                   std::to_string(options_.token.bytes.size()));
  }
  std::copy(options_.token.bytes.begin(), options_.token.bytes.end(), token_.begin());
  if (options_.max_unauthenticated_connections == 0) {
    return Status::InvalidArgument("max_unauthenticated_connections must be at least 1");
  }
  if (options_.heartbeat_interval.count() <= 0 || options_.missed_heartbeats_until_dead <= 0) {
    return Status::InvalidArgument(
        "heartbeat_interval and missed_heartbeats_until_dead must be positive");
  }
  if (options_.cluster_id.empty()) {
    DROVER_ASSIGN_OR_RETURN(std::string nonce, wire::RandomNonce());
    cluster_id_ = wire::HexEncode(std::string_view(nonce).substr(0, 8));
  } else {
    cluster_id_ = options_.cluster_id;
  }

  asio::error_code ec;
  asio::ip::address address = asio::ip::make_address(options_.bind_address, ec);
  if (ec) {
    return Status::InvalidArgument("bind address '" + options_.bind_address +
                                   "' is not an IP address: " + ec.message());
  }
  tcp::endpoint endpoint(address, options_.port);
  std::string where = JoinHostPort(options_.bind_address, options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status::IoError("rendezvous server cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint(ec).port();

  reservation_timer_.expires_after(options_.reservation_timeout);
  reservation_timer_.async_wait([this](asio::error_code ec) {
    if (!ec && !stopping_) OnReservationTimeout();
  });
  Accept();
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    loop_accepting_ = true;
  }
  std::promise<void> started;
  std::future<void> running = started.get_future();
  thread_ = std::thread([this, &started] {
    loop_thread_id_ = std::this_thread::get_id();
    started.set_value();
    io_.run();
  });
  running.wait();
  return Status::Ok();
}

Result<FormedCluster> Server::WaitForCluster(Deadline deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, deadline, [this] { return outcome_.has_value(); })) return *outcome_;
  }
  ClusterState state = QueryState();
  return Status::DeadlineExceeded(
      "the cluster did not form before the caller's deadline: " + std::to_string(state.registered) +
      " of " + std::to_string(state.expected) + " nodes registered");
}

ClusterState Server::QueryState() {
  ClusterState stopped;
  stopped.phase = "stopped";
  stopped.expected = options_.cluster.num_nodes;
  return RunOnLoop<ClusterState>([this] { return BuildState(); }, stopped);
}

Status Server::StopNode(const std::string& executor_id) {
  return RunOnLoop<Status>(
      [this, executor_id]() -> Status {
        NodeRecord* node = FindNode(executor_id);
        if (node == nullptr) {
          return Status::NotFound("no node with executor id '" + executor_id + "' (" +
                                  DescribeRegistrations() + ")");
        }
        wire::Control control;
        control.set_kind(wire::Control::STOP_NODE);
        control.set_executor_id(executor_id);
        if (!RelayStop(*node, control)) {
          return Status::Unavailable("cannot stop " + Describe(*node) +
                                     ": its connection is closed");
        }
        return Status::Ok();
      },
      Status::Unavailable("the rendezvous server is shut down; cannot stop executor '" +
                          executor_id + "'"));
}

void Server::StopAll() {
  RunOnLoop<bool>(
      [this] {
        RelayStopAll();
        return true;
      },
      false);
}

void Server::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    if (loop_accepting_) {
      loop_accepting_ = false;
      asio::post(io_, [this] { StopOnLoop(); });
    }
  }
  if (std::this_thread::get_id() == loop_thread_id_) return;  // joined by the owner
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void Server::StopOnLoop() {
  stopping_ = true;
  Publish(Status::Unavailable("the rendezvous server shut down before the cluster formed (" +
                              DescribeRegistrations() + ")"));
  if (phase_ != Phase::kStopped) {
    phase_ = Phase::kStopped;
    stop_reason_ = "the rendezvous server is shutting down";
  }
  asio::error_code ec;
  acceptor_.close(ec);
  reservation_timer_.cancel();
  heartbeat_timer_.cancel();
  accept_retry_timer_.cancel();
  for (auto& [id, waiter] : kv_waiters_) waiter.timer->cancel();
  kv_waiters_.clear();
  kv_waiters_by_key_.clear();
  std::vector<std::shared_ptr<Connection>> all;
  all.reserve(connections_.size());
  for (auto& [id, conn] : connections_) all.push_back(conn);
  for (auto& conn : all) {
    conn->SendErrorNowAndClose(wire::STOPPED, "the rendezvous server is shutting down");
  }
  connections_.clear();
  // With no work left, io_.run() returns once the cancelled handlers ran.
  work_.reset();
}

void Server::Publish(Result<FormedCluster> outcome) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (outcome_.has_value()) return;
    outcome_.emplace(std::move(outcome));
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------------------
// Server: the loop

void Server::Accept() {
  acceptor_.async_accept([this](asio::error_code ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning.
      Log("accept failed: " + ec.message());
      accept_retry_timer_.expires_after(Milliseconds(100));
      accept_retry_timer_.async_wait([this](asio::error_code ec) {
        if (!ec && !stopping_) Accept();
      });
      return;
    }
    asio::error_code endpoint_ec;
    tcp::endpoint remote = socket.remote_endpoint(endpoint_ec);
    std::string peer = endpoint_ec ? std::string("unknown peer")
                                   : JoinHostPort(remote.address().to_string(), remote.port());
    uint64_t id = next_connection_id_++;
    auto conn = std::make_shared<Connection>(this, std::move(socket), id, std::move(peer),
                                             options_.max_frame_bytes, options_.drain_timeout);
    connections_.emplace(id, conn);
    ++unauthenticated_;
    conn->Start(options_.handshake_timeout);
    if (unauthenticated_ >= options_.max_unauthenticated_connections) {
      // Leave the rest in the kernel's backlog until one authenticates,
      // fails or times out: a flood of silent peers costs the server at
      // most this many connections (each gone within handshake_timeout).
      accept_paused_ = true;
      // Once a minute at most: a flood would hit the limit on every accept.
      Clock::time_point now = Clock::now();
      if (cap_logged_at_ == Clock::time_point{} ||
          now - cap_logged_at_ >= std::chrono::minutes(1)) {
        cap_logged_at_ = now;
        Log(std::to_string(unauthenticated_) +
            " connections are waiting to authenticate, the limit; accepting more once one of "
            "them finishes or times out");
      }
      return;
    }
    Accept();
  });
}

void Server::LeftHandshake(Connection& conn) {
  if (!conn.unauthenticated) return;
  conn.unauthenticated = false;
  --unauthenticated_;
  if (accept_paused_ && !stopping_ && unauthenticated_ < options_.max_unauthenticated_connections) {
    accept_paused_ = false;
    Accept();
  }
}

void Server::Rejected(const std::string& peer, const std::string& reason) {
  Log("closing connection from " + peer + ": " + reason);
  if (options_.on_rejected) options_.on_rejected(peer, reason);
}

void Server::OnClosed(Connection& conn) {
  for (uint64_t waiter_id : std::vector<uint64_t>(conn.kv_waiters)) {
    auto it = kv_waiters_.find(waiter_id);
    if (it == kv_waiters_.end()) continue;
    it->second.conn = nullptr;
    KvFinishWaiter(waiter_id, /*timed_out=*/false);
  }
  conn.kv_waiters.clear();
  if (!conn.executor_id.empty()) {
    auto it = node_index_.find(conn.executor_id);
    if (it != node_index_.end() && nodes_[it->second].conn == &conn) {
      NodeRecord& node = nodes_[it->second];
      node.conn = nullptr;
      if (phase_ == Phase::kReserving) {
        // A node gone before the barrier must not count towards it; a
        // retried task registers again.
        Log("executor " + node.info.executor_id + " at " + conn.peer() +
            " disconnected before the cluster formed; its registration is dropped");
        RemoveRegistration(it->second);
      } else if (phase_ == Phase::kFormed && node.alive && !node.stop_sent && !stopping_) {
        DeclareDead(node, "connection closed");
      }
    }
    conn.executor_id.clear();
  }
  connections_.erase(conn.id());
}

void Server::HandleFrame(Connection& conn, const wire::Frame& frame) {
  using wire::MessageType;
  MessageType type = frame.type();
  std::string type_name = wire::MessageType_Name(type);
  if (type == wire::ERROR) {
    wire::Error error;
    error.ParseFromString(frame.body);
    // Whatever the peer wrote reaches a terminal: escape it.
    conn.Close("peer sent ERROR " + wire::ErrorCode_Name(error.code()) + ": " +
               wire::PrintableBytes(error.message(), 256));
    return;
  }
  switch (type) {
    case wire::CHALLENGE:
    case wire::AUTH_OK:
    case wire::REGISTERED:
    case wire::CLUSTER:
    case wire::STATE:
    case wire::KV_REPLY: {
      std::string message =
          type_name + " is a server-to-client message; a server does not accept it";
      conn.Reject(wire::UNKNOWN_MESSAGE, message, message);
      return;
    }
    default:
      break;
  }
  switch (conn.state()) {
    case Connection::State::kAwaitHello:
      if (type == wire::HELLO) return HandleHello(conn, frame);
      break;
    case Connection::State::kAwaitAuth:
      if (type == wire::AUTH) return HandleAuth(conn, frame);
      break;
    case Connection::State::kReady:
      switch (type) {
        case wire::REGISTER:
          return HandleRegister(conn, frame);
        case wire::HEARTBEAT:
          return HandleHeartbeat(conn, frame);
        case wire::CONTROL:
          return HandleControl(conn, frame);
        case wire::KV_REQUEST:
          return HandleKv(conn, frame);
        default: {
          std::string message = "unexpected " + type_name + " after the handshake completed";
          conn.Reject(wire::MALFORMED, message, message);
          return;
        }
      }
    default:
      return;
  }
  std::string expected = conn.state() == Connection::State::kAwaitHello ? "HELLO" : "AUTH";
  std::string message = type_name + " before authentication: expected " + expected;
  conn.Reject(wire::NOT_AUTHENTICATED, message, message);
}

void Server::HandleHello(Connection& conn, const wire::Frame& frame) {
  wire::Hello hello;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &hello, &error))
    return conn.Reject(error.code, error.message, error.message);
  if (hello.client_nonce().size() != wire::kNonceBytes) {
    std::string message = "HELLO client_nonce must be " + std::to_string(wire::kNonceBytes) +
                          " bytes, got " + std::to_string(hello.client_nonce().size());
    return conn.Reject(wire::MALFORMED, message, message);
  }
  if (hello.name().size() > wire::kMaxHelloNameBytes) {
    std::string message = "HELLO name of " + std::to_string(hello.name().size()) +
                          " bytes is over the limit of " + std::to_string(wire::kMaxHelloNameBytes);
    return conn.Reject(wire::MALFORMED, message, message);
  }
  if (!hello.executor_id().empty()) {
    Status valid = wire::ValidateCredentialId(hello.executor_id());
    if (!valid.ok()) {
      std::string message = "HELLO executor_id: " + valid.message();
      return conn.Reject(wire::MALFORMED, message, message);
    }
  }
  Result<std::string> nonce = wire::RandomNonce();
  if (!nonce.ok()) {
    Log("cannot make a nonce: " + nonce.status().ToString());
    return conn.Close("server could not make a nonce");
  }
  conn.client_nonce = hello.client_nonce();
  conn.server_nonce = *nonce;
  // From an unauthenticated peer, on its way to logs and terminals.
  conn.name = wire::PrintableBytes(hello.name(), 64);
  conn.credential_id = hello.executor_id();  // validated: printable, no spaces
  conn.set_state(Connection::State::kAwaitAuth);
  wire::Challenge challenge;
  challenge.set_server_nonce(conn.server_nonce);
  conn.Send(wire::CHALLENGE, challenge);
}

void Server::HandleAuth(Connection& conn, const wire::Frame& frame) {
  wire::Auth auth;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &auth, &error))
    return conn.Reject(error.code, error.message, error.message);
  // The key HELLO named: the cluster token, or the node credential the
  // driver derived for that executor id (docs/security.md).
  Result<wire::Token> key = conn.credential_id.empty()
                                ? Result<wire::Token>(token_)
                                : wire::DeriveNodeKey(token_, conn.credential_id);
  Result<wire::Token> session =
      key.ok() ? wire::DeriveSessionKey(*key, conn.client_nonce, conn.server_nonce) : key;
  if (!session.ok()) {
    Log("cannot derive keys: " + session.status().ToString());
    return conn.Close("server could not derive the session key");
  }
  std::string expected = wire::ClientMac(*key, conn.server_nonce, conn.client_nonce);
  if (!wire::ConstantTimeEquals(auth.mac(), expected)) {
    std::string who = conn.name.empty() ? "" : " (" + conn.name + ")";
    std::string message =
        conn.credential_id.empty()
            ? "authentication failed: wrong token"
            : "authentication failed: wrong node credential for executor " + conn.credential_id;
    return conn.Reject(wire::AUTH_FAILED, message, message + who);
  }
  conn.set_state(Connection::State::kReady);
  conn.admin = conn.credential_id.empty();
  LeftHandshake(conn);
  wire::AuthOk ok;
  ok.set_mac(wire::ServerMac(*key, conn.client_nonce, conn.server_nonce));
  conn.Send(wire::AUTH_OK, ok);
  conn.StartSession(*session);
}

// A node's credential covers its own slot only (docs/security.md); the
// cluster token covers everything. A refusal costs the sender its connection.
bool Server::Permitted(Connection& conn, const std::string& executor_id, const std::string& what) {
  if (conn.admin || executor_id == conn.credential_id) return true;
  std::string message =
      "the node credential of executor " + conn.credential_id + " may not " + what;
  conn.Reject(wire::PERMISSION_DENIED, message, conn.Why(message));
  return false;
}

void Server::HandleRegister(Connection& conn, const wire::Frame& frame) {
  wire::Register request;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &request, &error))
    return conn.Reject(error.code, error.message, error.message);
  std::string missing;
  if (!request.has_node()) {
    missing = "REGISTER needs a node";
  } else if (request.node().executor_id().empty()) {
    missing = "REGISTER needs an executor_id";
  } else if (request.node().host().empty()) {
    missing = "REGISTER needs a host (executor " + request.node().executor_id() + ")";
  } else if (request.node().ports().empty()) {
    missing = "REGISTER needs at least one port (executor " + request.node().executor_id() + ")";
  }
  if (!missing.empty()) return conn.Reject(wire::MALFORMED, missing, missing);
  NodeInfo info = RegisteredNode(request.node());
  const std::string id = info.executor_id;  // a copy: info is moved below
  if (!Permitted(conn, id, "register executor " + wire::PrintableBytes(id, 64))) return;

  if (phase_ == Phase::kStopped) {
    std::string message = "executor " + id + " cannot register: " + stop_reason_;
    return conn.Reject(wire::STOPPED, message, message);
  }
  if (phase_ == Phase::kFormed) {
    NodeRecord* node = FindNode(id);
    if (node == nullptr || !node->alive) {
      std::string message = "cluster already formed with " + std::to_string(nodes_.size()) +
                            " nodes; executor " + id + " was not part of it";
      if (node != nullptr) {
        message = "cluster already formed with " + std::to_string(nodes_.size()) +
                  " nodes; executor " + id + " was declared dead: " + node->error;
      }
      return conn.Reject(wire::CLUSTER_FORMED, message, message);
    }
    // A member reconnecting (a retried agent): it takes over its slot and
    // gets the cluster again.
    if (node->conn != nullptr && node->conn != &conn) {
      Connection* old = node->conn;
      old->executor_id.clear();
      old->Close();
    }
    node->conn = &conn;
    node->last_seen = Clock::now();
    conn.executor_id = id;
    wire::Registered registered;
    registered.set_registered(static_cast<uint32_t>(nodes_.size()));
    registered.set_expected(static_cast<uint32_t>(options_.cluster.num_nodes));
    conn.Send(wire::REGISTERED, registered);
    SendCluster(*node);
    return;
  }

  // Reserving. A connection that registered under another id gives it up.
  if (!conn.executor_id.empty() && conn.executor_id != id) {
    auto it = node_index_.find(conn.executor_id);
    if (it != node_index_.end() && nodes_[it->second].conn == &conn) RemoveRegistration(it->second);
    conn.executor_id.clear();
  }
  auto it = node_index_.find(id);
  if (it != node_index_.end()) {
    // A retried task is not a duplicate: the new registration replaces the old.
    NodeRecord& node = nodes_[it->second];
    if (node.conn != nullptr && node.conn != &conn) {
      Connection* old = node.conn;
      Log("executor " + id + " registered again from " + conn.peer() +
          "; dropping its earlier connection from " + old->peer());
      node.conn = nullptr;
      old->executor_id.clear();
      old->Close();
    }
    node.info = std::move(info);
    node.sequence = next_sequence_++;
    node.conn = &conn;
    node.last_seen = Clock::now();
  } else {
    NodeRecord node;
    node.info = std::move(info);
    node.sequence = next_sequence_++;
    node.conn = &conn;
    node.last_seen = Clock::now();
    node_index_.emplace(id, nodes_.size());
    nodes_.push_back(std::move(node));
  }
  conn.executor_id = id;
  wire::Registered registered;
  registered.set_registered(static_cast<uint32_t>(nodes_.size()));
  registered.set_expected(static_cast<uint32_t>(options_.cluster.num_nodes));
  conn.Send(wire::REGISTERED, registered);
  if (static_cast<int>(nodes_.size()) >= options_.cluster.num_nodes) FormCluster();
}

void Server::RemoveRegistration(size_t index) {
  nodes_.erase(nodes_.begin() + static_cast<ptrdiff_t>(index));
  RebuildIndex();
}

void Server::RebuildIndex() {
  node_index_.clear();
  node_index_.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) node_index_.emplace(nodes_[i].info.executor_id, i);
}

Server::NodeRecord* Server::FindNode(const std::string& executor_id) {
  auto it = node_index_.find(executor_id);
  return it == node_index_.end() ? nullptr : &nodes_[it->second];
}

// Integer executor ids first, in numeric order, then the others in string
// order; equal keys ("01" and "1") in registration order. (Comparing mixed
// ids pairwise — numbers as numbers, else as strings — is not a strict weak
// order, so the integer ids form their own group.)
void Server::FormCluster() {
  Clock::time_point started = Clock::now();
  struct Key {
    std::optional<uint64_t> number;
    const std::string* id;
    uint64_t sequence;
  };
  std::vector<std::pair<Key, size_t>> order;
  order.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    order.push_back({Key{ParseExecutorNumber(nodes_[i].info.executor_id),
                         &nodes_[i].info.executor_id, nodes_[i].sequence},
                     i});
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const Key& x = a.first;
    const Key& y = b.first;
    if (x.number.has_value() != y.number.has_value()) return x.number.has_value();
    if (x.number.has_value() && *x.number != *y.number) return *x.number < *y.number;
    if (!x.number.has_value() && *x.id != *y.id) return *x.id < *y.id;
    return x.sequence < y.sequence;
  });
  std::vector<NodeRecord> slotted;
  slotted.reserve(nodes_.size());
  for (auto& [key, index] : order) slotted.push_back(std::move(nodes_[index]));
  nodes_ = std::move(slotted);
  RebuildIndex();

  FormedCluster formed;
  formed.cluster_id = cluster_id_;
  formed.heartbeat_interval = options_.heartbeat_interval;
  wire::SharedCluster shared;
  shared.set_cluster_id(cluster_id_);
  Clock::time_point now = Clock::now();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeRecord& node = nodes_[i];
    auto [job, index] = options_.cluster.Slot(static_cast<int>(i));
    node.info.job_name = job;
    node.info.task_index = index;
    node.last_seen = now;
    Status status =
        formed.spec.SetTask(job, index, JoinHostPort(node.info.host, node.info.ports[0]));
    if (!status.ok()) Log("cluster spec: " + status.ToString());
    formed.nodes.push_back(node.info);
    *shared.add_nodes() = rendezvous_internal::NodeToWire(node.info);
  }
  shared.set_cluster_def(formed.spec.AsClusterDef());

  // Encode once, compress once; every node's frame borrows these bytes.
  std::string plain = shared.SerializeAsString();
  uLongf compressed_size = compressBound(static_cast<uLong>(plain.size()));
  std::string compressed(compressed_size, '\0');
  int rc = compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_size,
                     reinterpret_cast<const Bytef*>(plain.data()), static_cast<uLong>(plain.size()),
                     Z_BEST_SPEED);
  if (rc != Z_OK) {
    Log("zlib compress2 failed with code " + std::to_string(rc));
    Publish(
        Status::Internal("compressing the cluster failed (zlib code " + std::to_string(rc) + ")"));
    return;
  }
  compressed.resize(compressed_size);
  shared_uncompressed_bytes_ = plain.size();
  compressed_cluster_bytes_ = compressed.size();
  auto shared_body = std::make_shared<SharedBody>();
  uint8_t field[16];
  uint8_t* field_end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
      (wire::Cluster::kSharedFieldNumber << 3) | 2 /* length-delimited */, field);
  field_end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
      static_cast<uint32_t>(compressed.size()), field_end);
  shared_body->bytes.reserve(static_cast<size_t>(field_end - field) + compressed.size());
  shared_body->bytes.append(reinterpret_cast<const char*>(field),
                            static_cast<size_t>(field_end - field));
  shared_body->bytes.append(compressed);
  shared_body->digest.Update(shared_body->bytes);
  shared_cluster_ = std::move(shared_body);
  if (compressed_cluster_bytes_ + 64 > wire::kClientMaxFrameBytes) {
    Log("the compressed cluster is " + std::to_string(compressed_cluster_bytes_) +
        " bytes, over a client's frame limit of " + std::to_string(wire::kClientMaxFrameBytes));
  }

  phase_ = Phase::kFormed;
  reservation_timer_.cancel();
  for (NodeRecord& node : nodes_) SendCluster(node);
  Log("cluster " + cluster_id_ + " formed with " + std::to_string(nodes_.size()) + " nodes (" +
      std::to_string(plain.size()) + " bytes of shared cluster, " +
      std::to_string(compressed_cluster_bytes_) + " compressed; " +
      std::to_string(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count()) +
      " us to encode and queue)");
  Publish(std::move(formed));
  ScheduleHeartbeatCheck();
}

// A node's CLUSTER frame is header | Cluster field 4 (tag, length, the shared
// compressed bytes) | fields 1, 2, 3, 5 | the trailer. Protobuf parsers
// accept fields in any order, so this is a valid Cluster encoding, and it
// lets the shared bytes (the same for every node) go out by scatter-gather
// straight from one buffer and be hashed once: per node only a few dozen
// bytes are encoded and hashed, nothing is copied.
void Server::SendCluster(NodeRecord& node) {
  if (node.conn == nullptr || !shared_cluster_) return;
  wire::Cluster own;
  own.set_job_name(node.info.job_name);
  own.set_task_index(node.info.task_index);
  own.set_heartbeat_interval_ms(static_cast<uint32_t>(options_.heartbeat_interval.count()));
  own.set_shared_uncompressed_bytes(shared_uncompressed_bytes_);
  OutFrame frame;
  frame.tail = own.SerializeAsString();
  size_t body_size = shared_cluster_->bytes.size() + frame.tail.size();
  std::array<char, wire::kHeaderBytes> header =
      wire::EncodeHeader(wire::CLUSTER, static_cast<uint32_t>(body_size));
  frame.head.assign(header.data(), header.size());
  frame.shared = shared_cluster_;
  node.conn->Send(std::move(frame));
}

std::string Server::Describe(const NodeRecord& node) const {
  std::string text = "executor " + node.info.executor_id;
  if (!node.info.job_name.empty()) {
    text += " (" + node.info.job_name + ":" + std::to_string(node.info.task_index) + ")";
  }
  return text;
}

std::string Server::DescribeRegistrations() const {
  std::vector<std::string> ids;
  for (const NodeRecord& node : nodes_) ids.push_back(node.info.executor_id);
  std::string text = std::to_string(nodes_.size()) + " of " +
                     std::to_string(options_.cluster.num_nodes) + " nodes registered";
  if (!ids.empty() && phase_ == Phase::kReserving) text += " (executors " + JoinLimited(ids) + ")";
  return text;
}

void Server::OnReservationTimeout() {
  if (phase_ != Phase::kReserving) return;
  // The registered nodes would take the first slots in executor-id order;
  // the slots after them are the missing ones.
  std::vector<std::pair<std::optional<uint64_t>, std::string>> ids;
  for (const NodeRecord& node : nodes_) {
    ids.emplace_back(ParseExecutorNumber(node.info.executor_id), node.info.executor_id);
  }
  std::sort(ids.begin(), ids.end(), [](const auto& a, const auto& b) {
    if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
    if (a.first.has_value() && *a.first != *b.first) return *a.first < *b.first;
    return a.second < b.second;
  });
  std::vector<std::string> registered;
  for (const auto& id : ids) registered.push_back(id.second);
  std::vector<std::string> missing;
  for (int i = static_cast<int>(ids.size()); i < options_.cluster.num_nodes; ++i) {
    auto [job, index] = options_.cluster.Slot(i);
    missing.push_back(job + ":" + std::to_string(index));
  }
  std::string message = "reservation timed out after " +
                        FormatSeconds(options_.reservation_timeout) + ": " +
                        std::to_string(ids.size()) + " of " +
                        std::to_string(options_.cluster.num_nodes) + " nodes registered";
  if (!registered.empty()) message += " (executors " + JoinLimited(registered) + ")";
  message += "; missing " + std::to_string(missing.size()) + " (" + JoinLimited(missing) + ")";
  Log(message);

  phase_ = Phase::kStopped;
  stop_reason_ = message;
  std::vector<Connection*> waiting;
  for (NodeRecord& node : nodes_) {
    if (node.conn != nullptr) waiting.push_back(node.conn);
  }
  for (Connection* conn : waiting) conn->Reject(wire::RESERVATION_TIMEOUT, message, message);
  Publish(Status::DeadlineExceeded(message));
}

void Server::ScheduleHeartbeatCheck() {
  if (stopping_) return;
  heartbeat_timer_.expires_after(options_.heartbeat_interval);
  heartbeat_timer_.async_wait([this](asio::error_code ec) {
    if (ec || stopping_) return;
    CheckHeartbeats();
    ScheduleHeartbeatCheck();
  });
}

void Server::CheckHeartbeats() {
  if (phase_ != Phase::kFormed) return;
  Clock::time_point now = Clock::now();
  auto limit = options_.heartbeat_interval * options_.missed_heartbeats_until_dead;
  for (NodeRecord& node : nodes_) {
    if (!node.alive || node.stop_sent) continue;
    auto silent = now - node.last_seen;
    if (silent <= limit) continue;
    double seconds = std::chrono::duration<double>(silent).count();
    char age[32];
    std::snprintf(age, sizeof(age), "%.1f s", seconds);
    Connection* conn = node.conn;
    DeclareDead(node, "missed " + std::to_string(options_.missed_heartbeats_until_dead) +
                          " heartbeats (last " + age + " ago)");
    if (conn != nullptr) {
      node.conn = nullptr;
      conn->executor_id.clear();
      conn->Close();
    }
  }
}

void Server::DeclareDead(NodeRecord& node, const std::string& why) {
  if (!node.alive) return;
  node.alive = false;
  std::string message = Describe(node) + (why.rfind("missed", 0) == 0 ? " " : ": ") + why;
  // An error the node reported itself says more than how its connection ended.
  if (node.error.empty()) node.error = message;
  Log(message + "; declared dead");
  if (options_.on_event) {
    NodeEvent event{NodeEvent::Kind::kDead, node.info, message, node.last_log_lines};
    options_.on_event(event);
  }
}

void Server::HandleHeartbeat(Connection& conn, const wire::Frame& frame) {
  wire::Heartbeat heartbeat;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &heartbeat, &error))
    return conn.Reject(error.code, error.message, error.message);
  if (conn.executor_id.empty()) return;
  NodeRecord* node = FindNode(conn.executor_id);
  if (node == nullptr || node->conn != &conn) return;
  node->last_seen = Clock::now();
  node->program_pid = heartbeat.program_pid();
  if (heartbeat.has_feed())
    node->feed = rendezvous_internal::FeedProgressFromWire(heartbeat.feed());
}

bool Server::RelayStop(NodeRecord& node, const wire::Control& control) {
  node.stop_sent = true;
  if (node.conn == nullptr || !node.conn->open()) return false;
  node.conn->Send(wire::CONTROL, control);
  return true;
}

void Server::RelayStopAll() {
  wire::Control control;
  control.set_kind(wire::Control::STOP_ALL);
  for (NodeRecord& node : nodes_) RelayStop(node, control);
}

void Server::HandleControl(Connection& conn, const wire::Frame& frame) {
  wire::Control control;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &control, &error))
    return conn.Reject(error.code, error.message, error.message);
  switch (control.kind()) {
    case wire::Control::REPORT_ERROR: {
      std::string id = control.executor_id().empty() ? conn.executor_id : control.executor_id();
      if (!Permitted(conn, id, "report an error for executor " + wire::PrintableBytes(id, 64))) {
        return;
      }
      NodeRecord* node = FindNode(id);
      NodeInfo info;
      info.executor_id = id;
      std::vector<std::string> lines(control.last_log_lines().begin(),
                                     control.last_log_lines().end());
      if (node != nullptr) {
        node->error = control.message();
        node->last_log_lines = lines;
        info = node->info;
        Log(Describe(*node) + " reported an error: " + control.message());
      } else {
        Log("REPORT_ERROR for unknown executor '" + id + "' from " + conn.peer() + ": " +
            control.message());
      }
      if (options_.on_event) {
        NodeEvent event{NodeEvent::Kind::kError, std::move(info), control.message(),
                        std::move(lines)};
        options_.on_event(event);
      }
      return;
    }
    case wire::Control::QUERY_STATE: {
      ClusterState state = BuildState();
      if (!conn.admin) {
        // A node sees every node's place and liveness (CLUSTER told it the
        // places already), and only its own errors and last lines.
        for (NodeStatus& status : state.nodes) {
          if (status.node.executor_id == conn.credential_id) continue;
          status.error.clear();
          status.last_log_lines.clear();
        }
      }
      wire::State reply;
      reply.set_phase(state.phase);
      reply.set_registered(static_cast<uint32_t>(state.registered));
      reply.set_expected(static_cast<uint32_t>(state.expected));
      for (const NodeStatus& status : state.nodes) {
        wire::NodeState* out = reply.add_nodes();
        *out->mutable_node() = rendezvous_internal::NodeToWire(status.node);
        out->set_alive(status.alive);
        out->set_left(status.left);
        out->set_last_heartbeat_age_ms(static_cast<uint64_t>(status.last_heartbeat_age.count()));
        out->set_program_pid(status.program_pid);
        if (status.feed) {
          *out->mutable_feed() = rendezvous_internal::FeedProgressToWire(*status.feed);
        }
        out->set_error(status.error);
        for (const std::string& line : status.last_log_lines) out->add_last_log_lines(line);
      }
      conn.Send(wire::STATE, reply);
      return;
    }
    case wire::Control::STOP_ALL: {
      if (!Permitted(conn, "", "stop all nodes")) return;
      NodeRecord* requester = conn.executor_id.empty() ? nullptr : FindNode(conn.executor_id);
      std::string who = requester != nullptr ? Describe(*requester) : conn.peer();
      Log(who + " asked to stop all nodes");
      RelayStopAll();
      if (options_.on_event) {
        NodeEvent event{NodeEvent::Kind::kStopped,
                        requester ? requester->info : NodeInfo{},
                        who + " asked to stop all nodes",
                        {}};
        options_.on_event(event);
      }
      return;
    }
    case wire::Control::LEAVE: {
      NodeRecord* node = conn.executor_id.empty() ? nullptr : FindNode(conn.executor_id);
      if (node == nullptr || node->conn != &conn) {
        Log("LEAVE from " + conn.peer() + ", which is no registered node");
        return;
      }
      if (node->alive) {
        node->alive = false;
        node->left = true;
        Log(Describe(*node) + " finished and left");
        if (options_.on_event) {
          options_.on_event(NodeEvent{NodeEvent::Kind::kLeft, node->info, "finished and left", {}});
        }
      }
      return;
    }
    case wire::Control::STOP_NODE: {
      if (!Permitted(conn, "",
                     "stop executor " + wire::PrintableBytes(control.executor_id(), 64))) {
        return;
      }
      NodeRecord* node = FindNode(control.executor_id());
      if (node == nullptr) {
        Log("STOP_NODE from " + conn.peer() + " names unknown executor '" + control.executor_id() +
            "'");
        return;
      }
      wire::Control relay;
      relay.set_kind(wire::Control::STOP_NODE);
      relay.set_executor_id(control.executor_id());
      if (!RelayStop(*node, relay)) Log("cannot stop " + Describe(*node) + ": connection closed");
      return;
    }
    default: {
      std::string message = "CONTROL with unknown kind " + std::to_string(control.kind());
      return conn.Reject(wire::MALFORMED, message, message);
    }
  }
}

ClusterState Server::BuildState() const {
  ClusterState state;
  switch (phase_) {
    case Phase::kReserving:
      state.phase = "reserving";
      break;
    case Phase::kFormed:
      state.phase = "formed";
      break;
    case Phase::kStopped:
      state.phase = "stopped";
      break;
  }
  state.registered = static_cast<int>(nodes_.size());
  state.expected = options_.cluster.num_nodes;
  Clock::time_point now = Clock::now();
  state.nodes.reserve(nodes_.size());
  for (const NodeRecord& node : nodes_) {
    NodeStatus status;
    status.node = node.info;
    status.alive = node.alive;
    status.left = node.left;
    status.last_heartbeat_age = std::chrono::duration_cast<Milliseconds>(now - node.last_seen);
    status.error = node.error;
    status.last_log_lines = node.last_log_lines;
    status.program_pid = node.program_pid;
    status.feed = node.feed;
    state.nodes.push_back(std::move(status));
  }
  return state;
}

// ---------------------------------------------------------------------------
// Key-value store (TCPStore semantics)

void Server::HandleKv(Connection& conn, const wire::Frame& frame) {
  wire::KvRequest request;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &request, &error))
    return conn.Reject(error.code, error.message, error.message);
  wire::KvReply reply;
  reply.set_request_id(request.request_id());
  auto fail = [&](wire::ErrorCode code, std::string message) {
    reply.set_code(code);
    reply.set_message(std::move(message));
    conn.Send(wire::KV_REPLY, reply);
  };
  const std::string& key = request.key();
  bool keyed = request.op() != wire::KvRequest::WAIT;
  if (keyed && key.empty()) {
    return fail(wire::MALFORMED, wire::KvRequest::Op_Name(request.op()) + " needs a key");
  }
  if (key.size() > kMaxKvKeyBytes) {
    return fail(wire::MALFORMED, "key of " + std::to_string(key.size()) +
                                     " bytes is over the limit of " +
                                     std::to_string(kMaxKvKeyBytes));
  }
  if (request.value().size() > kMaxKvValueBytes) {
    return fail(wire::MALFORMED, "value of " + std::to_string(request.value().size()) +
                                     " bytes for key '" + Printable(key) +
                                     "' is over the limit of " + std::to_string(kMaxKvValueBytes));
  }
  switch (request.op()) {
    case wire::KvRequest::SET:
      if (!KvStore(key, request.value(), "SET", &reply)) return conn.Send(wire::KV_REPLY, reply);
      conn.Send(wire::KV_REPLY, reply);
      KvNotify(key);
      return;
    case wire::KvRequest::GET: {
      auto it = kv_.find(key);
      if (it != kv_.end()) {
        reply.set_found(true);
        reply.set_value(it->second);
      } else {
        reply.set_code(wire::NOT_FOUND);
        reply.set_message("no key '" + Printable(key) + "'");
      }
      conn.Send(wire::KV_REPLY, reply);
      return;
    }
    case wire::KvRequest::ADD: {
      int64_t current = 0;
      auto it = kv_.find(key);
      if (it != kv_.end()) {
        const std::string& text = it->second;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
        if (ec != std::errc() || end != text.data() + text.size()) {
          return fail(wire::MALFORMED, "ADD to key '" + Printable(key) + "': its value '" +
                                           Printable(text) + "' is not a decimal integer");
        }
      }
      int64_t result = 0;
      if (__builtin_add_overflow(current, request.delta(), &result)) {
        return fail(wire::MALFORMED, "ADD to key '" + Printable(key) + "' overflows int64");
      }
      if (!KvStore(key, std::to_string(result), "ADD", &reply)) {
        return conn.Send(wire::KV_REPLY, reply);
      }
      reply.set_found(true);
      reply.set_number(result);
      reply.set_value(std::to_string(result));
      conn.Send(wire::KV_REPLY, reply);
      KvNotify(key);
      return;
    }
    case wire::KvRequest::COMPARE_SET: {
      auto it = kv_.find(key);
      bool matches =
          it == kv_.end() ? request.expected().empty() : it->second == request.expected();
      if (matches) {
        if (!KvStore(key, request.value(), "COMPARE_SET", &reply)) {
          return conn.Send(wire::KV_REPLY, reply);
        }
        it = kv_.find(key);
      }
      if (it != kv_.end()) {
        reply.set_found(true);
        reply.set_value(it->second);
      }
      conn.Send(wire::KV_REPLY, reply);
      if (matches) KvNotify(key);
      return;
    }
    case wire::KvRequest::DELETE: {
      if (auto it = kv_.find(key); it != kv_.end()) {
        KvErase(it);
        reply.set_found(true);
      } else {
        reply.set_code(wire::NOT_FOUND);
        reply.set_message("no key '" + Printable(key) + "'");
      }
      conn.Send(wire::KV_REPLY, reply);
      return;
    }
    case wire::KvRequest::WAIT: {
      if (request.keys().empty()) return fail(wire::MALFORMED, "WAIT needs at least one key");
      KvWaiter waiter;
      waiter.conn = &conn;
      waiter.request_id = request.request_id();
      for (const std::string& wait_key : request.keys()) {
        if (wait_key.empty() || wait_key.size() > kMaxKvKeyBytes) {
          return fail(wire::MALFORMED, "WAIT key of " + std::to_string(wait_key.size()) +
                                           " bytes: keys must be 1 to " +
                                           std::to_string(kMaxKvKeyBytes) + " bytes");
        }
        waiter.keys.push_back(wait_key);
      }
      if (KvMissing(waiter).empty()) {
        conn.Send(wire::KV_REPLY, reply);
        return;
      }
      if (conn.kv_waiters.size() >= options_.max_kv_waits_per_connection) {
        return fail(wire::RESOURCE_EXHAUSTED, "this connection has " +
                                                  std::to_string(conn.kv_waiters.size()) +
                                                  " WAITs parked, its limit; WAIT refused");
      }
      if (kv_waiters_.size() >= options_.max_kv_waits) {
        return fail(wire::RESOURCE_EXHAUSTED, std::to_string(kv_waiters_.size()) +
                                                  " WAITs are parked, the server's limit; WAIT "
                                                  "refused");
      }
      for (const std::string& wait_key : waiter.keys) {
        waiter.bytes += wait_key.size() + kKvEntryOverhead;
      }
      if (kv_bytes_ + waiter.bytes > options_.max_kv_bytes) {
        return fail(wire::RESOURCE_EXHAUSTED,
                    "the key-value store is full: " + std::to_string(kv_bytes_) + " of " +
                        std::to_string(options_.max_kv_bytes) + " bytes used; WAIT for " +
                        std::to_string(waiter.keys.size()) + " keys (" +
                        std::to_string(waiter.bytes) + " bytes) refused");
      }
      kv_bytes_ += waiter.bytes;
      waiter.timeout =
          Milliseconds(std::min<uint64_t>(request.deadline_ms(), uint64_t{24} * 3600 * 1000 * 365));
      uint64_t waiter_id = next_waiter_id_++;
      waiter.timer = std::make_unique<asio::steady_timer>(io_);
      waiter.timer->expires_after(waiter.timeout);
      waiter.timer->async_wait([this, waiter_id](asio::error_code ec) {
        if (ec || stopping_) return;
        KvFinishWaiter(waiter_id, /*timed_out=*/true);
      });
      for (const std::string& wait_key : waiter.keys) {
        kv_waiters_by_key_.emplace(wait_key, waiter_id);
      }
      conn.kv_waiters.push_back(waiter_id);
      kv_waiters_.emplace(waiter_id, std::move(waiter));
      return;
    }
    default:
      return fail(wire::MALFORMED,
                  "KV_REQUEST with unknown op " + std::to_string(static_cast<int>(request.op())));
  }
}

bool Server::KvStore(const std::string& key, std::string value, const std::string& what,
                     wire::KvReply* reply) {
  auto it = kv_.find(key);
  const uint64_t now = it == kv_.end() ? 0 : key.size() + it->second.size() + kKvEntryOverhead;
  const uint64_t after = key.size() + value.size() + kKvEntryOverhead;
  std::string refusal;
  if (it == kv_.end() && kv_.size() >= options_.max_kv_keys) {
    refusal = "the key-value store holds " + std::to_string(kv_.size()) + " keys, its limit; " +
              what + " of new key '" + Printable(key) + "' refused";
  } else if (after > now && kv_bytes_ - now + after > options_.max_kv_bytes) {
    refusal = "the key-value store is full: " + std::to_string(kv_bytes_) + " of " +
              std::to_string(options_.max_kv_bytes) + " bytes used; " + what + " of '" +
              Printable(key) + "' (" + std::to_string(after) + " bytes) refused";
  }
  if (!refusal.empty()) {
    reply->set_code(wire::RESOURCE_EXHAUSTED);
    reply->set_message(std::move(refusal));
    return false;
  }
  kv_bytes_ = kv_bytes_ - now + after;
  if (it == kv_.end()) {
    kv_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return true;
}

void Server::KvErase(std::map<std::string, std::string>::iterator it) {
  kv_bytes_ -= it->first.size() + it->second.size() + kKvEntryOverhead;
  kv_.erase(it);
}

std::vector<std::string> Server::KvMissing(const KvWaiter& waiter) const {
  std::vector<std::string> missing;
  for (const std::string& key : waiter.keys) {
    if (kv_.find(key) == kv_.end()) missing.push_back(key);
  }
  return missing;
}

void Server::KvNotify(const std::string& key) {
  auto [begin, end] = kv_waiters_by_key_.equal_range(key);
  std::vector<uint64_t> candidates;
  for (auto it = begin; it != end; ++it) candidates.push_back(it->second);
  for (uint64_t waiter_id : candidates) {
    auto it = kv_waiters_.find(waiter_id);
    if (it != kv_waiters_.end() && KvMissing(it->second).empty()) {
      KvFinishWaiter(waiter_id, /*timed_out=*/false);
    }
  }
}

// Replies (unless the connection is gone) and forgets the waiter.
void Server::KvFinishWaiter(uint64_t waiter_id, bool timed_out) {
  auto it = kv_waiters_.find(waiter_id);
  if (it == kv_waiters_.end()) return;
  KvWaiter waiter = std::move(it->second);
  kv_waiters_.erase(it);
  kv_bytes_ -= waiter.bytes;
  waiter.timer->cancel();
  for (const std::string& key : waiter.keys) {
    auto [begin, end] = kv_waiters_by_key_.equal_range(key);
    for (auto entry = begin; entry != end; ++entry) {
      if (entry->second == waiter_id) {
        kv_waiters_by_key_.erase(entry);
        break;
      }
    }
  }
  if (waiter.conn == nullptr) return;
  auto& ids = waiter.conn->kv_waiters;
  ids.erase(std::remove(ids.begin(), ids.end(), waiter_id), ids.end());
  wire::KvReply reply;
  reply.set_request_id(waiter.request_id);
  if (timed_out) {
    std::vector<std::string> missing;
    for (const std::string& key : KvMissing(waiter)) missing.push_back("'" + Printable(key) + "'");
    reply.set_code(wire::TIMEOUT);
    reply.set_message("WAIT timed out after " + std::to_string(waiter.timeout.count()) +
                      " ms; keys still missing: " + JoinLimited(missing));
  }
  waiter.conn->Send(wire::KV_REPLY, reply);
}

}  // namespace rendezvous_internal

// ---------------------------------------------------------------------------
// RendezvousServer

class RendezvousServer::Impl : public rendezvous_internal::Server {
 public:
  using Server::Server;
};

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(RendezvousServerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  DROVER_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() {
  if (impl_) impl_->Shutdown();
}

uint16_t RendezvousServer::port() const {
  return impl_->port();
}

Result<FormedCluster> RendezvousServer::WaitForCluster(Deadline deadline) {
  return impl_->WaitForCluster(deadline);
}

ClusterState RendezvousServer::QueryState() {
  return impl_->QueryState();
}

Status RendezvousServer::StopNode(const std::string& executor_id) {
  return impl_->StopNode(executor_id);
}

void RendezvousServer::StopAll() {
  impl_->StopAll();
}

void RendezvousServer::Shutdown() {
  impl_->Shutdown();
}

}  // namespace drover

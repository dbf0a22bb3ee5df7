// RendezvousServer: one Asio event loop thread that owns every connection
// and all of the server's state, and the wiring of the parts it calls
// (docs/architecture.md, "The rendezvous server"):
//
//   connection.h    one connection: reading, framing, sealing, writing, timers
//   handshake.h     HELLO and AUTH
//   node_table.h    the registrations, then the slots, and the phase
//   barrier.h       REGISTER, forming the cluster, the reservation timeout
//   cluster_frame.h the formed cluster encoded once for every node's frame
//   liveness.h      HEARTBEAT, missed heartbeats, deaths
//   control.h       CONTROL, one handler per kind
//   kv_store.h      KV_REQUEST, one handler per operation
//
// This file accepts connections (at most max_unauthenticated_connections
// waiting to authenticate), routes each frame to the one handler for its
// type, runs the timers, and serves the public methods, which post work to
// the loop and wait for its answer. Nothing is touched by two threads except
// the fields under `mu_` (the outcome WaitForCluster waits on) and
// `post_mu_`.

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "drover/host_port.h"
#include "drover/rendezvous.h"
#include "rendezvous/barrier.h"
#include "rendezvous/connection.h"
#include "rendezvous/control.h"
#include "rendezvous/handshake.h"
#include "rendezvous/kv_store.h"
#include "rendezvous/liveness.h"
#include "rendezvous/node_table.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"
#include "wire/auth.h"
#include "wire/frame.h"

namespace drover {
namespace rendezvous_internal {
namespace {

using asio::ip::tcp;

constexpr size_t kReadChunk = 64 * 1024;

// What Start derives from the options before anything runs.
struct ServerKeys {
  wire::Token token{};
  std::string cluster_id;
};

Result<ServerKeys> CheckOptions(const RendezvousServerOptions& options) {
  DROVER_RETURN_IF_ERROR(options.cluster.Validate());
  ServerKeys keys;
  if (options.token.bytes.size() != wire::kTokenBytes) {
    return Status::InvalidArgument("the cluster token must be " +
                                   std::to_string(wire::kTokenBytes) + " bytes, got " +
                                   std::to_string(options.token.bytes.size()));
  }
  std::copy(options.token.bytes.begin(), options.token.bytes.end(), keys.token.begin());
  if (options.max_unauthenticated_connections == 0) {
    return Status::InvalidArgument("max_unauthenticated_connections must be at least 1");
  }
  if (options.heartbeat_interval.count() <= 0 || options.missed_heartbeats_until_dead <= 0) {
    return Status::InvalidArgument(
        "heartbeat_interval and missed_heartbeats_until_dead must be positive");
  }
  if (options.quiet_heartbeat_interval.count() < 0) {
    return Status::InvalidArgument("quiet_heartbeat_interval must not be negative");
  }
  if (options.cluster_id.empty()) {
    DROVER_ASSIGN_OR_RETURN(std::string nonce, wire::RandomNonce());
    keys.cluster_id = wire::HexEncode(std::string_view(nonce).substr(0, 8));
  } else {
    keys.cluster_id = options.cluster_id;
  }
  return keys;
}

bool IsServerToClient(wire::MessageType type) {
  switch (type) {
    case wire::CHALLENGE:
    case wire::AUTH_OK:
    case wire::REGISTERED:
    case wire::CLUSTER:
    case wire::STATE:
    case wire::KV_REPLY:
      return true;
    default:
      return false;
  }
}

}  // namespace

// The loop's state and its wiring. RendezvousServer::Impl is this class.
class Server : public ConnectionHost, public ServerContext {
 public:
  Server(RendezvousServerOptions options, ServerKeys keys)
      : options_(std::move(options)),
        work_(asio::make_work_guard(io_)),
        acceptor_(io_),
        reservation_timer_(io_),
        heartbeat_timer_(io_),
        accept_retry_timer_(io_),
        read_buffer_(kReadChunk),
        nodes_(options_.cluster),
        handshake_(keys.token, *this),
        barrier_(
            BarrierOptions{
                keys.cluster_id,
                HeartbeatTiming{options_.heartbeat_interval, options_.quiet_heartbeat_interval},
                options_.reservation_timeout, options_.elastic, options_.node_list_limit},
            nodes_, *this),
        liveness_(
            LivenessOptions{options_.heartbeat_interval, options_.missed_heartbeats_until_dead,
                            options_.quiet_heartbeat_interval},
            nodes_, *this),
        control_(nodes_, *this),
        kv_(KvLimits{options_.max_kv_keys, options_.max_kv_bytes, options_.max_kv_waits,
                     options_.max_kv_waits_per_connection},
            io_, [this](uint64_t connection, const wire::KvReply& reply) {
              if (Peer* peer = FindPeer(connection)) peer->Send(wire::KV_REPLY, reply);
            }) {}
  ~Server() override { Shutdown(); }

  Status Listen();
  uint16_t port() const { return port_; }
  Result<FormedCluster> WaitForCluster(Deadline deadline);
  ClusterState QueryState();
  Status StopNode(const std::string& executor_id);
  std::optional<std::string> StoredValue(const std::string& key);
  size_t DeleteKeys(const std::string& prefix);
  Status Reform(const ReformPlan& plan);
  Result<int> FormWithRegistered(int minimum);
  void StopAll();
  void Shutdown();

  // ConnectionHost and ServerContext: loop thread only.
  void HandleFrame(Connection& conn, const wire::Frame& frame) override;
  void OnClosed(Connection& conn) override;
  void Rejected(const std::string& peer, const std::string& reason) override;
  // Resumes accepting if the limit paused it.
  void LeftHandshake(Connection& conn) override;
  void Log(const std::string& line) override;
  std::vector<char>& read_buffer() override { return read_buffer_; }
  void Report(const NodeEvent& event) override;
  Peer* FindPeer(uint64_t id) override;
  void Publish(const Status& outcome) override;
  void Post(std::function<void()> task) override { asio::post(io_, std::move(task)); }

 private:
  // Runs `fn` on the loop and returns its value, or `fallback` once the loop
  // no longer takes work.
  template <typename R>
  R RunOnLoop(std::function<R()> fn, R fallback);
  bool LoopAccepting();

  void Accept();
  void StartReservationTimer();
  void ScheduleHeartbeatCheck();
  void StopOnLoop();

  // One handler per message type; each parses the body (a bad one costs
  // the sender its connection) and hands it to the part that owns it.
  void HandlePeerError(Connection& conn, const wire::Frame& frame);
  void HandleHello(Connection& conn, const wire::Frame& frame);
  void HandleAuth(Connection& conn, const wire::Frame& frame);
  void HandleRegister(Connection& conn, const wire::Frame& frame);
  void HandleHeartbeat(Connection& conn, const wire::Frame& frame);
  void HandleControl(Connection& conn, const wire::Frame& frame);
  void HandleKvRequest(Connection& conn, const wire::Frame& frame);

  const RendezvousServerOptions options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  tcp::endpoint accepted_from_;  // the pending accept's peer
  asio::steady_timer reservation_timer_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer accept_retry_timer_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_id_{};
  Mutex join_mu_;

  // Guards loop_accepting_: posts happen under it, so none is posted after
  // the shutdown task (whose successors would never run).
  Mutex post_mu_;
  bool loop_accepting_ GUARDED_BY(post_mu_) = false;

  // The outcome WaitForCluster reports, set once by the loop (again after
  // a Reform); OK: the barrier lays the cluster out when asked.
  Mutex mu_;
  std::condition_variable_any cv_;
  std::optional<Status> outcome_ GUARDED_BY(mu_);
  // Set when the loop stops: the cluster it had formed, or why none did.
  std::optional<Result<FormedCluster>> stopped_cluster_ GUARDED_BY(mu_);

  // ---- Loop thread only below. ----
  bool stopping_ = false;
  std::vector<char> read_buffer_;  // shared by every connection's reads
  uint64_t next_connection_id_ = 1;
  size_t unauthenticated_ = 0;  // connections accepted, not yet authenticated
  bool accept_paused_ = false;  // at max_unauthenticated_connections
  Clock::time_point cap_logged_at_{};
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections_;
  // The parts, in the order frames flow through them.
  NodeTable nodes_;
  Handshake handshake_;
  Barrier barrier_;
  Liveness liveness_;
  Control control_;
  KvStore kv_;
};

// ---------------------------------------------------------------------------
// Public side

template <typename R>
R Server::RunOnLoop(std::function<R()> fn, R fallback) {
  if (std::this_thread::get_id() == loop_thread_id_) return fn();
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  {
    MutexLock lock(post_mu_);
    if (!loop_accepting_) return fallback;
    asio::post(io_, [promise, fn = std::move(fn)] { promise->set_value(fn()); });
  }
  return future.get();
}

Status Server::Listen() {
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

  StartReservationTimer();
  Accept();
  {
    MutexLock lock(post_mu_);
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

void Server::StartReservationTimer() {
  reservation_timer_.expires_after(options_.reservation_timeout);
  reservation_timer_.async_wait([this](asio::error_code ec) {
    if (!ec && !stopping_) barrier_.OnReservationTimeout();
  });
}

Result<FormedCluster> Server::WaitForCluster(Deadline deadline) {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (!cv_.wait_until(mu_, deadline, [this] {
            mu_.AssertHeld();
            return outcome_.has_value() || stopped_cluster_.has_value();
          })) {
        break;
      }
      if (stopped_cluster_) return *stopped_cluster_;
      if (!outcome_->ok()) return *outcome_;
    }
    // Laid out on the loop, from the table: the caller's own copy.
    std::optional<Result<FormedCluster>> laid_out = RunOnLoop<std::optional<Result<FormedCluster>>>(
        [this]() -> std::optional<Result<FormedCluster>> {
          MutexLock lock(mu_);
          if (!outcome_.has_value()) return std::nullopt;  // a new round: wait for it
          return barrier_.Formed();
        },
        std::nullopt);
    if (laid_out) return *std::move(laid_out);
    if (LoopAccepting()) continue;
    // The loop is stopping: StopOnLoop leaves the cluster it had.
    MutexLock lock(mu_);
    if (cv_.wait_until(mu_, deadline, [this] {
          mu_.AssertHeld();
          return stopped_cluster_.has_value();
        })) {
      return *stopped_cluster_;
    }
    break;
  }
  ClusterState state = QueryState();
  return Status::DeadlineExceeded(
      "the cluster did not form before the caller's deadline: " + std::to_string(state.registered) +
      " of " + std::to_string(state.expected) + " nodes registered");
}

bool Server::LoopAccepting() {
  MutexLock lock(post_mu_);
  return loop_accepting_;
}

ClusterState Server::QueryState() {
  ClusterState stopped;
  stopped.phase = "stopped";
  stopped.expected = options_.cluster.num_nodes;
  return RunOnLoop<ClusterState>([this] { return nodes_.State(Clock::now()); }, stopped);
}

std::optional<std::string> Server::StoredValue(const std::string& key) {
  return RunOnLoop<std::optional<std::string>>([this, key] { return kv_.Find(key); }, std::nullopt);
}

size_t Server::DeleteKeys(const std::string& prefix) {
  return RunOnLoop<size_t>([this, prefix] { return kv_.DeletePrefix(prefix); }, 0);
}

Status Server::Reform(const ReformPlan& plan) {
  if (!options_.elastic) return Status::FailedPrecondition("the rendezvous is not elastic");
  if (Status valid = plan.cluster.Validate(); !valid.ok()) return valid;
  return RunOnLoop<Status>(
      [this, plan] {
        if (nodes_.phase() != Phase::kFormed) {
          return Status::FailedPrecondition("the cluster has not formed; nothing to form again");
        }
        control_.SendReform(plan.round, plan.reason);
        nodes_.Reset(plan.cluster);
        {
          MutexLock lock(mu_);
          outcome_.reset();
        }
        heartbeat_timer_.cancel();
        StartReservationTimer();
        Log("round " + std::to_string(plan.round) + " (" + plan.cluster_id + "): waiting for " +
            std::to_string(plan.cluster.num_nodes) + " nodes; " + plan.reason);
        barrier_.Reform(plan.cluster_id, plan.round, plan.reason, plan.admit, plan.hold);
        return Status::Ok();
      },
      Status::Unavailable("the rendezvous server is shut down"));
}

Result<int> Server::FormWithRegistered(int minimum) {
  if (!options_.elastic) return Status::FailedPrecondition("the rendezvous is not elastic");
  return RunOnLoop<Result<int>>([this, minimum] { return barrier_.FormWithRegistered(minimum); },
                                Status::Unavailable("the rendezvous server is shut down"));
}

Status Server::StopNode(const std::string& executor_id) {
  return RunOnLoop<Status>(
      [this, executor_id] { return control_.StopNode(executor_id); },
      Status::Unavailable("the rendezvous server is shut down; cannot stop executor '" +
                          executor_id + "'"));
}

void Server::StopAll() {
  RunOnLoop<bool>(
      [this] {
        control_.StopAll();
        wire::Control stop;
        stop.set_kind(wire::Control::STOP_ALL);
        for (uint64_t id : barrier_.JoinerConnections()) {
          if (Peer* peer = FindPeer(id); peer != nullptr && peer->open()) {
            peer->Send(wire::CONTROL, stop);
          }
        }
        return true;
      },
      false);
}

void Server::Shutdown() {
  {
    MutexLock lock(post_mu_);
    if (loop_accepting_) {
      loop_accepting_ = false;
      asio::post(io_, [this] { StopOnLoop(); });
    }
  }
  if (std::this_thread::get_id() == loop_thread_id_) return;  // joined by the owner
  MutexLock lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void Server::StopOnLoop() {
  stopping_ = true;
  Publish(Status::Unavailable("the rendezvous server shut down before the cluster formed (" +
                              nodes_.DescribeRegistrations() + ")"));
  {
    // What WaitForCluster returns from now on: the loop lays out no more.
    MutexLock lock(mu_);
    stopped_cluster_.emplace(outcome_->ok() ? barrier_.Formed() : Result<FormedCluster>(*outcome_));
  }
  cv_.notify_all();
  // Stopped before any connection closes, so no close reads as a death.
  nodes_.Stop("the rendezvous server is shutting down");
  asio::error_code ec;
  acceptor_.close(ec);
  reservation_timer_.cancel();
  heartbeat_timer_.cancel();
  accept_retry_timer_.cancel();
  kv_.Clear();
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

// ---------------------------------------------------------------------------
// ServerContext and ConnectionHost

void Server::Log(const std::string& line) {
  if (options_.log) return options_.log(line);
  std::string text = "drover rendezvous: " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
}

void Server::Report(const NodeEvent& event) {
  if (options_.on_event) options_.on_event(event);
}

Peer* Server::FindPeer(uint64_t id) {
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second.get();
}

void Server::Publish(const Status& outcome) {
  {
    MutexLock lock(mu_);
    if (!outcome_.has_value()) outcome_.emplace(outcome);
  }
  cv_.notify_all();
  if (options_.on_outcome) options_.on_outcome();
  if (outcome.ok()) {
    reservation_timer_.cancel();
    ScheduleHeartbeatCheck();
  }
}

void Server::Rejected(const std::string& peer, const std::string& reason) {
  Log("closing connection from " + peer + ": " + reason);
  if (options_.on_rejected) options_.on_rejected(peer, reason);
}

void Server::OnClosed(Connection& conn) {
  kv_.Forget(conn.id());
  barrier_.ForgetJoiner(conn.id());
  for (const std::string& id : conn.Executors()) {
    NodeRecord* node = nodes_.Find(id);
    if (node != nullptr && node->connection == conn.id()) {
      node->connection = 0;
      if (nodes_.phase() == Phase::kReserving) {
        barrier_.Disconnected(*node, conn.address());
      } else if (conn.timed_out()) {
        liveness_.Disconnected(*node, "its host stopped answering (the connection from " +
                                          conn.address() + " timed out)");
      } else {
        liveness_.Disconnected(*node);
      }
    }
    conn.Release(id);
  }
  connections_.erase(conn.id());
}

// ---------------------------------------------------------------------------
// The loop: accepting, timers

void Server::Accept() {
  // The peer's address comes with the accept: no getpeername per connection.
  acceptor_.async_accept(accepted_from_, [this](asio::error_code ec, tcp::socket socket) {
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
    std::string peer = JoinHostPort(accepted_from_.address().to_string(), accepted_from_.port());
    uint64_t id = next_connection_id_++;
    auto conn = std::make_shared<Connection>(
        this, std::move(socket), id, std::move(peer),
        ConnectionOptions{options_.handshake_timeout, options_.max_frame_bytes,
                          options_.drain_timeout, options_.heartbeat_interval,
                          options_.missed_heartbeats_until_dead});
    connections_.emplace(id, conn);
    ++unauthenticated_;
    conn->Start();
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

void Server::ScheduleHeartbeatCheck() {
  if (stopping_) return;
  heartbeat_timer_.expires_after(options_.heartbeat_interval);
  heartbeat_timer_.async_wait([this](asio::error_code ec) {
    if (ec || stopping_) return;
    liveness_.CheckHeartbeats(Clock::now());
    ScheduleHeartbeatCheck();
  });
}

// ---------------------------------------------------------------------------
// Dispatch: one handler per message type

void Server::HandleFrame(Connection& conn, const wire::Frame& frame) {
  const wire::MessageType type = frame.type();
  const std::string type_name = wire::MessageType_Name(type);
  if (type == wire::ERROR) return HandlePeerError(conn, frame);
  if (IsServerToClient(type)) {
    std::string message = type_name + " is a server-to-client message; a server does not accept it";
    return conn.Reject(wire::UNKNOWN_MESSAGE, message, message);
  }
  // Before AUTH_OK only the handshake's next step is accepted.
  const char* expected = nullptr;
  switch (conn.state()) {
    case Peer::State::kAwaitHello:
      if (type == wire::HELLO) return HandleHello(conn, frame);
      expected = "HELLO";
      break;
    case Peer::State::kAwaitAuth:
      if (type == wire::AUTH) return HandleAuth(conn, frame);
      expected = "AUTH";
      break;
    case Peer::State::kReady:
      break;
    default:
      return;
  }
  if (expected != nullptr) {
    std::string message = type_name + " before authentication: expected " + expected;
    return conn.Reject(wire::NOT_AUTHENTICATED, message, message);
  }
  switch (type) {
    case wire::REGISTER:
      return HandleRegister(conn, frame);
    case wire::HEARTBEAT:
      return HandleHeartbeat(conn, frame);
    case wire::CONTROL:
      return HandleControl(conn, frame);
    case wire::KV_REQUEST:
      return HandleKvRequest(conn, frame);
    default: {
      std::string message = "unexpected " + type_name + " after the handshake completed";
      return conn.Reject(wire::MALFORMED, message, message);
    }
  }
}

void Server::HandlePeerError(Connection& conn, const wire::Frame& frame) {
  wire::Error error;
  error.ParseFromString(frame.body);
  // Whatever the peer wrote reaches a terminal: escape it.
  conn.Close("peer sent ERROR " + wire::ErrorCode_Name(error.code()) + ": " +
             wire::PrintableBytes(error.message(), 256));
}

void Server::HandleHello(Connection& conn, const wire::Frame& frame) {
  wire::Hello hello;
  if (ParseOrReject(conn, frame, &hello)) handshake_.HandleHello(conn, hello);
}

void Server::HandleAuth(Connection& conn, const wire::Frame& frame) {
  wire::Auth auth;
  if (ParseOrReject(conn, frame, &auth) && handshake_.HandleAuth(conn, auth)) {
    LeftHandshake(conn);
  }
}

void Server::HandleRegister(Connection& conn, const wire::Frame& frame) {
  wire::Register request;
  if (ParseOrReject(conn, frame, &request) && handshake_.CheckProof(conn, request)) {
    barrier_.HandleRegister(conn, request);
  }
}

void Server::HandleHeartbeat(Connection& conn, const wire::Frame& frame) {
  wire::Heartbeat heartbeat;
  if (ParseOrReject(conn, frame, &heartbeat)) liveness_.HandleHeartbeat(conn, heartbeat);
}

void Server::HandleControl(Connection& conn, const wire::Frame& frame) {
  wire::Control control;
  if (ParseOrReject(conn, frame, &control)) control_.HandleControl(conn, control);
}

void Server::HandleKvRequest(Connection& conn, const wire::Frame& frame) {
  wire::KvRequest request;
  if (ParseOrReject(conn, frame, &request)) kv_.Handle(conn.id(), request);
}

}  // namespace rendezvous_internal

// ---------------------------------------------------------------------------
// RendezvousServer

class RendezvousServer::Impl : public rendezvous_internal::Server {
 public:
  using Server::Server;
};

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(RendezvousServerOptions options) {
  DROVER_ASSIGN_OR_RETURN(rendezvous_internal::ServerKeys keys,
                          rendezvous_internal::CheckOptions(options));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(keys));
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

std::optional<std::string> RendezvousServer::StoredValue(const std::string& key) {
  return impl_->StoredValue(key);
}

size_t RendezvousServer::DeleteKeys(const std::string& prefix) {
  return impl_->DeleteKeys(prefix);
}

Status RendezvousServer::Reform(const ReformPlan& plan) {
  return impl_->Reform(plan);
}

Result<int> RendezvousServer::FormWithRegistered(int minimum) {
  return impl_->FormWithRegistered(minimum);
}

void RendezvousServer::StopAll() {
  impl_->StopAll();
}

void RendezvousServer::Shutdown() {
  impl_->Shutdown();
}

}  // namespace drover

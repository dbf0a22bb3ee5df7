// RendezvousClient: one authenticated connection to a rendezvous server
// (docs/protocol.md).
//
// The socket is non-blocking; every read and write waits in poll() for at
// most the caller's deadline. Reads happen only on the caller's thread (the
// public contract: one caller at a time), so the FrameReader needs no lock.
// Writes come from the caller and from the heartbeat thread, so they are
// serialized by write_mu_. A frame the server sends unsolicited (a relayed
// STOP) may arrive while the caller waits for something else: every read loop
// goes through Await(), which records it and keeps waiting.
//
// After AUTH_OK every frame either way is sealed (wire/session.h): the
// sealer is used under write_mu_, so sequence numbers follow the order the
// frames go out; the opener on the caller's thread, as the reader.
//
// Server ERROR codes map to Status codes as follows (the server's message is
// kept in every case; before authentication it is escaped, since anything
// may be listening on the address):
//   AUTH_FAILED, NOT_AUTHENTICATED,
//   PERMISSION_DENIED, FRAME_AUTH_FAILED     -> kPermissionDenied
//   RESERVATION_TIMEOUT, TIMEOUT              -> kDeadlineExceeded
//   CLUSTER_FORMED                            -> kAlreadyExists (the cluster
//                                                exists without this node)
//   NOT_FOUND                                 -> kNotFound
//   RESOURCE_EXHAUSTED (a KV bound)           -> kFailedPrecondition
//   BAD_FRAME, UNSUPPORTED_VERSION, FRAME_TOO_LARGE, UNKNOWN_MESSAGE,
//   MALFORMED                                 -> kInvalidArgument
//   STOPPED and anything else                 -> kUnavailable

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "drover/host_port.h"
#include "drover/rendezvous.h"
#include "os/fd_io.h"
#include "os/tcp_keepalive.h"
#include "os/unique_fd.h"
#include "rendezvous/client_backend.h"
#include "rendezvous/node_info_codec.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover {
namespace {

// Writes without a caller's deadline (heartbeats, ReportError, StopAll) give
// up after this long: the server is not reading.
constexpr Milliseconds kSendTimeout{10'000};
// Unanswered keepalive probes, one a heartbeat interval, before the kernel
// gives up on the server: the server's own count for heartbeats.
constexpr int kKeepaliveProbes = 5;
// A cluster's shared part may expand to at most this multiple of the frame limit.
constexpr uint64_t kMaxExpansion = 8;
// Keys and values as docs/protocol.md bounds them.
constexpr size_t kMaxKeyBytes = wire::kMaxKvKeyBytes;
constexpr size_t kMaxValueBytes = wire::kMaxKvValueBytes;
// A KV WAIT asks the server to give up slightly before the caller's deadline,
// so that the server's reply (naming the missing keys) arrives in time.
constexpr Milliseconds kWaitReplyMargin{50};

std::string ErrnoText(int error) {
  return std::strerror(error);
}

int64_t MillisecondsBetween(Clock::time_point from, Clock::time_point to) {
  if (to <= from) return 0;
  return std::chrono::duration_cast<Milliseconds>(to - from).count();
}

struct HostPort {
  std::string host;
  std::string port;  // as getaddrinfo takes it
};

// "host:port", "1.2.3.4:port" or "[v6]:port".
Result<HostPort> ParseAddress(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("rendezvous server address '" + std::string(address) +
                                   "' is not HOST:PORT: " + std::string(why));
  };
  // "::1:80" could be host "::1" or "::1:80" without a port: refuse to guess.
  if (!address.starts_with('[') && address.find(':') != address.rfind(':')) {
    return bad("write an IPv6 address in brackets, [ADDR]:PORT");
  }
  auto split = SplitHostPort(address);
  if (!split.ok()) return bad(split.status().message());
  return HostPort{split->first, std::to_string(split->second)};
}

// Errors after which the server may still appear (it is starting, or the
// network is coming up): retried with backoff until the deadline.
bool IsRetriableConnectError(int error) {
  switch (error) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ETIMEDOUT:
    case EAGAIN:
    case EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

struct ConnectAttempt {
  os::UniqueFd fd;  // connected, or -1
  int error = 0;    // errno of the last address tried
  bool retriable = true;
};

// Tries every resolved address once, each with a non-blocking connect that
// waits at most until `deadline`.
ConnectAttempt ConnectOnce(const addrinfo* addresses, Deadline deadline) {
  ConnectAttempt attempt;
  bool any_retriable = false;
  for (const addrinfo* ai = addresses; ai != nullptr; ai = ai->ai_next) {
    os::UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      attempt.error = errno;
      continue;
    }
    int error = 0;
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS || error == EINTR) {
        pollfd pfd{fd.get(), POLLOUT, 0};
        int ready;
        do {
          ready = ::poll(&pfd, 1, os::PollTimeoutMs(deadline));
        } while ((ready < 0 && errno == EINTR) || (ready == 0 && os::PollTimeoutMs(deadline) > 0));
        if (ready == 0) {
          error = ETIMEDOUT;
        } else if (ready < 0) {
          error = errno;
        } else {
          socklen_t length = sizeof(error);
          if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
        }
      }
    }
    if (error == 0) {
      attempt.fd = std::move(fd);
      attempt.error = 0;
      return attempt;
    }
    attempt.error = error;
    if (IsRetriableConnectError(error)) any_retriable = true;
  }
  attempt.retriable = any_retriable;
  return attempt;
}

Status StatusFromServerError(wire::ErrorCode code, const std::string& server,
                             const std::string& message) {
  std::string text = "rendezvous server " + server + ": " + message;
  switch (code) {
    case wire::AUTH_FAILED:
    case wire::NOT_AUTHENTICATED:
    case wire::PERMISSION_DENIED:
    case wire::FRAME_AUTH_FAILED:
      return Status::PermissionDenied(std::move(text));
    case wire::RESOURCE_EXHAUSTED:
      return Status::FailedPrecondition(std::move(text));
    case wire::RESERVATION_TIMEOUT:
    case wire::TIMEOUT:
      return Status::DeadlineExceeded(std::move(text));
    case wire::CLUSTER_FORMED:
      return Status::AlreadyExists(std::move(text));
    case wire::NOT_FOUND:
      return Status::NotFound(std::move(text));
    case wire::BAD_FRAME:
    case wire::UNSUPPORTED_VERSION:
    case wire::FRAME_TOO_LARGE:
    case wire::UNKNOWN_MESSAGE:
    case wire::MALFORMED:
      return Status::InvalidArgument(std::move(text));
    default:
      return Status::Unavailable(std::move(text));
  }
}

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) {
    if (!out.empty()) out += ", ";
    out += "'" + key + "'";
  }
  return out;
}

}  // namespace

class TcpClientImpl {
 public:
  TcpClientImpl(RendezvousClientOptions options, wire::Token key, os::UniqueFd fd)
      : options_(std::move(options)),
        key_(key),
        fd_(std::move(fd)),
        reader_(wire::kHandshakeMaxFrameBytes),
        heartbeat_wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  ~TcpClientImpl() {
    {
      MutexLock lock(heartbeat_mu_);
      stopping_ = true;
    }
    os::SignalEventFd(heartbeat_wake_.get());
    // Wakes a heartbeat blocked in a write before joining it; the fd stays
    // open (and its number reserved) until the thread is gone.
    ::shutdown(fd_.get(), SHUT_RDWR);
    if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  }

  Status Handshake(Deadline deadline);
  Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline);
  Result<std::vector<FormedCluster>> RegisterHost(const std::vector<NodeInfo>& nodes,
                                                  Deadline deadline);
  // What a host's REGISTER for `executor_id` proves: nothing with the
  // cluster token or for the node that opened the connection, else that it
  // holds the node's credential (host_credentials).
  Result<std::string> CredentialProof(const std::string& executor_id) const;
  void StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload);
  Status StartHostHeartbeats(Milliseconds interval,
                             std::function<std::vector<NodeHeartbeat>()> payloads);
  // One heartbeat now, with the payload's latest values (none without one).
  Status SendFinalHeartbeat();
  Status SendControl(wire::Control control);
  Result<ClusterState> QueryState(Deadline deadline);
  Result<bool> WaitForStop(Deadline deadline, int wake_fd);
  Result<RendezvousClient::Instruction> WaitForInstruction(Deadline deadline, int wake_fd);
  // Sends a KV request and waits for its reply. A reply's error code becomes
  // a Status, except NOT_FOUND when `not_found_is_answer` (GET, DELETE).
  Result<wire::KvReply> Kv(wire::KvRequest request, Deadline deadline, std::string_view what,
                           bool not_found_is_answer = false);

 private:
  const std::string& server() const { return options_.address; }

  Status Broken() {
    MutexLock lock(state_mu_);
    return broken_;
  }
  // Records why the connection can no longer be used and closes it for both
  // directions (the stream cannot be resynchronised). Returns `status`.
  Status MarkBroken(Status status) {
    {
      MutexLock lock(state_mu_);
      if (broken_.ok()) broken_ = status;
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
    return status;
  }

  Status Send(wire::MessageType type, const google::protobuf::MessageLite& body, Deadline deadline);
  // Several frames of `type` in one write.
  Status SendAll(wire::MessageType type,
                 const std::vector<const google::protobuf::MessageLite*>& bodies,
                 Deadline deadline);
  // Tells the server why this client is closing, as any reader of this
  // protocol does; best effort.
  void SendError(const wire::FrameError& error);
  // REQUIRES: write_mu_ held.
  Status WriteAll(std::string_view bytes, Deadline deadline, std::string_view what);

  // Reads the next frame, waiting until `deadline`, or until `wake_fd` (when
  // >= 0) is readable, which counts as the deadline passing. Sets
  // deadline_passed_ when it gives up for either.
  Result<wire::Frame> ReadFrame(Deadline deadline, std::string_view what, int wake_fd = -1);

  // Reads frames until `wanted` accepts one, which it returns. On the way it
  // records relayed STOPs (returning early if `return_on_stop`), turns an
  // ERROR into a Status, and skips late replies to calls that gave up.
  Result<wire::Frame> Await(Deadline deadline, std::string_view what,
                            const std::function<bool(const wire::Frame&)>& wanted,
                            bool return_on_stop = false, int wake_fd = -1);

  Result<FormedCluster> DecodeCluster(const wire::Frame& frame);
  // The next CLUSTER, keeping REGISTERED's progress on the way; `who`
  // ("executor 3") is for the errors.
  Result<FormedCluster> AwaitCluster(Deadline deadline, const std::string& who);

  // How the payload announces its changes (HeartbeatPayload), all nodes'
  // together on a host connection.
  struct ChangeNotice {
    bool announced = true;
    std::vector<int> fds;
  };
  // Adds the caller's payload to a heartbeat, on the heartbeat thread.
  using HeartbeatFiller = std::function<ChangeNotice(wire::Heartbeat*)>;
  void StartHeartbeatLoop(Milliseconds interval, HeartbeatFiller filler);
  void HeartbeatLoop();
  // Sleeps until `until`, a stop or a new payload, or (with `change_fds`)
  // one of them readable. True when it was a change fd.
  bool WaitForNextHeartbeat(Clock::time_point until, const std::vector<int>& change_fds);

  const RendezvousClientOptions options_;
  const wire::Token key_;  // the credential's: the cluster token or a node's
  os::UniqueFd fd_;

  // Caller's thread only.
  wire::FrameReader reader_;
  std::optional<wire::FrameOpener> opener_;  // once authenticated
  bool deadline_passed_ = false;
  uint64_t next_request_id_ = 1;
  uint32_t registered_ = 0;
  uint32_t expected_ = 0;
  bool host_ = false;  // RegisterHost succeeded: a host connection
  // The handshake's, for RegisterHost's credential proofs.
  std::string client_nonce_;
  std::string server_nonce_;

  std::atomic<bool> stop_received_{false};
  // A host connection's STOPs for single nodes (the driver's StopNode), not
  // yet taken by WaitForInstruction (caller's thread only).
  std::deque<std::string> node_stops_;
  // A REFORM not yet taken by WaitForInstruction (caller's thread only).
  std::optional<RendezvousClient::Instruction> reform_;

  Mutex write_mu_;  // serializes whole frames on the socket
  std::optional<wire::FrameSealer> sealer_ GUARDED_BY(write_mu_);  // once authenticated

  Mutex state_mu_;
  Status broken_ GUARDED_BY(state_mu_);  // OK while the connection is usable

  Mutex heartbeat_mu_;
  os::UniqueFd heartbeat_wake_;  // an eventfd: stopping_ or send_now_ was set
  bool stopping_ GUARDED_BY(heartbeat_mu_) = false;
  bool send_now_ GUARDED_BY(heartbeat_mu_) = false;  // StartHeartbeats called again
  Milliseconds heartbeat_interval_ GUARDED_BY(heartbeat_mu_){1000};
  Milliseconds quiet_interval_ GUARDED_BY(heartbeat_mu_){0};  // the last CLUSTER's
  HeartbeatFiller heartbeat_filler_ GUARDED_BY(heartbeat_mu_);
  std::thread heartbeat_thread_;  // started once, by the caller's thread
};

Status TcpClientImpl::WriteAll(std::string_view bytes, Deadline deadline, std::string_view what) {
  while (!bytes.empty()) {
    ssize_t sent = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      bytes.remove_prefix(static_cast<size_t>(sent));
      continue;
    }
    int error = errno;
    if (sent < 0 && error == EINTR) continue;
    if (sent < 0 && (error == EAGAIN || error == EWOULDBLOCK)) {
      pollfd pfd{fd_.get(), POLLOUT, 0};
      int ready = ::poll(&pfd, 1, os::PollTimeoutMs(deadline));
      if (ready == 0 && os::PollTimeoutMs(deadline) == 0) {
        return Status::DeadlineExceeded("timed out sending " + std::string(what) +
                                        " to rendezvous server " + server() +
                                        " (it is not reading)");
      }
      continue;
    }
    return Status::Unavailable("cannot send " + std::string(what) + " to rendezvous server " +
                               server() + ": " + ErrnoText(error));
  }
  return Status::Ok();
}

Status TcpClientImpl::Send(wire::MessageType type, const google::protobuf::MessageLite& body,
                           Deadline deadline) {
  return SendAll(type, {&body}, deadline);
}

Status TcpClientImpl::SendAll(wire::MessageType type,
                              const std::vector<const google::protobuf::MessageLite*>& bodies,
                              Deadline deadline) {
  DROVER_RETURN_IF_ERROR(Broken());
  MutexLock lock(write_mu_);
  std::string frames;
  for (const google::protobuf::MessageLite* body : bodies) {
    frames += sealer_ ? sealer_->Seal(type, *body) : wire::EncodeFrame(type, *body);
  }
  Status status = WriteAll(frames, deadline, wire::MessageType_Name(type));
  // Part of a frame may have gone out: nothing can follow it.
  if (!status.ok()) return MarkBroken(status);
  return Status::Ok();
}

void TcpClientImpl::SendError(const wire::FrameError& error) {
  MutexLock lock(write_mu_);
  std::string reply = sealer_ ? sealer_->SealError(error.code, error.message)
                              : wire::EncodeError(error.code, error.message);
  (void)WriteAll(reply, Clock::now() + Milliseconds(100), "ERROR");
}

Result<wire::Frame> TcpClientImpl::ReadFrame(Deadline deadline, std::string_view what,
                                             int wake_fd) {
  deadline_passed_ = false;
  DROVER_RETURN_IF_ERROR(Broken());
  char buffer[64 << 10];
  for (;;) {
    wire::Frame frame;
    wire::FrameError error;
    switch (reader_.Next(&frame, &error)) {
      case wire::FrameReader::Step::kFrame:
        if (opener_ && !opener_->Open(frame, &error)) {
          SendError(error);
          return MarkBroken(
              Status::PermissionDenied("rendezvous server " + server() +
                                       ": a frame failed its authentication while this "
                                       "client waited for " +
                                       std::string(what) + ": " + error.message));
        }
        return frame;
      case wire::FrameReader::Step::kError: {
        SendError(error);
        return MarkBroken(Status::InvalidArgument("rendezvous server " + server() +
                                                  " sent a bad frame while this client waited "
                                                  "for " +
                                                  std::string(what) + ": " + error.message));
      }
      case wire::FrameReader::Step::kNeedMore:
        break;
    }
    pollfd pfd[2] = {{fd_.get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int timeout = os::PollTimeoutMs(deadline);
    int ready = ::poll(pfd, wake_fd >= 0 ? 2 : 1, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0 && pfd[1].revents != 0 && pfd[0].revents == 0) {
      deadline_passed_ = true;
      return Status::Cancelled("stopped waiting for " + std::string(what) +
                               " from rendezvous server " + server());
    }
    if (ready == 0) {
      if (os::PollTimeoutMs(deadline) > 0) continue;  // a capped wait on a far deadline
      deadline_passed_ = true;
      return Status::DeadlineExceeded("timed out waiting for " + std::string(what) +
                                      " from rendezvous server " + server());
    }
    ssize_t got = ::recv(fd_.get(), buffer, sizeof(buffer), 0);
    if (got > 0) {
      reader_.Append(std::string_view(buffer, static_cast<size_t>(got)));
      continue;
    }
    if (got == 0) {
      std::string text = "rendezvous server " + server() +
                         " closed the connection while waiting for " + std::string(what);
      if (reader_.mid_frame()) {
        text += " (in the middle of a frame, " + std::to_string(reader_.buffered_bytes()) +
                " bytes of it received)";
      }
      return MarkBroken(Status::Unavailable(std::move(text)));
    }
    int recv_error = errno;
    if (recv_error == EINTR || recv_error == EAGAIN || recv_error == EWOULDBLOCK) continue;
    return MarkBroken(Status::Unavailable("connection to rendezvous server " + server() +
                                          " failed while waiting for " + std::string(what) + ": " +
                                          ErrnoText(recv_error)));
  }
}

Result<wire::Frame> TcpClientImpl::Await(Deadline deadline, std::string_view what,
                                         const std::function<bool(const wire::Frame&)>& wanted,
                                         bool return_on_stop, int wake_fd) {
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(wire::Frame frame, ReadFrame(deadline, what, wake_fd));
    wire::FrameError error;
    if (frame.type() == wire::ERROR) {
      wire::Error body;
      if (!wire::ParseBody(frame, &body, &error)) {
        return MarkBroken(
            Status::InvalidArgument("rendezvous server " + server() + ": " + error.message));
      }
      // The server closes the connection after every ERROR frame (a failed
      // KV request is a KV_REPLY code instead). Before authentication the
      // text is from whatever listens there: escape it for the terminal.
      std::string message = opener_ ? body.message() : wire::PrintableBytes(body.message(), 512);
      return MarkBroken(StatusFromServerError(body.code(), server(), message));
    }
    if (frame.type() == wire::CONTROL) {
      wire::Control control;
      if (!wire::ParseBody(frame, &control, &error)) {
        return MarkBroken(
            Status::InvalidArgument("rendezvous server " + server() + ": " + error.message));
      }
      if (control.kind() == wire::Control::STOP_NODE && host_ && !control.executor_id().empty()) {
        // One of the host's nodes, not the connection's every node.
        node_stops_.push_back(control.executor_id());
        if (return_on_stop) return frame;
        continue;
      }
      if (control.kind() == wire::Control::STOP_NODE || control.kind() == wire::Control::STOP_ALL) {
        stop_received_ = true;
        if (return_on_stop) return frame;
        continue;
      }
      if (control.kind() == wire::Control::REFORM) {
        reform_ =
            RendezvousClient::Instruction{RendezvousClient::Instruction::Kind::kReform,
                                          static_cast<int>(control.round()), control.message()};
        if (return_on_stop) return frame;
        continue;
      }
    }
    if (wanted(frame)) return frame;
    // Late answers to a call that gave up at its deadline, and progress
    // reports nobody asked to see.
    if (frame.type() == wire::REGISTERED || frame.type() == wire::CLUSTER ||
        frame.type() == wire::KV_REPLY || frame.type() == wire::STATE ||
        frame.type() == wire::CONTROL) {
      continue;
    }
    return MarkBroken(Status::Unavailable("rendezvous server " + server() + " sent " +
                                          std::string(wire::MessageType_Name(frame.type())) +
                                          " while this client waited for " + std::string(what)));
  }
}

Status TcpClientImpl::Handshake(Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(std::string client_nonce, wire::RandomNonce());
  wire::Hello hello;
  hello.set_client_nonce(client_nonce);
  // The name is for the server's logs: cut to the protocol's limit, at a
  // character boundary (a HELLO's strings must be UTF-8).
  std::string name = options_.name.substr(0, wire::kMaxHelloNameBytes);
  while (name.size() < options_.name.size() && !name.empty() &&
         (static_cast<unsigned char>(options_.name[name.size()]) & 0xc0) == 0x80) {
    name.pop_back();
  }
  hello.set_name(name);
  if (options_.credential.kind == Credential::Kind::kNode) {
    hello.set_executor_id(options_.credential.executor_id);
  }
  DROVER_RETURN_IF_ERROR(Send(wire::HELLO, hello, deadline));

  auto is = [](wire::MessageType type) {
    return [type](const wire::Frame& frame) { return frame.type() == type; };
  };
  wire::FrameError error;
  DROVER_ASSIGN_OR_RETURN(wire::Frame frame, Await(deadline, "CHALLENGE", is(wire::CHALLENGE)));
  wire::Challenge challenge;
  if (!wire::ParseBody(frame, &challenge, &error)) {
    return MarkBroken(
        Status::InvalidArgument("rendezvous server " + server() + ": " + error.message));
  }
  if (challenge.server_nonce().size() != wire::kNonceBytes) {
    return MarkBroken(
        Status::InvalidArgument("rendezvous server " + server() + " sent a CHALLENGE nonce of " +
                                std::to_string(challenge.server_nonce().size()) +
                                " bytes; expected " + std::to_string(wire::kNonceBytes)));
  }

  wire::Auth auth;
  auth.set_mac(wire::ClientMac(key_, challenge.server_nonce(), client_nonce));
  DROVER_RETURN_IF_ERROR(Send(wire::AUTH, auth, deadline));

  DROVER_ASSIGN_OR_RETURN(frame, Await(deadline, "AUTH_OK", is(wire::AUTH_OK)));
  wire::AuthOk ok;
  if (!wire::ParseBody(frame, &ok, &error)) {
    return MarkBroken(
        Status::InvalidArgument("rendezvous server " + server() + ": " + error.message));
  }
  std::string expected = wire::ServerMac(key_, client_nonce, challenge.server_nonce());
  if (!wire::ConstantTimeEquals(ok.mac(), expected)) {
    return MarkBroken(Status::PermissionDenied(
        "rendezvous server " + server() +
        ": server failed to prove it holds the cluster token (wrong AUTH_OK mac); it is not "
        "this cluster's server, or the tokens differ"));
  }
  DROVER_ASSIGN_OR_RETURN(wire::Token session,
                          wire::DeriveSessionKey(key_, client_nonce, challenge.server_nonce()));
  client_nonce_ = client_nonce;
  server_nonce_ = challenge.server_nonce();
  // Everything after AUTH_OK is sealed, and may be as large as a cluster.
  reader_.set_sealed(true);
  reader_.set_max_frame_bytes(options_.max_frame_bytes);
  opener_.emplace(session, wire::Direction::kServerToClient);
  {
    MutexLock lock(write_mu_);
    sealer_.emplace(session, wire::Direction::kClientToServer);
  }
  return Status::Ok();
}

Result<NodeList> ParseNodeList(std::string_view text) {
  if (text == "auto") return NodeList::kAuto;
  if (text == "always") return NodeList::kAlways;
  if (text == "never") return NodeList::kNever;
  return Status::InvalidArgument("node list '" + std::string(text) +
                                 "': expected auto, always or never");
}

std::string_view NodeListName(NodeList list) {
  switch (list) {
    case NodeList::kAlways:
      return "always";
    case NodeList::kNever:
      return "never";
    default:
      return "auto";
  }
}

Result<FormedCluster> TcpClientImpl::DecodeCluster(const wire::Frame& frame) {
  wire::FrameError error;
  wire::Cluster cluster;
  if (!wire::ParseBody(frame, &cluster, &error)) {
    return MarkBroken(
        Status::InvalidArgument("rendezvous server " + server() + ": " + error.message));
  }
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("rendezvous server " + server() + " sent a bad CLUSTER: " + why);
  };
  uint64_t limit = uint64_t{options_.max_frame_bytes} * kMaxExpansion;
  uint64_t size = cluster.shared_uncompressed_bytes();
  if (size > limit) {
    return bad("the shared part expands to " + std::to_string(size) +
               " bytes, over this client's limit of " + std::to_string(limit) +
               " (8 x max_frame_bytes)");
  }
  std::string shared_bytes(size, '\0');
  uLongf length = static_cast<uLongf>(size);
  int z = ::uncompress(reinterpret_cast<Bytef*>(shared_bytes.data()), &length,
                       reinterpret_cast<const Bytef*>(cluster.shared().data()),
                       static_cast<uLong>(cluster.shared().size()));
  if (z != Z_OK || length != size) {
    return bad("the shared part does not decompress to the " + std::to_string(size) +
               " bytes announced (zlib: " + (z == Z_OK ? std::string("short") : zError(z)) + ")");
  }
  wire::SharedCluster shared;
  if (!shared.ParseFromString(shared_bytes)) return bad("the shared part is not a SharedCluster");
  const bool own_only = shared.node_count() > 0;
  Result<FormedCluster> formed = own_only ? rendezvous_internal::OwnClusterFromWire(
                                                shared, cluster.node(), cluster.placement())
                                          : rendezvous_internal::SharedClusterFromWire(shared);
  if (!formed.ok()) return bad(formed.status().message());
  if (cluster.position() >= static_cast<uint32_t>(formed->node_count)) {
    return bad("this node's position " + std::to_string(cluster.position()) + " is not among the " +
               std::to_string(formed->node_count) + " nodes");
  }
  // Without the list, self is 0: the node's own entry is the only one.
  if (!own_only) formed->self = static_cast<int>(cluster.position());
  if (cluster.heartbeat_interval_ms() > 0) {
    formed->heartbeat_interval = Milliseconds(cluster.heartbeat_interval_ms());
  }
  formed->quiet_heartbeat_interval = Milliseconds(cluster.quiet_heartbeat_interval_ms());
  {
    MutexLock lock(heartbeat_mu_);
    quiet_interval_ = formed->quiet_heartbeat_interval;
  }
  return formed;
}

Result<FormedCluster> TcpClientImpl::Register(const NodeInfo& node, Deadline deadline) {
  wire::Register request;
  *request.mutable_node() = rendezvous_internal::NodeToWire(node);
  // NodeList's values are the wire's.
  request.set_node_list(static_cast<wire::NodeList>(options_.node_list));
  DROVER_RETURN_IF_ERROR(Send(wire::REGISTER, request, deadline));
  return AwaitCluster(deadline, "executor " + node.executor_id);
}

Result<std::vector<FormedCluster>> TcpClientImpl::RegisterHost(const std::vector<NodeInfo>& nodes,
                                                               Deadline deadline) {
  if (nodes.empty()) return Status::InvalidArgument("a host registers at least one node");
  std::map<std::string, size_t> index;
  std::vector<wire::Register> requests(nodes.size());
  std::vector<const google::protobuf::MessageLite*> bodies;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!index.emplace(nodes[i].executor_id, i).second) {
      return Status::InvalidArgument("executor " + nodes[i].executor_id +
                                     " is twice among the host's nodes");
    }
    *requests[i].mutable_node() = rendezvous_internal::NodeToWire(nodes[i]);
    requests[i].set_node_list(static_cast<wire::NodeList>(options_.node_list));
    requests[i].set_host(true);
    DROVER_ASSIGN_OR_RETURN(std::string proof, CredentialProof(nodes[i].executor_id));
    requests[i].set_credential_mac(std::move(proof));
    bodies.push_back(&requests[i]);
  }
  DROVER_RETURN_IF_ERROR(SendAll(wire::REGISTER, bodies, deadline));
  std::vector<std::optional<FormedCluster>> received(nodes.size());
  const std::string who = "the host of executor " + nodes.front().executor_id + " (" +
                          std::to_string(nodes.size()) + " nodes)";
  for (size_t got = 0; got < nodes.size(); ++got) {
    DROVER_ASSIGN_OR_RETURN(FormedCluster formed, AwaitCluster(deadline, who));
    const Placement* own = formed.own();
    auto it = own == nullptr
                  ? index.end()
                  : index.find(formed.nodes[static_cast<size_t>(formed.self)].executor_id);
    if (it == index.end() || received[it->second].has_value()) {
      return MarkBroken(Status::InvalidArgument(
          "rendezvous server " + server() +
          " sent a CLUSTER for a node this host did not register, or one twice"));
    }
    received[it->second] = std::move(formed);
  }
  std::vector<FormedCluster> clusters;
  clusters.reserve(nodes.size());
  for (std::optional<FormedCluster>& formed : received) clusters.push_back(std::move(*formed));
  host_ = true;
  return clusters;
}

Result<std::string> TcpClientImpl::CredentialProof(const std::string& executor_id) const {
  const Credential& opened_with = options_.credential;
  if (opened_with.kind == Credential::Kind::kCluster || opened_with.executor_id == executor_id) {
    return std::string();
  }
  for (const Credential& credential : options_.host_credentials) {
    if (credential.kind != Credential::Kind::kNode || credential.executor_id != executor_id) {
      continue;
    }
    if (credential.key.size() != wire::kTokenBytes) break;
    wire::Token key;
    std::copy(credential.key.begin(), credential.key.end(), key.begin());
    return wire::ClaimMac(key, server_nonce_, client_nonce_);
  }
  return Status::InvalidArgument("a host connection opened with " + opened_with.Describe() +
                                 " registers executor " + executor_id +
                                 " only with that node's credential too, and none was given");
}

Result<FormedCluster> TcpClientImpl::AwaitCluster(Deadline deadline, const std::string& who) {
  const std::string what = "the cluster to form (" + who + ")";
  for (;;) {
    Result<wire::Frame> frame = Await(
        deadline, what,
        [](const wire::Frame& frame) {
          return frame.type() == wire::CLUSTER || frame.type() == wire::REGISTERED;
        },
        /*return_on_stop=*/true);
    if (frame.ok() && stop_received_) {
      return Status::Unavailable("rendezvous server " + server() + ": " + who +
                                 " was stopped before the cluster formed");
    }
    if (!frame.ok()) {
      if (deadline_passed_ && expected_ > 0) {
        return Status::DeadlineExceeded(frame.status().message() + "; " +
                                        std::to_string(registered_) + " of " +
                                        std::to_string(expected_) + " nodes had registered");
      }
      return frame.status();
    }
    if (frame->type() == wire::CLUSTER) return DecodeCluster(*frame);
    wire::Registered registered;
    wire::FrameError error;
    if (wire::ParseBody(*frame, &registered, &error)) {
      registered_ = registered.registered();
      expected_ = registered.expected();
    }
  }
}

namespace {

// A Heartbeat or a NodeHeartbeat: the same payload fields.
template <typename Message, typename Notice>
void AddPayload(const HeartbeatPayload& payload, Message* heartbeat, Notice* notice) {
  notice->announced = notice->announced && payload.changes_announced;
  if (payload.change_fd >= 0) notice->fds.push_back(payload.change_fd);
  heartbeat->set_program_pid(payload.program_pid);
  if (payload.feed) {
    *heartbeat->mutable_feed() = rendezvous_internal::FeedProgressToWire(*payload.feed);
  }
  rendezvous_internal::MetricsToWire(payload.metrics, heartbeat->mutable_metrics());
}

}  // namespace

void TcpClientImpl::StartHeartbeats(Milliseconds interval,
                                    std::function<HeartbeatPayload()> payload) {
  HeartbeatFiller filler;
  if (payload) {
    filler = [payload = std::move(payload)](wire::Heartbeat* heartbeat) {
      ChangeNotice notice;
      AddPayload(payload(), heartbeat, &notice);
      return notice;
    };
  }
  StartHeartbeatLoop(interval, std::move(filler));
}

Status TcpClientImpl::StartHostHeartbeats(Milliseconds interval,
                                          std::function<std::vector<NodeHeartbeat>()> payloads) {
  if (!host_) {
    return Status::FailedPrecondition(
        "host heartbeats are a host connection's: call RegisterHost first");
  }
  HeartbeatFiller filler;
  if (payloads) {
    filler = [payloads = std::move(payloads)](wire::Heartbeat* heartbeat) {
      ChangeNotice notice;
      for (const NodeHeartbeat& node : payloads()) {
        wire::NodeHeartbeat* entry = heartbeat->add_nodes();
        entry->set_executor_id(node.executor_id);
        AddPayload(node.payload, entry, &notice);
      }
      return notice;
    };
  }
  StartHeartbeatLoop(interval, std::move(filler));
  return Status::Ok();
}

void TcpClientImpl::StartHeartbeatLoop(Milliseconds interval, HeartbeatFiller filler) {
  {
    MutexLock lock(heartbeat_mu_);
    heartbeat_interval_ = std::max(interval, Milliseconds(1));
    if (filler) heartbeat_filler_ = std::move(filler);
  }
  if (heartbeat_thread_.joinable()) {
    {
      MutexLock lock(heartbeat_mu_);
      send_now_ = true;  // the new payload's first values reach the server at once
    }
    os::SignalEventFd(heartbeat_wake_.get());
    return;
  }
  // The kernel finds a server whose host stopped answering, even while the
  // heartbeats are quiet (os/tcp_keepalive.h); best effort.
  (void)os::SetTcpKeepalive(fd_.get(), interval, kKeepaliveProbes);
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

// Every interval while the payload changes, or might without saying so.
// Once it has stayed the same for an interval and announces its changes, one
// heartbeat says `quiet`, and the next goes when the quiet interval has
// passed or, an interval after a change fd became readable, if the payload
// did change (docs/protocol.md, "Quiet heartbeats").
void TcpClientImpl::HeartbeatLoop() {
  uint64_t sequence = 0;
  std::string last_payload;
  bool last_quiet = false;
  Clock::time_point last_sent;
  MutexLock lock(heartbeat_mu_);
  while (!stopping_) {
    const bool forced = std::exchange(send_now_, false);
    const HeartbeatFiller filler = heartbeat_filler_;
    const Milliseconds interval = heartbeat_interval_;
    const Milliseconds quiet_interval = quiet_interval_;
    lock.Unlock();
    wire::Heartbeat heartbeat;
    ChangeNotice notice;
    if (filler) notice = filler(&heartbeat);
    std::string payload = heartbeat.SerializeAsString();
    const bool quiet = quiet_interval.count() > 0 && notice.announced && !forced && sequence > 0 &&
                       payload == last_payload;
    const Clock::time_point now = Clock::now();
    if (!quiet || !last_quiet || now >= last_sent + quiet_interval) {
      heartbeat.set_sequence(++sequence);
      heartbeat.set_quiet(quiet);
      Status sent = Send(wire::HEARTBEAT, heartbeat, now + kSendTimeout);
      // A broken connection is reported to the caller by its next call.
      if (!sent.ok()) return;
      last_payload = std::move(payload);
      last_quiet = quiet;
      last_sent = now;
    }
    if (!quiet) {
      (void)WaitForNextHeartbeat(Clock::now() + interval, {});
    } else if (WaitForNextHeartbeat(last_sent + quiet_interval, notice.fds)) {
      // At most one look an interval, however often the program reports.
      (void)WaitForNextHeartbeat(std::min(Clock::now() + interval, last_sent + quiet_interval), {});
    }
    lock.Lock();
  }
}

bool TcpClientImpl::WaitForNextHeartbeat(Clock::time_point until,
                                         const std::vector<int>& change_fds) {
  std::vector<pollfd> fds;
  fds.reserve(change_fds.size() + 1);
  fds.push_back({heartbeat_wake_.get(), POLLIN, 0});
  for (int fd : change_fds) fds.push_back({fd, POLLIN, 0});
  for (;;) {
    const int timeout = os::PollTimeoutMs(until);
    const int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (timeout == 0 || Clock::now() >= until) return false;
      continue;  // PollTimeoutMs caps far deadlines
    }
    if (fds[0].revents != 0) {
      os::DrainEventFd(heartbeat_wake_.get());
      return false;
    }
    return true;
  }
}

Status TcpClientImpl::SendFinalHeartbeat() {
  HeartbeatFiller filler;
  {
    MutexLock lock(heartbeat_mu_);
    filler = heartbeat_filler_;
  }
  if (!filler) return Status::Ok();
  wire::Heartbeat heartbeat;
  (void)filler(&heartbeat);
  return Send(wire::HEARTBEAT, heartbeat, Clock::now() + kSendTimeout);
}

Status TcpClientImpl::SendControl(wire::Control control) {
  return Send(wire::CONTROL, control, Clock::now() + kSendTimeout);
}

Result<ClusterState> TcpClientImpl::QueryState(Deadline deadline) {
  wire::Control control;
  control.set_kind(wire::Control::QUERY_STATE);
  DROVER_RETURN_IF_ERROR(Send(wire::CONTROL, control, deadline));
  DROVER_ASSIGN_OR_RETURN(wire::Frame frame, Await(deadline, "STATE", [](const wire::Frame& frame) {
                            return frame.type() == wire::STATE;
                          }));
  wire::State state;
  wire::FrameError error;
  if (!wire::ParseBody(frame, &state, &error)) {
    return MarkBroken(
        Status::InvalidArgument("rendezvous server " + server() + ": " + error.message));
  }
  ClusterState out;
  out.phase = state.phase();
  out.registered = static_cast<int>(state.registered());
  out.expected = static_cast<int>(state.expected());
  for (const wire::NodeState& node : state.nodes()) {
    NodeStatus status;
    status.node = rendezvous_internal::NodeFromWire(node.node());
    status.alive = node.alive();
    status.left = node.left();
    status.last_heartbeat_age = Milliseconds(node.last_heartbeat_age_ms());
    status.program_pid = node.program_pid();
    if (node.has_feed()) status.feed = rendezvous_internal::FeedProgressFromWire(node.feed());
    status.metrics = rendezvous_internal::MetricsFromWire(node.metrics());
    status.error = node.error();
    status.last_log_lines.assign(node.last_log_lines().begin(), node.last_log_lines().end());
    out.nodes.push_back(std::move(status));
  }
  return out;
}

Result<bool> TcpClientImpl::WaitForStop(Deadline deadline, int wake_fd) {
  while (!stop_received_) {
    Result<wire::Frame> frame = Await(
        deadline, "a STOP from the server", [](const wire::Frame&) { return false; },
        /*return_on_stop=*/true, wake_fd);
    if (!frame.ok()) {
      if (deadline_passed_) return false;
      return frame.status();
    }
  }
  return true;
}

Result<RendezvousClient::Instruction> TcpClientImpl::WaitForInstruction(Deadline deadline,
                                                                        int wake_fd) {
  using Kind = RendezvousClient::Instruction::Kind;
  for (;;) {
    if (stop_received_) return RendezvousClient::Instruction{Kind::kStop, 0, ""};
    if (!node_stops_.empty()) {
      RendezvousClient::Instruction stop{Kind::kStop, 0, ""};
      stop.executor_id = std::move(node_stops_.front());
      node_stops_.pop_front();
      return stop;
    }
    if (reform_) return *std::exchange(reform_, std::nullopt);
    Result<wire::Frame> frame = Await(
        deadline, "an instruction from the server", [](const wire::Frame&) { return false; },
        /*return_on_stop=*/true, wake_fd);
    if (!frame.ok()) {
      if (deadline_passed_) return RendezvousClient::Instruction{};
      return frame.status();
    }
  }
}

Result<wire::KvReply> TcpClientImpl::Kv(wire::KvRequest request, Deadline deadline,
                                        std::string_view what, bool not_found_is_answer) {
  if (request.key().size() > kMaxKeyBytes) {
    return Status::InvalidArgument("a key is at most " + std::to_string(kMaxKeyBytes) +
                                   " bytes; got " + std::to_string(request.key().size()));
  }
  if (request.value().size() > kMaxValueBytes || request.expected().size() > kMaxValueBytes) {
    return Status::InvalidArgument(
        "a value is at most " + std::to_string(kMaxValueBytes) + " bytes; got " +
        std::to_string(std::max(request.value().size(), request.expected().size())));
  }
  uint64_t id = next_request_id_++;
  request.set_request_id(id);
  DROVER_RETURN_IF_ERROR(Send(wire::KV_REQUEST, request, deadline));
  std::string waiting_for = "the reply to " + std::string(what);
  DROVER_ASSIGN_OR_RETURN(wire::Frame frame,
                          Await(deadline, waiting_for, [id](const wire::Frame& frame) {
                            if (frame.type() != wire::KV_REPLY) return false;
                            wire::KvReply reply;
                            // A reply to an earlier call that gave up is skipped.
                            return reply.ParseFromString(frame.body) && reply.request_id() == id;
                          }));
  wire::KvReply reply;
  reply.ParseFromString(frame.body);  // parsed once already by the predicate
  if (reply.code() == wire::NOT_FOUND && not_found_is_answer) {
    reply.set_found(false);
    return reply;
  }
  if (reply.code() != wire::ERROR_CODE_UNSPECIFIED) {
    std::string message =
        reply.message().empty() ? std::string(wire::ErrorCode_Name(reply.code())) : reply.message();
    return StatusFromServerError(reply.code(), server(), message + " (" + std::string(what) + ")");
  }
  return reply;
}

// ---------------------------------------------------------------------------

// The built-in server's backend: the public calls as frames on one
// TcpClientImpl connection.
class TcpBackend final : public RendezvousClient::Backend {
 public:
  explicit TcpBackend(std::unique_ptr<TcpClientImpl> impl) : impl_(std::move(impl)) {}

  Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline) override;
  Result<std::vector<FormedCluster>> RegisterHost(const std::vector<NodeInfo>& nodes,
                                                  Deadline deadline) override;
  void StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload) override;
  Status StartHostHeartbeats(Milliseconds interval,
                             std::function<std::vector<NodeHeartbeat>()> payloads) override;
  Status ReportError(const std::string& executor_id, const std::string& message,
                     const std::vector<std::string>& last_log_lines) override;
  Result<ClusterState> QueryState(Deadline deadline) override;
  Status StopAll() override;
  Status Leave() override;
  Status LeaveNode(const std::string& executor_id) override;
  Result<bool> WaitForStop(Deadline deadline, int wake_fd) override;
  Result<RendezvousClient::Instruction> WaitForInstruction(Deadline deadline, int wake_fd) override;
  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  Result<std::optional<std::string>> Get(const std::string& key, Deadline deadline) override;
  Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired, Deadline deadline) override;
  Result<bool> Delete(const std::string& key, Deadline deadline) override;

 private:
  std::unique_ptr<TcpClientImpl> impl_;
};

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(RendezvousClientOptions options,
                                                                    Deadline deadline) {
  if (options.address.rfind("etcd://", 0) == 0) {
    DROVER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> etcd,
                            rendezvous_internal::ConnectEtcd(std::move(options), deadline));
    return std::unique_ptr<RendezvousClient>(new RendezvousClient(std::move(etcd)));
  }
  const Credential& credential = options.credential;
  if (credential.key.size() != wire::kTokenBytes) {
    return Status::InvalidArgument("a cluster token is " + std::to_string(wire::kTokenBytes) +
                                   " bytes; got " + std::to_string(credential.key.size()));
  }
  if (credential.kind == Credential::Kind::kStatus) {
    return Status::InvalidArgument(
        "the status key opens the status page only; the rendezvous wants the cluster token or a "
        "node credential");
  }
  if (credential.kind == Credential::Kind::kNode) {
    DROVER_RETURN_IF_ERROR(wire::ValidateCredentialId(credential.executor_id));
  }
  wire::Token token;
  std::copy(credential.key.begin(), credential.key.end(), token.begin());
  DROVER_ASSIGN_OR_RETURN(HostPort target, ParseAddress(options.address));

  const Clock::time_point start = Clock::now();
  std::mt19937_64 random(std::random_device{}());
  Milliseconds backoff = std::max(options.initial_backoff, Milliseconds(1));
  const Milliseconds max_backoff = std::max(options.max_backoff, backoff);
  int last_error = 0;
  std::string last_error_text;
  int attempts = 0;
  os::UniqueFd fd;
  for (;;) {
    ++attempts;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
    addrinfo* addresses = nullptr;
    int gai = ::getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &addresses);
    if (gai == 0) {
      ConnectAttempt attempt = ConnectOnce(addresses, deadline);
      ::freeaddrinfo(addresses);
      if (attempt.fd.get() >= 0) {
        fd = std::move(attempt.fd);
        break;
      }
      last_error = attempt.error;
      last_error_text = ErrnoText(attempt.error);
      if (!attempt.retriable) {
        return Status::Unavailable("cannot connect to rendezvous server " + options.address + ": " +
                                   last_error_text);
      }
    } else if (gai == EAI_AGAIN) {
      last_error_text = std::string("cannot resolve ") + target.host + ": " + gai_strerror(gai);
    } else if (gai == EAI_SYSTEM) {
      last_error = errno;
      last_error_text = "cannot resolve " + target.host + ": " + ErrnoText(last_error);
    } else {
      return Status::InvalidArgument("cannot resolve rendezvous server address " + options.address +
                                     ": " + gai_strerror(gai));
    }

    Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return Status::DeadlineExceeded("could not connect to " + options.address + " within " +
                                      std::to_string(MillisecondsBetween(start, deadline)) +
                                      " ms (last error: " + last_error_text + ", " +
                                      std::to_string(attempts) +
                                      (attempts == 1 ? " attempt)" : " attempts)"));
    }
    // Full jitter: a uniform wait in [0, backoff], so nodes started together
    // do not knock on the server in lockstep.
    std::uniform_int_distribution<int64_t> jitter(0, backoff.count());
    Clock::time_point wake =
        std::min<Clock::time_point>(deadline, now + Milliseconds(jitter(random)));
    std::this_thread::sleep_until(wake);
    backoff = std::min(backoff * 2, max_backoff);
  }

  int one = 1;
  if (::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Status::IoError("cannot set TCP_NODELAY on the connection to " + options.address + ": " +
                           ErrnoText(errno));
  }
  auto impl = std::make_unique<TcpClientImpl>(std::move(options), token, std::move(fd));
  DROVER_RETURN_IF_ERROR(impl->Handshake(deadline));
  return std::unique_ptr<RendezvousClient>(
      new RendezvousClient(std::make_unique<TcpBackend>(std::move(impl))));
}

Result<FormedCluster> TcpBackend::Register(const NodeInfo& node, Deadline deadline) {
  return impl_->Register(node, deadline);
}

Result<std::vector<FormedCluster>> TcpBackend::RegisterHost(const std::vector<NodeInfo>& nodes,
                                                            Deadline deadline) {
  return impl_->RegisterHost(nodes, deadline);
}

void TcpBackend::StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload) {
  impl_->StartHeartbeats(interval, std::move(payload));
}

Status TcpBackend::StartHostHeartbeats(Milliseconds interval,
                                       std::function<std::vector<NodeHeartbeat>()> payloads) {
  return impl_->StartHostHeartbeats(interval, std::move(payloads));
}

Status TcpBackend::ReportError(const std::string& executor_id, const std::string& message,
                               const std::vector<std::string>& last_log_lines) {
  wire::Control control;
  control.set_kind(wire::Control::REPORT_ERROR);
  control.set_executor_id(executor_id);
  control.set_message(message);
  for (const std::string& line : last_log_lines) control.add_last_log_lines(line);
  // As for LEAVE: the failed node's last counts land first, so the run's
  // summary says what it read before it failed, not what it read a beat ago.
  DROVER_RETURN_IF_ERROR(impl_->SendFinalHeartbeat());
  return impl_->SendControl(std::move(control));
}

Result<ClusterState> TcpBackend::QueryState(Deadline deadline) {
  return impl_->QueryState(deadline);
}

Status TcpBackend::StopAll() {
  wire::Control control;
  control.set_kind(wire::Control::STOP_ALL);
  return impl_->SendControl(std::move(control));
}

Status TcpBackend::Leave() {
  // The server handles frames in order: the last counts land before LEAVE.
  DROVER_RETURN_IF_ERROR(impl_->SendFinalHeartbeat());
  wire::Control control;
  control.set_kind(wire::Control::LEAVE);
  return impl_->SendControl(std::move(control));
}

Status TcpBackend::LeaveNode(const std::string& executor_id) {
  DROVER_RETURN_IF_ERROR(impl_->SendFinalHeartbeat());
  wire::Control control;
  control.set_kind(wire::Control::LEAVE);
  control.set_executor_id(executor_id);
  return impl_->SendControl(std::move(control));
}

Result<bool> TcpBackend::WaitForStop(Deadline deadline, int wake_fd) {
  return impl_->WaitForStop(deadline, wake_fd);
}

Result<RendezvousClient::Instruction> TcpBackend::WaitForInstruction(Deadline deadline,
                                                                     int wake_fd) {
  return impl_->WaitForInstruction(deadline, wake_fd);
}

Status TcpBackend::Set(const std::string& key, const std::string& value, Deadline deadline) {
  wire::KvRequest request;
  request.set_op(wire::KvRequest::SET);
  request.set_key(key);
  request.set_value(value);
  return impl_->Kv(std::move(request), deadline, "SET '" + key + "'").status();
}

Result<std::optional<std::string>> TcpBackend::Get(const std::string& key, Deadline deadline) {
  wire::KvRequest request;
  request.set_op(wire::KvRequest::GET);
  request.set_key(key);
  DROVER_ASSIGN_OR_RETURN(wire::KvReply reply,
                          impl_->Kv(std::move(request), deadline, "GET '" + key + "'",
                                    /*not_found_is_answer=*/true));
  if (!reply.found()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(*reply.mutable_value()));
}

Result<int64_t> TcpBackend::Add(const std::string& key, int64_t delta, Deadline deadline) {
  wire::KvRequest request;
  request.set_op(wire::KvRequest::ADD);
  request.set_key(key);
  request.set_delta(delta);
  DROVER_ASSIGN_OR_RETURN(wire::KvReply reply,
                          impl_->Kv(std::move(request), deadline, "ADD '" + key + "'"));
  return reply.number();
}

Status TcpBackend::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  wire::KvRequest request;
  request.set_op(wire::KvRequest::WAIT);
  for (const std::string& key : keys) {
    if (key.size() > kMaxKeyBytes) {
      return Status::InvalidArgument("a key is at most " + std::to_string(kMaxKeyBytes) +
                                     " bytes; got " + std::to_string(key.size()));
    }
    request.add_keys(key);
  }
  // The server gives up a little before the caller does, so its answer (which
  // names the keys still missing) gets here in time.
  Clock::time_point now = Clock::now();
  Milliseconds remaining =
      deadline > now ? std::chrono::duration_cast<Milliseconds>(deadline - now) : Milliseconds(0);
  Milliseconds margin = std::min(kWaitReplyMargin, remaining / 10);
  request.set_deadline_ms(static_cast<uint64_t>((remaining - margin).count()));
  return impl_->Kv(std::move(request), deadline, "WAIT for " + JoinKeys(keys)).status();
}

Result<std::string> TcpBackend::CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired, Deadline deadline) {
  wire::KvRequest request;
  request.set_op(wire::KvRequest::COMPARE_SET);
  request.set_key(key);
  request.set_expected(expected);
  request.set_value(desired);
  DROVER_ASSIGN_OR_RETURN(wire::KvReply reply,
                          impl_->Kv(std::move(request), deadline, "COMPARE_SET '" + key + "'"));
  return std::move(*reply.mutable_value());
}

Result<bool> TcpBackend::Delete(const std::string& key, Deadline deadline) {
  wire::KvRequest request;
  request.set_op(wire::KvRequest::DELETE);
  request.set_key(key);
  DROVER_ASSIGN_OR_RETURN(wire::KvReply reply,
                          impl_->Kv(std::move(request), deadline, "DELETE '" + key + "'",
                                    /*not_found_is_answer=*/true));
  return reply.found();
}

// ---------------------------------------------------------------------------

RendezvousClient::RendezvousClient(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)) {}
RendezvousClient::~RendezvousClient() = default;

Result<FormedCluster> RendezvousClient::Register(const NodeInfo& node, Deadline deadline) {
  return backend_->Register(node, deadline);
}

void RendezvousClient::StartHeartbeats(Milliseconds interval,
                                       std::function<HeartbeatPayload()> payload) {
  backend_->StartHeartbeats(interval, std::move(payload));
}

Status RendezvousClient::StartHostHeartbeats(Milliseconds interval,
                                             std::function<std::vector<NodeHeartbeat>()> payloads) {
  return backend_->StartHostHeartbeats(interval, std::move(payloads));
}

Status RendezvousClient::ReportError(const std::string& executor_id, const std::string& message,
                                     const std::vector<std::string>& last_log_lines) {
  return backend_->ReportError(executor_id, message, last_log_lines);
}

Result<ClusterState> RendezvousClient::QueryState(Deadline deadline) {
  return backend_->QueryState(deadline);
}

Status RendezvousClient::StopAll() {
  return backend_->StopAll();
}

Status RendezvousClient::Leave() {
  return backend_->Leave();
}

Result<std::vector<FormedCluster>> RendezvousClient::RegisterHost(
    const std::vector<NodeInfo>& nodes, Deadline deadline) {
  return backend_->RegisterHost(nodes, deadline);
}

Status RendezvousClient::LeaveNode(const std::string& executor_id) {
  return backend_->LeaveNode(executor_id);
}

Result<bool> RendezvousClient::WaitForStop(Deadline deadline, int wake_fd) {
  return backend_->WaitForStop(deadline, wake_fd);
}

Result<RendezvousClient::Instruction> RendezvousClient::WaitForInstruction(Deadline deadline,
                                                                           int wake_fd) {
  return backend_->WaitForInstruction(deadline, wake_fd);
}

Status RendezvousClient::Set(const std::string& key, const std::string& value, Deadline deadline) {
  return backend_->Set(key, value, deadline);
}

Result<std::optional<std::string>> RendezvousClient::Get(const std::string& key,
                                                         Deadline deadline) {
  return backend_->Get(key, deadline);
}

Result<int64_t> RendezvousClient::Add(const std::string& key, int64_t delta, Deadline deadline) {
  return backend_->Add(key, delta, deadline);
}

Status RendezvousClient::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  return backend_->Wait(keys, deadline);
}

Result<std::string> RendezvousClient::CompareSet(const std::string& key,
                                                 const std::string& expected,
                                                 const std::string& desired, Deadline deadline) {
  return backend_->CompareSet(key, expected, desired, deadline);
}

Result<bool> RendezvousClient::Delete(const std::string& key, Deadline deadline) {
  return backend_->Delete(key, deadline);
}

}  // namespace drover

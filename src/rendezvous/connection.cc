#include "rendezvous/connection.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "os/duration_text.h"
#include "os/tcp_keepalive.h"

namespace drover::rendezvous_internal {

using asio::ip::tcp;

Connection::Connection(ConnectionHost* host, tcp::socket socket, uint64_t id, std::string peer,
                       const ConnectionOptions& options)
    : Peer(id, std::move(peer)),
      host_(host),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      options_(options),
      reader_(wire::kHandshakeMaxFrameBytes) {}  // until StartSession

void Connection::Start() {
  asio::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
  if (options_.keepalive_interval.count() > 0 &&
      !os::SetTcpKeepalive(socket_.native_handle(), options_.keepalive_interval,
                           options_.keepalive_probes)) {
    host_->Log("no TCP keepalive on the connection from " + address() + ": " +
               std::strerror(errno) + "; a host that stops answering is found by its silence");
  }
  ArmTimer(options_.handshake_timeout, TimerKind::kHandshake);
  Park();
}

// Reads through the shared buffer until a read comes back short (the
// socket had no more), then parks. Parking after a short read loses
// nothing: the reactor is edge-triggered, and every later arrival is a new
// edge.
void Connection::ReadMore() {
  std::vector<char>& buffer = host_->read_buffer();
  for (int i = 0; i < kMaxReadsPerWakeup; ++i) {
    if (state_ == State::kClosed) return;
    asio::error_code ec;
    size_t n = socket_.read_some(asio::buffer(buffer), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec == asio::error::interrupted) continue;
    if (ec) return ReadFailed(ec);
    if (!Consume(std::string_view(buffer.data(), n))) return;
    if (n < buffer.size()) break;
    if (i + 1 == kMaxReadsPerWakeup) {
      // Fairness: let other connections run, then continue.
      asio::post(socket_.get_executor(), [self = shared_from_this()] { self->ReadMore(); });
      return;
    }
  }
  Park();
}

// Waits for bytes with a read into the connection's own small buffer, not
// a bare readiness wait: asio re-registers the descriptor with epoll
// (EPOLL_CTL_MOD) for every wait, while a read is performed by the reactor
// on the registration it already has, and most frames fit the buffer.
void Connection::Park() {
  if (state_ == State::kClosed) return;
  socket_.async_receive(asio::buffer(parked_),
                        [self = shared_from_this()](asio::error_code ec, size_t n) {
                          if (self->state_ == State::kClosed) return;
                          if (ec) return self->ReadFailed(ec);
                          if (!self->Consume(std::string_view(self->parked_.data(), n))) return;
                          if (n == self->parked_.size()) {
                            self->ReadMore();  // perhaps more waiting
                          } else {
                            self->Park();
                          }
                        });
}

bool Connection::Consume(std::string_view bytes) {
  if (state_ == State::kClosed) return false;
  if (state_ == State::kDraining) return true;  // discard until the peer closes
  reader_.Append(bytes);
  HandleBuffered();
  return state_ != State::kClosed;
}

void Connection::NoteLoss(const asio::error_code& ec) {
  if (ec == asio::error::timed_out) timed_out_ = true;
}

void Connection::ReadFailed(const asio::error_code& ec) {
  NoteLoss(ec);
  if (state_ == State::kDraining) {
    Close();
  } else if (reader_.mid_frame()) {
    Close("short frame: connection ended after " + std::to_string(reader_.buffered_bytes()) +
          " bytes of an unfinished frame (" + ec.message() + ")");
  } else {
    Close();
  }
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
        host_->HandleFrame(*this, frame);
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
    if (timer_kind_ != TimerKind::kFrame) ArmTimer(options_.handshake_timeout, TimerKind::kFrame);
  } else {
    if (timer_kind_ == TimerKind::kFrame || timer_kind_ == TimerKind::kHandshake) CancelTimer();
    // Release the consumed bytes: a parked connection should hold no buffer.
    if (reader_.buffered_bytes() == 0) {
      reader_ = wire::FrameReader(options_.max_frame_bytes);
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
  const Milliseconds handshake_timeout = options_.handshake_timeout;
  switch (kind) {
    case TimerKind::kHandshake:
      if (reader_.mid_frame()) {
        Close("short frame: " + std::to_string(reader_.buffered_bytes()) +
              " bytes of an unfinished frame, then nothing; no handshake from " + address() +
              " within " + os::SecondsText(handshake_timeout));
      } else {
        Close("no handshake from " + address() + " within " + os::SecondsText(handshake_timeout));
      }
      break;
    case TimerKind::kFrame:
      Close("short frame: " + std::to_string(reader_.buffered_bytes()) +
            " bytes of an unfinished frame, then nothing for " +
            os::SecondsText(handshake_timeout));
      break;
    case TimerKind::kDrain:
      if (writing_) {
        host_->Log("closing connection from " + address() +
                   ": it did not read its ERROR frame within " +
                   os::SecondsText(options_.drain_timeout) + " (" + std::to_string(queued_bytes_) +
                   " bytes unsent)");
      }
      Close();
      break;
    case TimerKind::kNone:
      break;
  }
}

void Connection::StartSession(const wire::Token& session_key) {
  sealer_.emplace(session_key, wire::Direction::kServerToClient);
  opener_.emplace(session_key, wire::Direction::kClientToServer);
  reader_.set_sealed(true);
  reader_.set_max_frame_bytes(options_.max_frame_bytes);
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
  queued_.push_back(std::move(frame));
  if (writing_ || flush_posted_) return;
  // Written once the handler that queued it returns: what one turn of the
  // loop queues for this peer (AUTH_OK and REGISTERED, a host's CLUSTER
  // frames) leaves in one write.
  flush_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    if (!self->writing_) self->WriteNext();
  });
}

// Writes every queued frame in one gather write: a reply and the frame
// queued behind it (REGISTERED and CLUSTER) leave in one system call.
void Connection::WriteNext() {
  if (queued_.empty() || state_ == State::kClosed) {
    writing_ = false;
    // A parked connection holds no frame storage.
    std::vector<OutFrame>().swap(in_flight_);
    std::vector<OutFrame>().swap(queued_);
    if (state_ == State::kDraining) BeginDrain();
    return;
  }
  writing_ = true;
  in_flight_.swap(queued_);
  queued_.clear();
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(in_flight_.size() * 3);
  for (const OutFrame& frame : in_flight_) {
    buffers.push_back(asio::buffer(frame.head));
    if (frame.shared) buffers.push_back(asio::buffer(frame.shared->bytes));
    if (!frame.tail.empty()) buffers.push_back(asio::buffer(frame.tail));
  }
  asio::async_write(socket_, std::move(buffers),
                    [self = shared_from_this()](asio::error_code ec, size_t /*bytes*/) {
                      if (self->state_ == State::kClosed) return;
                      if (ec) {
                        self->NoteLoss(ec);
                        self->Close();
                        return;
                      }
                      for (const OutFrame& frame : self->in_flight_) {
                        self->queued_bytes_ -= frame.head.size() + frame.tail.size();
                      }
                      self->in_flight_.clear();
                      self->WriteNext();
                    });
}

void Connection::Reject(wire::ErrorCode code, const std::string& message,
                        const std::string& reason) {
  if (!open()) return;
  auto self = shared_from_this();  // OnClosed drops the host's reference
  host_->Rejected(address(), reason);
  // Queue the ERROR frame first: Send() refuses once draining.
  queued_.push_back(OutFrame{
      sealer_ ? sealer_->SealError(code, message) : wire::EncodeError(code, message), nullptr, {}});
  queued_bytes_ += queued_.back().head.size();
  state_ = State::kDraining;
  // One deadline for writing what is queued and the peer's close: a peer
  // that stops reading cannot hold the connection (or the server's
  // shutdown) longer.
  ArmTimer(options_.drain_timeout, TimerKind::kDrain);
  if (!detached_) {
    detached_ = true;
    host_->OnClosed(*this);
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
  if (writing_ && !error_deferred_) {
    // The write may be out already with only its handler still queued (the
    // peer can read it before the handler runs): try once more after it.
    error_deferred_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this(), code, message] {
      self->SendErrorNowAndClose(code, message);
    });
    return;
  }
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
  auto self = shared_from_this();  // OnClosed drops the host's reference
  if (!reason.empty() && state_ != State::kDraining) host_->Rejected(address(), reason);
  state_ = State::kClosed;
  ++timer_generation_;
  timer_.cancel();
  asio::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  // in_flight_ stays until the connection is destroyed: an aborted write's
  // buffers point into it.
  if (!detached_) {
    detached_ = true;
    host_->OnClosed(*this);
  }
  host_->LeftHandshake(*this);
}

}  // namespace drover::rendezvous_internal

// Connection: one TCP connection to the rendezvous server, the Peer its
// handlers see. It reads and frames its bytes (wire::FrameReader: the 1 KiB
// limit until the handshake completes, max_frame_bytes after), checks sealed
// frames, writes what is queued in one gather write (a shared body straight
// from its buffer), and runs its own deadline timer: the handshake, a frame
// once started, and the drain after an ERROR frame. A bad frame ends this
// connection only. Every complete frame goes to its ConnectionHost (the
// server).
//
// Called only on the server's event loop. Owned by the host's connection
// map and by its own pending handlers (shared_from_this), so a handler never
// sees a freed connection; the host must outlive every pending handler.

#ifndef DROVER_SRC_RENDEZVOUS_CONNECTION_H_
#define DROVER_SRC_RENDEZVOUS_CONNECTION_H_

#include <array>
#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/rendezvous.h"
#include "rendezvous/peer.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover::rendezvous_internal {

class Connection;

// What a Connection reports to, on the loop thread.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // A complete frame (opened, once the session is sealed).
  virtual void HandleFrame(Connection& conn, const wire::Frame& frame) = 0;
  // `conn` closed, or began draining after an ERROR frame: it takes no more
  // frames. Called once per connection.
  virtual void OnClosed(Connection& conn) = 0;
  // `conn` was closed for a bad frame, failed auth or a timeout (the log
  // line and RendezvousServerOptions::on_rejected).
  virtual void Rejected(const std::string& peer, const std::string& reason) = 0;
  // `conn` no longer waits to authenticate: it did, or it closed. Called
  // at every close; Connection::unauthenticated says whether it counts.
  virtual void LeftHandshake(Connection& conn) = 0;
  virtual void Log(const std::string& line) = 0;
  // One buffer that every connection's reads go through.
  virtual std::vector<char>& read_buffer() = 0;
};

struct ConnectionOptions {
  // From accept to AUTH; also how long a started frame may take to finish.
  Milliseconds handshake_timeout{10'000};
  uint32_t max_frame_bytes = wire::kServerMaxFrameBytes;  // after the handshake
  Milliseconds drain_timeout{2'000};
  // TCP keepalive (os/tcp_keepalive.h): a probe each interval once idle,
  // the connection ends after `keepalive_probes` unanswered; 0: none.
  Milliseconds keepalive_interval{0};
  int keepalive_probes = 5;
};

class Connection final : public Peer, public std::enable_shared_from_this<Connection> {
 public:
  // A peer that sends requests but does not read the replies is cut off
  // once this much (not counting shared bytes) waits to be written to it.
  static constexpr size_t kMaxQueuedBytes = 64u << 20;
  // Reads per wake-up before the loop yields to other connections.
  static constexpr int kMaxReadsPerWakeup = 16;
  // A parked connection's own read buffer: room for a handshake frame or a
  // heartbeat, so that most frames take one recv; larger ones continue
  // through the host's shared buffer.
  static constexpr size_t kParkedReadBytes = 128;

  Connection(ConnectionHost* host, asio::ip::tcp::socket socket, uint64_t id, std::string peer,
             const ConnectionOptions& options);

  // Arms the handshake timer and starts reading.
  void Start();

  using Peer::Close;
  using Peer::Send;
  void Send(OutFrame frame) override;
  void Reject(wire::ErrorCode code, const std::string& message, const std::string& reason) override;
  void Close(const std::string& reason) override;
  void StartSession(const wire::Token& session_key) override;
  // One ERROR frame, best-effort and non-blocking, then Close(): for
  // shutdown, where the loop will not wait. Behind a write in progress, it
  // waits one turn of the loop for that write's handler.
  void SendErrorNowAndClose(wire::ErrorCode code, const std::string& message);

  // Counted among the connections waiting to authenticate (the host's).
  bool unauthenticated = true;
  // The kernel ended the connection: keepalive probes or data sent went
  // unanswered (its host stopped answering).
  bool timed_out() const { return timed_out_; }

 private:
  enum class TimerKind { kNone, kHandshake, kFrame, kDrain };

  void ReadMore();
  void Park();
  // Takes `bytes` read from the socket; false once nothing more is read.
  bool Consume(std::string_view bytes);
  void ReadFailed(const asio::error_code& ec);
  void NoteLoss(const asio::error_code& ec);
  void HandleBuffered();
  void ArmTimer(Milliseconds after, TimerKind kind);
  void CancelTimer();
  void OnTimer(TimerKind kind);
  void WriteNext();
  void BeginDrain();

  ConnectionHost* host_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  TimerKind timer_kind_ = TimerKind::kNone;
  uint64_t timer_generation_ = 0;
  const ConnectionOptions options_;
  wire::FrameReader reader_;
  std::optional<wire::FrameSealer> sealer_;  // set once the session starts
  std::optional<wire::FrameOpener> opener_;
  std::vector<OutFrame> queued_;     // to write next, all in one gather write
  std::vector<OutFrame> in_flight_;  // being written; an aborted write's buffers
                                     // point into it, so only its handler clears it
  size_t queued_bytes_ = 0;          // head and tail sizes of both, not shared bytes
  bool writing_ = false;
  bool flush_posted_ = false;    // a WriteNext is posted
  bool error_deferred_ = false;  // SendErrorNowAndClose waited for a write once
  std::array<char, kParkedReadBytes> parked_{};
  bool detached_ = false;  // host_->OnClosed already ran
  bool timed_out_ = false;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_CONNECTION_H_

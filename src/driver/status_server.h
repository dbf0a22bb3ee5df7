// StatusServer: the driver's HTTP status server (docs/status.md), on
// cpp-httplib.
//
//   GET /                           the live page (embedded; no build step)
//   GET /api/cluster                the run as JSON (RunStatus snapshot)
//   GET /api/nodes/<executor>/log   {"executor_id", "task", "lines": [...], "first", "next"}
//                                   (?lines=N: the last N; ?since=S: those from number S on)
//   GET /metrics                    the Prometheus text format
//
// Bound to loopback it answers anyone on this host. Bound to any other
// address, /api/* and /metrics want the status key (HKDF of the cluster
// token for this purpose alone: the cluster token never crosses HTTP), as
// "Authorization: Bearer drover-status-v1-<64 hex>", and answer 401
// without it; the page
// itself holds no data and reads the token from its URL's fragment
// (#token=...), which browsers never send.
//
// Every request must name the server in its Host header (StatusHostAllowed):
// a page from elsewhere that rebinds its own DNS name to this address (DNS
// rebinding) gets 421. Connections are bounded (StatusServerLimits): a fixed
// number served at once, a bounded queue (503 beyond it), and a byte and
// time budget per request.
//
// The server reads `status` (thread-safe) from its own threads; Stop() (or
// the destructor) ends them. Start and Stop from one thread.

#ifndef DROVER_DRIVER_STATUS_SERVER_H_
#define DROVER_DRIVER_STATUS_SERVER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driver/run_status.h"
#include "drover/rendezvous.h"
#include "drover/status.h"

namespace drover {

// How much the server takes on (docs/status.md, "Limits").
struct StatusServerLimits {
  int threads = 4;      // connections served at once
  int max_queued = 16;  // accepted connections waiting for a thread; more get 503
  // One request's line, headers and body; beyond it the request fails (400)
  // or the connection is closed.
  size_t max_request_bytes = 16 * 1024;
  // For one request to arrive whole, from its first byte (or from the
  // connection's start) to its last; then the connection is closed.
  std::chrono::milliseconds request_timeout{5'000};
  // For each write of a response to make progress.
  std::chrono::milliseconds write_timeout{5'000};
  // Keep-alive: requests per connection, and how long it may sit idle between them.
  int keep_alive_requests = 5;
  std::chrono::milliseconds keep_alive_idle{2'000};
};

struct StatusServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;  // 0: any free port
  // What "Authorization: Bearer" must carry: the status key's text
  // (Credential::ForStatus(...).ToText()), never the cluster token.
  // Required beyond loopback (kInvalidArgument without it).
  std::string bearer_token;
  // Names a request's Host header may carry besides "localhost", IP
  // literals and `address` (drover run --status-host, and this host's name).
  std::vector<std::string> allowed_hosts;
  StatusServerLimits limits;
};

class StatusServer {
 public:
  // Binds and starts serving. kUnavailable naming the address when it
  // cannot bind (a port in use).
  static Result<std::unique_ptr<StatusServer>> Start(StatusServerOptions options,
                                                     const RunStatus& status);
  // A server that does not listen, only Answer()s (the request fuzzer).
  static Result<std::unique_ptr<StatusServer>> Unbound(StatusServerOptions options,
                                                       const RunStatus& status);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const;
  // "http://127.0.0.1:8265/" (an IPv6 address in brackets).
  std::string url() const;
  // Whether requests for data need the token.
  bool needs_token() const;
  void Stop();

  // Answers `raw`, the bytes a client sent on one connection, from
  // `remote_address`, as the server would (every check and limit but the
  // timeouts): the bytes it would send back. Thread-safe.
  std::string Answer(std::string_view raw, const std::string& remote_address = "127.0.0.1") const;

 private:
  class Impl;
  explicit StatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `address` is a loopback address or name (127.0.0.0/8, ::1,
// localhost).
bool IsLoopbackAddress(const std::string& address);

// Whether a request whose Host header is `host` (name[:port]) may be
// answered by a server bound to `address`: no Host at all (not a browser),
// an IP literal (DNS rebinding needs a name), "localhost", `address`, or
// one of `allowed` (case-insensitive, a trailing dot ignored). The port is
// not compared: a tunnel (ssh -L) forwards another one. A malformed Host is
// refused.
bool StatusHostAllowed(std::string_view host, const std::string& address,
                       const std::vector<std::string>& allowed);

// The executor of "/api/nodes/<executor>/log", or nullopt for another path.
std::optional<std::string> LogPathExecutor(std::string_view path);
// The `lines` parameter of the log endpoint: decimal digits, at most 1000
// (larger asks for 1000); nullopt when it is not a number.
std::optional<size_t> ParseLogLines(std::string_view text);
// The `since` parameter of the log endpoint: a line's sequence number
// (RunStatus::AppendLog), decimal digits; nullopt when it is not one.
std::optional<uint64_t> ParseLogSince(std::string_view text);

// The page served at "/" (status_page/index.html, embedded at build time).
extern const char* const kStatusPageHtml;

}  // namespace drover

#endif  // DROVER_DRIVER_STATUS_SERVER_H_

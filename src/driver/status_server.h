// StatusServer: the driver's HTTP status server (docs/status.md), on
// cpp-httplib.
//
//   GET /                           the live page (embedded; no build step)
//   GET /api/cluster                the run as JSON (RunStatus snapshot)
//   GET /api/nodes/<executor>/log   {"executor_id", "task", "lines": [...]}
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
// The server reads `status` (thread-safe) from its own threads; Stop() (or
// the destructor) ends them. Start and Stop from one thread.

#ifndef DROVER_DRIVER_STATUS_SERVER_H_
#define DROVER_DRIVER_STATUS_SERVER_H_

#include <memory>
#include <optional>
#include <string>

#include "driver/run_status.h"
#include "drover/rendezvous.h"
#include "drover/status.h"

namespace drover {

struct StatusServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;  // 0: any free port
  // What "Authorization: Bearer" must carry: the status key's text
  // (Credential::ForStatus(...).ToText()), never the cluster token.
  // Required beyond loopback (kInvalidArgument without it).
  std::string bearer_token;
};

class StatusServer {
 public:
  // Binds and starts serving. kUnavailable naming the address when it
  // cannot bind (a port in use).
  static Result<std::unique_ptr<StatusServer>> Start(StatusServerOptions options,
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

 private:
  class Impl;
  explicit StatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `address` is a loopback address or name (127.0.0.0/8, ::1,
// localhost).
bool IsLoopbackAddress(const std::string& address);

// The page served at "/" (status_page/index.html, embedded at build time).
extern const char* const kStatusPageHtml;

}  // namespace drover

#endif  // DROVER_DRIVER_STATUS_SERVER_H_

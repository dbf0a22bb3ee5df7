// A driver's status page (docs/status.md): its server, the status key a
// server beyond loopback wants (written 0600 to LOG_DIR/status.token), the
// "status page URL" line, and the entry by which `drover status` finds the
// run. For the built-in driver and for a driver of an etcd run alike.

#ifndef DROVER_DRIVER_STATUS_PAGE_SERVER_H_
#define DROVER_DRIVER_STATUS_PAGE_SERVER_H_

#include <memory>
#include <ostream>
#include <string>

#include "driver/run_status.h"
#include "driver/status_server.h"
#include "drover/rendezvous.h"

namespace drover {

struct StatusPageOptions {
  StatusServerOptions server;  // its bearer token is set here
  std::string log_dir;         // where status.token goes
  std::string cluster_id;
  double started_at_unix = 0;
  std::string live_runs_dir;  // "" : not announced to `drover status`
};

struct StatusPage {
  std::unique_ptr<StatusServer> server;
  std::string token_file;     // "" : the server needs no token
  std::string live_run_file;  // "" : not announced
};

// Starts the server on `status`, with the status key of `token` (never the
// token itself: docs/security.md). A failure to announce the run is said on
// `err` and is not an error.
Result<StatusPage> StartStatusPage(StatusPageOptions options, const ClusterToken& token,
                                   const RunStatus& status, std::ostream& err);

}  // namespace drover

#endif  // DROVER_DRIVER_STATUS_PAGE_SERVER_H_

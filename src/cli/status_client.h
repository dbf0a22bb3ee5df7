// The client side of a driver's status server (docs/status.md), shared by
// `drover status` and `drover logs`: which server to ask (an address, or
// the run going on here), with which key, and GETs of its JSON, each within
// a timeout. Functions only; thread-safe.

#ifndef DROVER_CLI_STATUS_CLIENT_H_
#define DROVER_CLI_STATUS_CLIENT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "drover/status.h"

namespace drover::cli {

// A status server: its base URL ("http://127.0.0.1:8265") and the file of
// the key it wants ("": none).
struct StatusServerRef {
  std::string url;
  std::string token_file;
};

// "host:port" or "http://host:port/..." -> "http://host:port".
std::string StatusBaseUrl(std::string address);

// The server `target` names: an address; "" the one run with a status
// server going on here as this user (the live-runs directory,
// driver/live_runs.h); a directory, the live run that logs there. A
// non-empty `token_file` replaces the live run's. kNotFound when no such run
// is going on, kFailedPrecondition listing them when several are.
Result<StatusServerRef> FindStatusServer(const std::string& target, const std::string& token_file);

// What "Authorization: Bearer" carries to `server`, from its token file:
// the status key itself (status.token beside a run's logs), or derived from
// the cluster token, which never goes over HTTP; "" without a token file.
// kPermissionDenied for a node credential; the file's own errors.
Result<std::string> StatusBearer(const StatusServerRef& server);

// GET `path_and_query` ("/api/cluster") as a JSON object. kUnavailable when
// nothing answers in time (the server is gone), kPermissionDenied on 401
// (saying how to give the key), kNotFound on 404, kFailedPrecondition on
// any other answer that is not a JSON object; every message names the URL.
Result<nlohmann::json> GetStatusJson(const std::string& url, const std::string& path_and_query,
                                     const std::string& bearer);

// Whether /api/cluster (or a run.json) says the run ended: succeeded,
// failed or interrupted.
bool RunEnded(const nlohmann::json& cluster);

}  // namespace drover::cli

#endif  // DROVER_CLI_STATUS_CLIENT_H_

#include "cli/status_client.h"

#include <httplib.h>

#include <filesystem>
#include <vector>

#include "driver/live_runs.h"
#include "drover/environment.h"
#include "drover/rendezvous.h"

namespace drover::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kRequestTimeoutSeconds = 5;

std::string Why(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "nothing answers there (connection refused or unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "no connection within " + std::to_string(kRequestTimeoutSeconds) + " s";
    case httplib::Error::Read:
      return "no answer within " + std::to_string(kRequestTimeoutSeconds) + " s";
    default:
      return httplib::to_string(error);
  }
}

}  // namespace

std::string StatusBaseUrl(std::string address) {
  if (address.rfind("http://", 0) != 0 && address.rfind("https://", 0) != 0) {
    address = "http://" + address;
  }
  size_t path = address.find('/', address.find("//") + 2);
  return path == std::string::npos ? address : address.substr(0, path);
}

Result<StatusServerRef> FindStatusServer(const std::string& target, const std::string& token_file) {
  const bool directory = !target.empty() && fs::is_directory(target);
  if (!target.empty() && !directory) {
    if (target.find(':') == std::string::npos) {
      return Status::NotFound(target +
                              " is not a log directory, a run id under ./drover-logs, or a "
                              "status server's HOST:PORT");
    }
    return StatusServerRef{StatusBaseUrl(target), token_file};
  }
  const std::string live_runs_dir = LiveRunsDir(ProcessEnvironment());
  std::vector<LiveRun> matching;
  for (const LiveRun& run : ListLiveRuns(live_runs_dir)) {
    std::error_code ec;
    if (!directory || fs::equivalent(run.log_dir, target, ec)) matching.push_back(run);
  }
  if (matching.size() == 1) {
    const LiveRun& run = matching.front();
    return StatusServerRef{StatusBaseUrl(run.url),
                           token_file.empty() ? run.token_file : token_file};
  }
  if (matching.empty()) {
    return Status::NotFound(directory ? target +
                                            " holds no run.json, and no running drover run logs "
                                            "there"
                                      : "no drover run with a status server is running on this "
                                        "host as this user (" +
                                            live_runs_dir + "); give its ADDRESS or log directory");
  }
  std::string list = "several drover runs are running; give one's address:";
  for (const LiveRun& run : matching) {
    list += "\n  " + run.url + "  " + run.cluster_id + "  (pid " + std::to_string(run.pid) +
            ", logs in " + run.log_dir + ")";
  }
  return Status::FailedPrecondition(list);
}

Result<std::string> StatusBearer(const StatusServerRef& server) {
  if (server.token_file.empty()) return std::string();
  const std::string& path = server.token_file;
  DROVER_ASSIGN_OR_RETURN(Credential credential, Credential::ReadFile(path));
  switch (credential.kind) {
    case Credential::Kind::kStatus:
      return credential.ToText();
    case Credential::Kind::kCluster: {
      DROVER_ASSIGN_OR_RETURN(Credential status_key,
                              Credential::ForStatus(ClusterToken{credential.key}));
      return status_key.ToText();
    }
    case Credential::Kind::kNode:
      break;
  }
  return Status::PermissionDenied(path + " holds " + credential.Describe() +
                                  ", which cannot read the status; give the run's status.token "
                                  "or the cluster token");
}

Result<json> GetStatusJson(const std::string& url, const std::string& path_and_query,
                           const std::string& bearer) {
  httplib::Client client(url);
  client.set_connection_timeout(kRequestTimeoutSeconds, 0);
  client.set_read_timeout(kRequestTimeoutSeconds, 0);
  httplib::Headers headers;
  if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
  httplib::Result response = client.Get(path_and_query, headers);
  if (!response) {
    return Status::Unavailable("cannot reach a status server at " + url + ": " +
                               Why(response.error()));
  }
  if (response->status == 401) {
    return Status::PermissionDenied(
        url +
        " wants the status key: give --token-file FILE (its status.token, or the cluster "
        "token)" +
        std::string(bearer.empty() ? "" : " (the one given was refused)"));
  }
  const std::string what = url + path_and_query.substr(0, path_and_query.find('?'));
  if (response->status == 404) return Status::NotFound(what + " answered HTTP 404");
  if (response->status != 200) {
    return Status::FailedPrecondition(what + " answered HTTP " + std::to_string(response->status));
  }
  json body = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return Status::FailedPrecondition(what + " did not answer JSON");
  return body;
}

bool RunEnded(const json& cluster) {
  auto it = cluster.find("phase");
  const std::string phase = it != cluster.end() && it->is_string() ? it->get<std::string>() : "";
  return phase == "succeeded" || phase == "failed" || phase == "interrupted";
}

}  // namespace drover::cli

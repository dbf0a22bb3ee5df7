#include "cli/status_command.h"

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/resolve_command.h"
#include "driver/live_runs.h"
#include "driver/status_text.h"
#include "drover/environment.h"
#include "drover/rendezvous.h"

namespace drover::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kRequestTimeoutSeconds = 5;

// "host:port" or "http://host:port/..." -> "http://host:port".
std::string BaseUrl(std::string address) {
  if (address.rfind("http://", 0) != 0 && address.rfind("https://", 0) != 0) {
    address = "http://" + address;
  }
  size_t path = address.find('/', address.find("//") + 2);
  return path == std::string::npos ? address : address.substr(0, path);
}

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

struct Fetched {
  json cluster;
  std::string error;  // "" : fetched
};

Fetched FetchCluster(const std::string& base, const std::string& token_hex) {
  httplib::Client client(base);
  client.set_connection_timeout(kRequestTimeoutSeconds, 0);
  client.set_read_timeout(kRequestTimeoutSeconds, 0);
  httplib::Headers headers;
  if (!token_hex.empty()) headers.emplace("Authorization", "Bearer " + token_hex);
  httplib::Result response = client.Get("/api/cluster", headers);
  if (!response) {
    return {json(), "cannot reach a status server at " + base + ": " + Why(response.error())};
  }
  if (response->status == 401) {
    return {json(), base +
                        " wants the status key: give --token-file FILE (its status.token, or "
                        "the cluster token)" +
                        std::string(token_hex.empty() ? "" : " (the one given was refused)")};
  }
  if (response->status != 200) {
    return {json(), base + "/api/cluster answered HTTP " + std::to_string(response->status)};
  }
  json cluster = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!cluster.is_object()) return {json(), base + "/api/cluster did not answer JSON"};
  return {std::move(cluster), ""};
}

bool Ended(const json& cluster) {
  auto it = cluster.find("phase");
  const std::string phase = it != cluster.end() && it->is_string() ? it->get<std::string>() : "";
  return phase == "succeeded" || phase == "failed" || phase == "interrupted";
}

int ShowFinished(const RunStatusFlags& flags, const fs::path& record_path, std::ostream& out,
                 std::ostream& err) {
  std::ifstream in(record_path);
  std::stringstream text;
  text << in.rdbuf();
  json record = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    err << "drover status: " << record_path.string() << " is not a run record (JSON object)\n";
    return kExitFailure;
  }
  out << (flags.json ? record.dump(2) + "\n" : RenderStatus(record));
  return kExitOk;
}

// Which server to ask, and with which token file: the target itself, or a
// live run (the only one, or the one logging to the target directory).
struct Server {
  std::string url;
  std::string token_file;
};

Result<Server> FindServer(const RunStatusFlags& flags, std::ostream& err) {
  const bool directory = !flags.target.empty() && fs::is_directory(flags.target);
  if (!flags.target.empty() && !directory) return Server{BaseUrl(flags.target), flags.token_file};
  const std::string live_runs_dir = LiveRunsDir(ProcessEnvironment());
  std::vector<LiveRun> runs = ListLiveRuns(live_runs_dir);
  std::vector<LiveRun> matching;
  for (const LiveRun& run : runs) {
    std::error_code ec;
    if (!directory || fs::equivalent(run.log_dir, flags.target, ec)) matching.push_back(run);
  }
  if (matching.size() == 1) {
    const LiveRun& run = matching.front();
    return Server{BaseUrl(run.url), flags.token_file.empty() ? run.token_file : flags.token_file};
  }
  if (matching.empty()) {
    return Status::NotFound(directory ? flags.target +
                                            " holds no run.json, and no running drover run logs "
                                            "there"
                                      : "no drover run with a status server is running on this "
                                        "host as this user (" +
                                            live_runs_dir + "); give its ADDRESS");
  }
  std::string list = "several drover runs are running; give one's address:";
  for (const LiveRun& run : matching) {
    list += "\n  " + run.url + "  " + run.cluster_id + "  (pid " + std::to_string(run.pid) +
            ", logs in " + run.log_dir + ")";
  }
  return Status::FailedPrecondition(list);
}

// The bearer token for a status server from a token file: the status key
// itself (status.token beside a run's logs), or derived from the cluster
// token, which never goes over HTTP.
Result<std::string> StatusBearer(const std::string& path) {
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

}  // namespace

int ShowRunStatus(const RunStatusFlags& flags, std::ostream& out, std::ostream& err) {
  if (!flags.target.empty() && fs::is_directory(flags.target) &&
      fs::exists(fs::path(flags.target) / "run.json")) {
    return ShowFinished(flags, fs::path(flags.target) / "run.json", out, err);
  }
  Result<Server> server = FindServer(flags, err);
  if (!server.ok()) {
    err << "drover status: " << server.status().message() << "\n";
    return kExitFailure;
  }
  std::string token_hex;
  if (!server->token_file.empty()) {
    Result<std::string> bearer = StatusBearer(server->token_file);
    if (!bearer.ok()) {
      err << "drover status: " << bearer.status().message() << "\n";
      return kExitBadInput;
    }
    token_hex = std::move(bearer).value();
  }
  for (;;) {
    Fetched fetched = FetchCluster(server->url, token_hex);
    if (!fetched.error.empty()) {
      err << "drover status: " << fetched.error << "\n";
      return kExitFailure;
    }
    if (flags.json) {
      out << fetched.cluster.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    } else {
      if (flags.watch > 0 && ::isatty(STDOUT_FILENO)) out << "\033[H\033[2J";
      out << RenderStatus(fetched.cluster);
    }
    out << std::flush;
    if (flags.watch <= 0 || Ended(fetched.cluster)) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.watch));
    if (!::isatty(STDOUT_FILENO)) out << "\n";
  }
}

}  // namespace drover::cli

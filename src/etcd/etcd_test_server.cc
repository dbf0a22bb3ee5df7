#include "etcd/etcd_test_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "os/find_program.h"
#include "os/run_process.h"
#include "os/shell_quote.h"
#include "os/unique_fd.h"

namespace drover::etcd {
namespace {

using Clock = std::chrono::steady_clock;

// `count` distinct free loopback ports. They are free when we close our
// sockets, so another process may take one before etcd binds it; Start()
// tries again with fresh ports when a member fails.
Result<std::vector<int>> FreePorts(int count) {
  std::vector<os::UniqueFd> sockets;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    os::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Status::IoError("socket: " + std::string(strerror(errno)));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return Status::IoError("bind 127.0.0.1:0: " + std::string(strerror(errno)));
    }
    ports.push_back(ntohs(address.sin_port));
    sockets.push_back(std::move(fd));
  }
  return ports;
}

bool Healthy(const std::string& endpoint) {
  size_t colon = endpoint.rfind(':');
  httplib::Client client(endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1)));
  client.set_connection_timeout(std::chrono::milliseconds(500));
  client.set_read_timeout(std::chrono::seconds(2));
  httplib::Result response = client.Get("/health");
  return response && response->status == 200 &&
         response->body.find("\"true\"") != std::string::npos;
}

std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "(no log at " + path + ")\n";
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text.size() > max_bytes) text = "..." + text.substr(text.size() - max_bytes);
  return text;
}

}  // namespace

Result<std::unique_ptr<EtcdTestServer>> EtcdTestServer::Start(EtcdTestServerOptions options) {
  if (options.members < 1) return Status::InvalidArgument("etcd test server: no member asked for");
  for (const char* program : {"etcd", "etcdctl"}) {
    if (!os::FindProgram(program, "/usr/local/bin:/usr/bin:/bin")) {
      return Status::NotFound(std::string(program) +
                              " is not installed (Debian: etcd-server etcd-client)");
    }
  }
  std::unique_ptr<EtcdTestServer> server(new EtcdTestServer());
  std::string pattern = (std::filesystem::temp_directory_path() / "drover-etcd-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::IoError("mkdtemp " + pattern + ": " + strerror(errno));
  }
  server->dir_ = pattern;
  Status status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    status = server->TryStart(options, attempt);
    if (status.ok()) return server;
  }
  return status;
}

Status EtcdTestServer::TryStart(const EtcdTestServerOptions& options, int attempt) {
  StopAll();
  endpoints_.clear();
  logs_.clear();
  killed_.assign(options.members, false);
  DROVER_ASSIGN_OR_RETURN(std::vector<int> ports, FreePorts(2 * options.members));
  std::string cluster;
  for (int i = 0; i < options.members; ++i) {
    if (i > 0) cluster += ",";
    cluster += "m" + std::to_string(i) + "=http://127.0.0.1:" + std::to_string(ports[2 * i + 1]);
  }
  std::string token = "drover-test-" + std::to_string(::getpid()) + "-" +
                      std::to_string(Clock::now().time_since_epoch().count());
  for (int i = 0; i < options.members; ++i) {
    std::string client_url = "http://127.0.0.1:" + std::to_string(ports[2 * i]);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(ports[2 * i + 1]);
    std::string member_dir = dir_ + "/a" + std::to_string(attempt) + "-m" + std::to_string(i);
    std::vector<std::string> argv = {"etcd",
                                     "--name=m" + std::to_string(i),
                                     "--data-dir=" + member_dir,
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=" + cluster,
                                     "--initial-cluster-state=new",
                                     "--initial-cluster-token=" + token,
                                     "--logger=zap"};
    argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
    std::string log = member_dir + ".log";
    // Through sh for the redirection: etcd reports bad flags on stderr
    // before its logger starts.
    os::SubprocessOptions spawn;
    spawn.argv = {"/bin/sh", "-c",
                  "exec " + os::ShellJoin(argv) + " >" + os::ShellQuote(log) + " 2>&1"};
    DROVER_ASSIGN_OR_RETURN(os::Subprocess process, os::Subprocess::Spawn(spawn));
    processes_.push_back(std::move(process));
    endpoints_.push_back("127.0.0.1:" + std::to_string(ports[2 * i]));
    logs_.push_back(log);
  }

  Clock::time_point deadline = Clock::now() + options.start_timeout;
  for (int i = 0; i < options.members; ++i) {
    while (!Healthy(endpoints_[i])) {
      for (int j = 0; j < options.members; ++j) {
        if (std::optional<os::ExitStatus> exit = processes_[j].Poll()) {
          Status failed = Status::Unavailable("etcd member m" + std::to_string(j) + " at " +
                                              endpoints_[j] + " ended (" + exit->ToString() +
                                              ") before the cluster was healthy; logs:\n" + Logs());
          StopAll();
          return failed;
        }
      }
      if (Clock::now() >= deadline) {
        Status failed = Status::Unavailable(
            "etcd member m" + std::to_string(i) + " at " + endpoints_[i] + " not healthy after " +
            std::to_string(options.start_timeout.count()) + " s; logs:\n" + Logs());
        StopAll();
        return failed;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return Status::Ok();
}

void EtcdTestServer::StopAll() {
  for (os::Subprocess& process : processes_) {
    process.SignalGroup(SIGKILL);
    process.Wait();
  }
  processes_.clear();
}

EtcdTestServer::~EtcdTestServer() {
  StopAll();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string EtcdTestServer::ClientUrls() const {
  std::string out;
  for (const std::string& endpoint : endpoints_) {
    if (!out.empty()) out += ",";
    out += "http://" + endpoint;
  }
  return out;
}

Status EtcdTestServer::Kill(int member) {
  if (member < 0 || member >= static_cast<int>(processes_.size())) {
    return Status::InvalidArgument("etcd test server: no member " + std::to_string(member) +
                                   " (there are " + std::to_string(processes_.size()) + ")");
  }
  processes_[member].SignalGroup(SIGKILL);
  processes_[member].Wait();
  killed_[member] = true;
  return Status::Ok();
}

Result<std::string> EtcdTestServer::Etcdctl(const std::vector<std::string>& args) const {
  std::string urls;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (killed_[i]) continue;
    if (!urls.empty()) urls += ",";
    urls += "http://" + endpoints_[i];
  }
  std::vector<std::string> argv = {"etcdctl", "--endpoints=" + urls};
  argv.insert(argv.end(), args.begin(), args.end());
  DROVER_ASSIGN_OR_RETURN(os::CommandResult result, os::RunProcess(argv, "", 30));
  if (result.exit_code != 0) {
    return Status::Internal(os::ShellJoin(argv) + " failed (exit code " +
                            std::to_string(result.exit_code) + "): " + result.output +
                            result.error);
  }
  return result.output;
}

std::string EtcdTestServer::Logs() const {
  std::string out;
  for (size_t i = 0; i < logs_.size(); ++i) {
    out += "--- etcd member m" + std::to_string(i) + " (" + logs_[i] + ")\n";
    out += Tail(logs_[i], 4000);
    if (!out.empty() && out.back() != '\n') out += "\n";
  }
  return out;
}

}  // namespace drover::etcd

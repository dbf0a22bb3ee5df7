#include "driver/status_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "wire/auth.h"

namespace drover {
namespace {

constexpr auto kStartWait = std::chrono::seconds(5);
constexpr size_t kDefaultLogLines = 50;
constexpr size_t kMaxLogLines = 1000;

// The requests are small and rare; the library's default pool is 8 threads.
constexpr size_t kServerThreads = 2;

std::string HostForUrl(const std::string& address) {
  return address.find(':') != std::string::npos ? "[" + address + "]" : address;
}

// Node output and errors are whatever the programs printed: not always UTF-8.
std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  if (address == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

class StatusServer::Impl {
 public:
  Impl(StatusServerOptions options, const RunStatus& status)
      : options_(std::move(options)), status_(status) {}
  ~Impl() { Stop(); }

  Status Start();
  void Stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const {
    return "http://" + HostForUrl(options_.address) + ":" + std::to_string(port_) + "/";
  }
  bool needs_token() const { return !IsLoopbackAddress(options_.address); }

 private:
  // Whether the request may have data; answers 401 when not.
  bool Authorized(const httplib::Request& request, httplib::Response& response) const;
  void Routes();

  StatusServerOptions options_;
  const RunStatus& status_;
  std::string token_hex_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

Status StatusServer::Impl::Start() {
  if (needs_token()) {
    if (options_.bearer_token.empty()) {
      return Status::InvalidArgument("a status server on " + options_.address +
                                     " (beyond loopback) needs the status key");
    }
    token_hex_ = options_.bearer_token;
  }
  server_.new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  // The library's default sets SO_REUSEPORT: a second driver asking for the
  // same port would share it and answer half the requests. SO_REUSEADDR
  // alone only lets a restarted driver take a port left in TIME_WAIT.
  server_.set_socket_options([](int socket) {
    int yes = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_.set_read_timeout(5, 0);
  server_.set_write_timeout(5, 0);
  server_.set_keep_alive_timeout(5);
  Routes();
  if (options_.port == 0) {
    port_ = server_.bind_to_any_port(options_.address);
  } else if (server_.bind_to_port(options_.address, options_.port)) {
    port_ = options_.port;
  } else {
    port_ = -1;
  }
  if (port_ <= 0) {
    return Status::Unavailable("cannot serve the status page on " + HostForUrl(options_.address) +
                               ":" + std::to_string(options_.port) +
                               " (address not here, or the port is in use)");
  }
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  // stop() before the loop runs would be lost, and Stop() would wait forever.
  auto deadline = std::chrono::steady_clock::now() + kStartWait;
  while (!server_.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      server_.stop();
      thread_.detach();
      return Status::Unavailable("the status server did not start within 5 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

bool StatusServer::Impl::Authorized(const httplib::Request& request,
                                    httplib::Response& response) const {
  if (!needs_token()) return true;
  const std::string header = request.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.size() > prefix.size() && header.compare(0, prefix.size(), prefix) == 0 &&
      wire::ConstantTimeEquals(header.substr(prefix.size()), token_hex_)) {
    return true;
  }
  response.status = 401;
  response.set_header("WWW-Authenticate", "Bearer realm=\"drover\"");
  response.set_content(
      "this status server wants the status key: send \"Authorization: Bearer <the content of "
      "the run's status.token>\"\n",
      "text/plain");
  return false;
}

void StatusServer::Impl::Routes() {
  server_.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_header("Cache-Control", "no-store");
    response.set_content(kStatusPageHtml, "text/html; charset=utf-8");
  });
  server_.Get("/api/cluster", [this](const httplib::Request& request, httplib::Response& response) {
    if (!Authorized(request, response)) return;
    response.set_header("Cache-Control", "no-store");
    response.set_content(JsonText(SnapshotToJson(status_.Snapshot())), "application/json");
  });
  server_.Get(R"(/api/nodes/([^/]+)/log)", [this](const httplib::Request& request,
                                                  httplib::Response& response) {
    if (!Authorized(request, response)) return;
    size_t count = kDefaultLogLines;
    if (request.has_param("lines")) {
      try {
        count = std::min<size_t>(std::stoul(request.get_param_value("lines")), kMaxLogLines);
      } catch (const std::exception&) {
        response.status = 400;
        response.set_content("lines must be a number\n", "text/plain");
        return;
      }
    }
    const std::string executor = request.matches[1];
    std::optional<RunStatus::NodeLog> log = status_.LogTail(executor, count);
    if (!log) {
      response.status = 404;
      response.set_content("no node with executor id '" + executor + "'\n", "text/plain");
      return;
    }
    nlohmann::json body{{"executor_id", executor}, {"task", log->task}, {"lines", log->lines}};
    response.set_header("Cache-Control", "no-store");
    response.set_content(JsonText(body), "application/json");
  });
  server_.Get("/metrics", [this](const httplib::Request& request, httplib::Response& response) {
    if (!Authorized(request, response)) return;
    response.set_content(SnapshotToPrometheus(status_.Snapshot()),
                         "text/plain; version=0.0.4; charset=utf-8");
  });
}

Result<std::unique_ptr<StatusServer>> StatusServer::Start(StatusServerOptions options,
                                                          const RunStatus& status) {
  auto impl = std::make_unique<Impl>(std::move(options), status);
  DROVER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(impl)));
}

StatusServer::StatusServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StatusServer::~StatusServer() = default;
int StatusServer::port() const {
  return impl_->port();
}
std::string StatusServer::url() const {
  return impl_->url();
}
bool StatusServer::needs_token() const {
  return impl_->needs_token();
}
void StatusServer::Stop() {
  impl_->Stop();
}

}  // namespace drover

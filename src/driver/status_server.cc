#include "driver/status_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>

#include "common/mutex.h"
#include "os/fd_io.h"
#include "os/unique_fd.h"
#include "wire/auth.h"

namespace drover {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kStartWait = std::chrono::seconds(5);
constexpr size_t kDefaultLogLines = 50;
constexpr size_t kMaxLogLines = 1000;
constexpr size_t kMaxHostInMessage = 100;

std::string HostForUrl(const std::string& address) {
  return address.find(':') != std::string::npos ? "[" + address + "]" : address;
}

// Node output and errors are whatever the programs printed: not always UTF-8.
std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Lower(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

// A host name as compared: lower case, without one trailing dot or the
// brackets of an IPv6 literal.
std::string HostKey(std::string_view name) {
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  return Lower(name);
}

bool IsIpLiteral(const std::string& name) {
  in_addr v4{};
  in6_addr v6{};
  return ::inet_pton(AF_INET, name.c_str(), &v4) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), &v6) == 1;
}

bool ValidPort(std::string_view port) {
  return port.size() <= 5 &&
         std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One connection's bytes for httplib's request parser, which has no limit of
// its own on a request line's length or on the number of headers: each
// request gets a byte budget and a deadline, and reading stops when either
// runs out.
class Connection : public httplib::Stream {
 public:
  // The next request: at most `bytes`, all before `deadline`.
  void StartRequest(size_t bytes, Clock::time_point deadline) {
    budget_ = bytes;
    deadline_ = deadline;
  }
  // Whether the next request starts (a byte arrives) within `idle`.
  virtual bool WaitForRequest(milliseconds idle) = 0;

 protected:
  size_t budget_ = 0;
  Clock::time_point deadline_{};
};

// A connection over a socket. Every wait also ends when `stop_fd` turns
// readable (the server stops).
class SocketConnection final : public Connection {
 public:
  SocketConnection(int fd, int stop_fd, milliseconds write_timeout)
      : fd_(fd), stop_fd_(stop_fd), write_timeout_(write_timeout) {}

  bool WaitForRequest(milliseconds idle) override {
    return begin_ < end_ || Wait(POLLIN, Clock::now() + idle);
  }
  bool is_readable() const override { return begin_ < end_ || Wait(POLLIN, deadline_); }
  bool is_writable() const override { return Wait(POLLOUT, Clock::now() + write_timeout_); }
  ssize_t read(char* ptr, size_t size) override {
    if (budget_ == 0) return -1;
    if (begin_ == end_) {
      if (!Wait(POLLIN, deadline_)) return -1;
      ssize_t n;
      do {
        n = ::recv(fd_, buffer_, sizeof(buffer_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min({size, budget_, end_ - begin_});
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    budget_ -= n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!Wait(POLLOUT, Clock::now() + write_timeout_)) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(::getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Waits for `events` on the socket until `deadline`; false on timeout or stop.
  bool Wait(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count() + 1;
      if (left <= 0) return false;
      pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
      int ready = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1'000'000)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || fds[1].revents != 0) return false;
      if (fds[0].revents != 0) return true;
    }
  }
  template <typename Get>
  void Address(Get get, std::string& ip, int& port) const {
    sockaddr_storage storage{};
    socklen_t length = sizeof(storage);
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return;
    char text[INET6_ADDRSTRLEN] = "";
    if (storage.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&storage);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
      port = ntohs(v4->sin_port);
    } else if (storage.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&storage);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  const int fd_;
  const int stop_fd_;
  const milliseconds write_timeout_;
  char buffer_[4096];
  size_t begin_ = 0;
  size_t end_ = 0;
};

// A connection whose client sent `input` and then closed its side.
class MemoryConnection final : public Connection {
 public:
  MemoryConnection(std::string_view input, std::string remote)
      : input_(input), remote_(std::move(remote)) {}

  bool WaitForRequest(milliseconds) override { return position_ < input_.size(); }
  bool is_readable() const override { return position_ < input_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    if (budget_ == 0) return -1;
    const size_t n = std::min({size, budget_, input_.size() - position_});
    std::memcpy(ptr, input_.data() + position_, n);
    position_ += n;
    budget_ -= n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    output_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_;
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8265;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  const std::string& output() const { return output_; }

 private:
  std::string_view input_;
  size_t position_ = 0;
  std::string remote_;
  std::string output_;
};

// The listening thread runs each accepted connection's job at once: the
// job only hands the socket to the server's own bounded queue.
class InlineQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// cpp-httplib's server, with its request parser opened to connections of
// our own and its per-connection work taken over.
class HttpServer final : public httplib::Server {
 public:
  using httplib::Server::process_request;
  // Takes an accepted socket (on the listening thread); the library does not
  // close it once handed over.
  std::function<void(int)> on_accept;

 private:
  bool process_and_close_socket(socket_t sock) override {
    on_accept(sock);
    return true;
  }
};

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

bool StatusHostAllowed(std::string_view host, const std::string& address,
                       const std::vector<std::string>& allowed) {
  while (!host.empty() && (host.front() == ' ' || host.front() == '\t')) host.remove_prefix(1);
  while (!host.empty() && (host.back() == ' ' || host.back() == '\t')) host.remove_suffix(1);
  if (host.empty()) return true;
  std::string_view name = host;
  std::string_view port;
  if (host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    name = host.substr(1, close - 1);
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
    }
    in6_addr v6{};
    return ValidPort(port) && ::inet_pton(AF_INET6, std::string(name).c_str(), &v6) == 1;
  }
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos) {
    if (host.find(':') != colon) return false;  // an IPv6 literal needs brackets
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
  }
  if (name.empty() || !ValidPort(port)) return false;
  const std::string key = HostKey(name);
  if (key.empty()) return false;
  if (IsIpLiteral(key) || key == "localhost" || key == HostKey(address)) return true;
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& other) { return HostKey(other) == key; });
}

std::optional<std::string> LogPathExecutor(std::string_view path) {
  constexpr std::string_view kPrefix = "/api/nodes/";
  constexpr std::string_view kSuffix = "/log";
  if (path.size() <= kPrefix.size() + kSuffix.size() || path.substr(0, kPrefix.size()) != kPrefix ||
      path.substr(path.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  std::string_view executor =
      path.substr(kPrefix.size(), path.size() - kPrefix.size() - kSuffix.size());
  if (executor.find('/') != std::string_view::npos) return std::nullopt;
  return std::string(executor);
}

std::optional<size_t> ParseLogLines(std::string_view text) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  size_t value = 0;
  for (char c : text) {
    value = std::min(value * 10 + static_cast<size_t>(c - '0'), kMaxLogLines);
  }
  return value;
}

std::optional<uint64_t> ParseLogSince(std::string_view text) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

class StatusServer::Impl {
 public:
  Impl(StatusServerOptions options, const RunStatus& status)
      : options_(std::move(options)), status_(status) {}
  ~Impl() { Stop(); }

  Status Configure();
  Status Start();
  void Stop();
  int port() const { return port_; }
  std::string url() const {
    return "http://" + HostForUrl(options_.address) + ":" + std::to_string(port_) + "/";
  }
  bool needs_token() const { return !IsLoopbackAddress(options_.address); }
  std::string Answer(std::string_view raw, const std::string& remote) const;

 private:
  // Whether the request may have data; answers 401 when not.
  bool Authorized(const httplib::Request& request, httplib::Response& response) const;
  // Answers 421 (and true) for a Host that does not name this server.
  bool MisdirectedAnswered(const httplib::Request& request, httplib::Response& response) const;
  void AnswerLog(const std::string& executor, const httplib::Request& request,
                 httplib::Response& response) const;
  void Routes();
  void Accept(os::UniqueFd fd);
  void Work();
  // One connection's requests, keep-alive included.
  void Serve(Connection& connection) const;

  StatusServerOptions options_;
  const RunStatus& status_;
  std::string token_hex_;
  mutable HttpServer server_;
  std::thread thread_;
  int port_ = 0;

  // Connections accepted and not yet served: the listening thread adds,
  // the workers take.
  Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<os::UniqueFd> queued_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  os::UniqueFd stop_fd_;  // readable once stopping: ends every wait of a connection
};

Status StatusServer::Impl::Configure() {
  if (needs_token()) {
    if (options_.bearer_token.empty()) {
      return Status::InvalidArgument("a status server on " + options_.address +
                                     " (beyond loopback) needs the status key");
    }
    token_hex_ = options_.bearer_token;
  }
  const StatusServerLimits& limits = options_.limits;
  if (limits.threads < 1 || limits.max_queued < 0 || limits.keep_alive_requests < 1 ||
      limits.max_request_bytes == 0) {
    return Status::InvalidArgument(
        "status server limits: threads, keep-alive requests and "
        "request bytes must be positive");
  }
  server_.new_task_queue = [] { return new InlineQueue; };
  server_.on_accept = [this](int fd) { Accept(os::UniqueFd(fd)); };
  // The library's default sets SO_REUSEPORT: a second driver asking for the
  // same port would share it and answer half the requests. SO_REUSEADDR
  // alone only lets a restarted driver take a port left in TIME_WAIT.
  server_.set_socket_options([](int socket) {
    int yes = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // What the library writes in its Keep-Alive header; Serve enforces it.
  server_.set_keep_alive_max_count(static_cast<size_t>(limits.keep_alive_requests));
  server_.set_keep_alive_timeout(std::max<time_t>(
      1, static_cast<time_t>(
             std::chrono::duration_cast<std::chrono::seconds>(limits.keep_alive_idle).count())));
  server_.set_payload_max_length(limits.max_request_bytes);
  Routes();
  return Status::Ok();
}

Status StatusServer::Impl::Start() {
  DROVER_RETURN_IF_ERROR(Configure());
  DROVER_ASSIGN_OR_RETURN(stop_fd_, os::MakeEventFd());
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
  for (int i = 0; i < options_.limits.threads; ++i) workers_.emplace_back([this] { Work(); });
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  // stop() before the loop runs would be lost, and Stop() would wait forever.
  auto deadline = Clock::now() + kStartWait;
  while (!server_.is_running()) {
    if (Clock::now() > deadline) {
      server_.stop();
      thread_.detach();
      return Status::Unavailable("the status server did not start within 5 s");
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  return Status::Ok();
}

void StatusServer::Impl::Stop() {
  if (thread_.joinable()) {
    server_.stop();
    thread_.join();
  }
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  if (stop_fd_.valid()) os::SignalEventFd(stop_fd_.get());
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  MutexLock lock(mu_);
  queued_.clear();
  stop_fd_.Reset();
}

void StatusServer::Impl::Accept(os::UniqueFd fd) {
  // The library accepts without SOCK_CLOEXEC; the agents the driver starts
  // must not inherit a client's connection.
  ::fcntl(fd.get(), F_SETFD, FD_CLOEXEC);
  {
    MutexLock lock(mu_);
    if (!stopping_ && queued_.size() < static_cast<size_t>(options_.limits.max_queued)) {
      queued_.push_back(std::move(fd));
      wake_.notify_one();
      return;
    }
  }
  // Refused at once, without waiting for the request: the listening thread
  // must not block. What already arrived is read so that closing does not
  // reset the connection before the client reads the answer.
  char discard[4096];
  while (::recv(fd.get(), discard, sizeof(discard), MSG_DONTWAIT) > 0) {
  }
  static const std::string kBusy = [] {
    const std::string body = "drover status server: too many connections; try again shortly\n";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  }();
  ssize_t ignored = ::send(fd.get(), kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)ignored;
  ::shutdown(fd.get(), SHUT_WR);
}

void StatusServer::Impl::Work() {
  for (;;) {
    os::UniqueFd fd;
    {
      MutexLock lock(mu_);
      wake_.wait(mu_, [this] {
        mu_.AssertHeld();
        return stopping_ || !queued_.empty();
      });
      if (stopping_) return;
      fd = std::move(queued_.front());
      queued_.pop_front();
    }
    SocketConnection connection(fd.get(), stop_fd_.get(), options_.limits.write_timeout);
    Serve(connection);
    ::shutdown(fd.get(), SHUT_RDWR);
  }
}

void StatusServer::Impl::Serve(Connection& connection) const {
  const StatusServerLimits& limits = options_.limits;
  for (int served = 0; served < limits.keep_alive_requests; ++served) {
    if (!connection.WaitForRequest(served == 0 ? limits.request_timeout : limits.keep_alive_idle)) {
      return;
    }
    connection.StartRequest(limits.max_request_bytes, Clock::now() + limits.request_timeout);
    bool closed = false;
    const bool last = served + 1 == limits.keep_alive_requests;
    if (!server_.process_request(connection, last, closed, {}) || closed) return;
  }
}

std::string StatusServer::Impl::Answer(std::string_view raw, const std::string& remote) const {
  MemoryConnection connection(raw, remote);
  Serve(connection);
  return connection.output();
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

bool StatusServer::Impl::MisdirectedAnswered(const httplib::Request& request,
                                             httplib::Response& response) const {
  if (request.get_header_value_count("Host") > 1) {
    response.status = 400;
    response.set_content("drover status server: more than one Host header\n", "text/plain");
    return true;
  }
  const std::string host = request.get_header_value("Host");
  if (StatusHostAllowed(host, options_.address, options_.allowed_hosts)) return false;
  std::string shown = host.substr(0, kMaxHostInMessage);
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  response.status = 421;
  response.set_content(
      "drover status server: the Host header \"" + shown +
          "\" does not name this server (a page from another site, or DNS rebinding?); open " +
          url() + ", or let the name in with drover run --status-host NAME\n",
      "text/plain");
  return true;
}

void StatusServer::Impl::AnswerLog(const std::string& executor, const httplib::Request& request,
                                   httplib::Response& response) const {
  if (!Authorized(request, response)) return;
  // A follower (since=) wants everything after what it saw, as much as one
  // answer may carry; a glance (lines= alone) the last few.
  const bool follow = request.has_param("since");
  size_t count = follow ? kMaxLogLines : kDefaultLogLines;
  if (request.has_param("lines")) {
    std::optional<size_t> lines = ParseLogLines(request.get_param_value("lines"));
    if (!lines) {
      response.status = 400;
      response.set_content("lines must be a number\n", "text/plain");
      return;
    }
    count = *lines;
  }
  std::optional<uint64_t> since;
  if (follow) {
    since = ParseLogSince(request.get_param_value("since"));
    if (!since) {
      response.status = 400;
      response.set_content("since must be a line number\n", "text/plain");
      return;
    }
  }
  std::optional<RunStatus::NodeLog> log =
      since ? status_.LogSince(executor, *since, count) : status_.LogTail(executor, count);
  if (!log) {
    response.status = 404;
    response.set_content("no node with executor id '" + executor + "'\n", "text/plain");
    return;
  }
  nlohmann::json body{{"executor_id", executor},
                      {"task", log->task},
                      {"lines", log->lines},
                      {"first", log->first},
                      {"next", log->next}};
  response.set_header("Cache-Control", "no-store");
  response.set_content(JsonText(body), "application/json");
}

void StatusServer::Impl::Routes() {
  // Before any route: the Host check, and the log endpoint, matched by hand
  // (the library's std::regex recurses once per character of the path).
  server_.set_pre_routing_handler(
      [this](const httplib::Request& request, httplib::Response& response) {
        if (MisdirectedAnswered(request, response))
          return httplib::Server::HandlerResponse::Handled;
        if (request.method == "GET" || request.method == "HEAD") {
          if (std::optional<std::string> executor = LogPathExecutor(request.path)) {
            AnswerLog(*executor, request, response);
            return httplib::Server::HandlerResponse::Handled;
          }
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  server_.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_header("Cache-Control", "no-store");
    response.set_content(kStatusPageHtml, "text/html; charset=utf-8");
  });
  server_.Get("/api/cluster", [this](const httplib::Request& request, httplib::Response& response) {
    if (!Authorized(request, response)) return;
    response.set_header("Cache-Control", "no-store");
    response.set_content(JsonText(SnapshotToJson(status_.Snapshot())), "application/json");
  });
  server_.Get("/api/metrics", [this](const httplib::Request& request, httplib::Response& response) {
    if (!Authorized(request, response)) return;
    response.set_header("Cache-Control", "no-store");
    response.set_content(JsonText(status_.MetricHistoryJson()), "application/json");
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

Result<std::unique_ptr<StatusServer>> StatusServer::Unbound(StatusServerOptions options,
                                                            const RunStatus& status) {
  auto impl = std::make_unique<Impl>(std::move(options), status);
  DROVER_RETURN_IF_ERROR(impl->Configure());
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
std::string StatusServer::Answer(std::string_view raw, const std::string& remote_address) const {
  return impl_->Answer(raw, remote_address);
}

}  // namespace drover

#include "driver/status_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A TCP connection to 127.0.0.1:port; -1 when it cannot connect.
int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early; the answer says why
    done += static_cast<size_t>(n);
  }
}

// What the server sends until it closes the connection, waiting at most
// `timeout` in all; "TIMEOUT" appended when it did not close in time.
std::string ReadUntilClosed(int fd, milliseconds timeout = milliseconds(10'000)) {
  std::string got;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return got + "TIMEOUT";
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buffer[4096];
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return got;
    got.append(buffer, static_cast<size_t>(n));
  }
}

// Sends `request` on a new connection and returns the whole answer.
std::string Exchange(int port, const std::string& request) {
  int fd = Connect(port);
  if (fd < 0) return "CONNECT FAILED";
  SendAll(fd, request);
  std::string answer = ReadUntilClosed(fd);
  ::close(fd);
  return answer;
}

std::string Get(const std::string& path, const std::string& host) {
  return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
}

class StatusServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RunSnapshot snapshot;
    snapshot.cluster_id = "run-7";
    snapshot.phase = "running";
    NodeSnapshot node;
    node.executor_id = "0";
    node.job = "worker";
    node.task_index = 0;
    snapshot.nodes.push_back(node);
    status_.Publish(snapshot);
    status_.AppendLog("0", {"one", "two", "bad \xff utf-8"});
  }

  std::unique_ptr<StatusServer> Serve(const std::string& address, std::string bearer_token = "",
                                      StatusServerOptions options = {}) {
    options.address = address;
    options.bearer_token = std::move(bearer_token);
    auto server = StatusServer::Start(options, status_);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  RunStatus status_;
};

TEST_F(StatusServerTest, LoopbackServesThePageTheJsonTheLogAndMetrics) {
  auto server = Serve("127.0.0.1");
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(server->needs_token());
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()) + "/");
  httplib::Client client("127.0.0.1", server->port());
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<table id=\"nodes\""), std::string::npos);
  auto cluster = client.Get("/api/cluster");
  ASSERT_TRUE(cluster);
  EXPECT_EQ(cluster->status, 200);
  EXPECT_EQ(nlohmann::json::parse(cluster->body)["cluster_id"], "run-7");
  auto log = client.Get("/api/nodes/0/log?lines=2");
  ASSERT_TRUE(log);
  nlohmann::json lines = nlohmann::json::parse(log->body);
  EXPECT_EQ(lines["task"], "worker:0");
  ASSERT_EQ(lines["lines"].size(), 2u);
  EXPECT_EQ(lines["lines"][0], "two");
  EXPECT_EQ(lines["first"], 1);
  EXPECT_EQ(lines["next"], 3);
  EXPECT_EQ(client.Get("/api/nodes/9/log")->status, 404);
  EXPECT_EQ(client.Get("/api/nodes/0/log?lines=x")->status, 400);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("drover_nodes{state=\"starting\"} 1"), std::string::npos);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
}

// drover logs -f asks for the lines after the last one it saw, and gets
// each line once, however the lines and the requests interleave.
TEST_F(StatusServerTest, SinceGivesTheLinesAfterThoseSeen) {
  auto server = Serve("127.0.0.1");
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  auto get = [&](const std::string& path) {
    auto response = client.Get(path);
    EXPECT_TRUE(response);
    EXPECT_EQ(response ? response->status : 0, 200) << path;
    return response ? nlohmann::json::parse(response->body) : nlohmann::json();
  };
  nlohmann::json all = get("/api/nodes/0/log?since=0");
  EXPECT_EQ(all["lines"].size(), 3u);
  EXPECT_EQ(all["first"], 0);
  EXPECT_EQ(all["next"], 3);
  EXPECT_TRUE(get("/api/nodes/0/log?since=3")["lines"].empty());
  status_.AppendLog("0", {"four", "five"});
  nlohmann::json more = get("/api/nodes/0/log?since=3");
  EXPECT_EQ(more["lines"], (nlohmann::json{"four", "five"}));
  EXPECT_EQ(more["next"], 5);
  // At most lines= of them, from the oldest: the rest comes with the next request.
  nlohmann::json some = get("/api/nodes/0/log?since=1&lines=2");
  EXPECT_EQ(some["lines"], (nlohmann::json{"two", "bad \xef\xbf\xbd utf-8"}));
  EXPECT_EQ(some["first"], 1);
  EXPECT_EQ(some["next"], 3);
  EXPECT_EQ(get("/api/nodes/0/log?since=99")["next"], 5);  // nothing beyond the last
  EXPECT_EQ(client.Get("/api/nodes/0/log?since=-1")->status, 400);
  EXPECT_EQ(client.Get("/api/nodes/0/log?since=")->status, 400);
}

TEST_F(StatusServerTest, BeyondLoopbackDataWantsTheToken) {
  auto cluster = ClusterToken::Generate();
  ASSERT_TRUE(cluster.ok());
  auto status_key = Credential::ForStatus(*cluster);
  ASSERT_TRUE(status_key.ok());
  const std::string token = status_key->ToText();
  auto server = Serve("0.0.0.0", token);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->needs_token());
  httplib::Client client("127.0.0.1", server->port());
  EXPECT_EQ(client.Get("/")->status, 200);  // the page holds no data
  for (const char* path : {"/api/cluster", "/metrics", "/api/nodes/0/log"}) {
    auto refused = client.Get(path);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401) << path;
    EXPECT_EQ(refused->get_header_value("WWW-Authenticate"), "Bearer realm=\"drover\"");
    auto other = ClusterToken::Generate();
    EXPECT_EQ(client.Get(path, {{"Authorization", "Bearer " + other->ToHex()}})->status, 401);
    // The cluster token the status key was derived from opens nothing.
    EXPECT_EQ(client.Get(path, {{"Authorization", "Bearer " + cluster->ToHex()}})->status, 401);
    EXPECT_EQ(client.Get(path, {{"Authorization", token}})->status, 401);
    EXPECT_EQ(client.Get(path, {{"Authorization", "Bearer " + token}})->status, 200);
  }
}

TEST_F(StatusServerTest, BeyondLoopbackWithoutATokenIsRefused) {
  StatusServerOptions options;
  options.address = "0.0.0.0";
  auto server = StatusServer::Start(options, status_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), Status::Code::kInvalidArgument);
}

TEST_F(StatusServerTest, APortInUseIsAClearError) {
  auto first = Serve("127.0.0.1");
  ASSERT_NE(first, nullptr);
  StatusServerOptions options;
  options.port = first->port();
  auto second = StatusServer::Start(options, status_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(std::to_string(first->port())), std::string::npos);
}

TEST_F(StatusServerTest, StopsAndStopsAgain) {
  auto server = Serve("127.0.0.1");
  ASSERT_NE(server, nullptr);
  int port = server->port();
  server->Stop();
  server->Stop();
  httplib::Client client("127.0.0.1", port);
  EXPECT_FALSE(client.Get("/api/cluster"));
}

// Issue #15, DNS rebinding: a page on evil.example whose name now resolves to
// 127.0.0.1 sends "Host: evil.example:PORT"; it gets nothing.
TEST_F(StatusServerTest, RequestsMustNameTheServerInTheirHost) {
  StatusServerOptions options;
  options.allowed_hosts = {"head.cluster"};
  auto server = Serve("127.0.0.1", "", options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const std::string with_port = ":" + std::to_string(port);
  for (const std::string& host : std::vector<std::string>{
           "evil.example" + with_port, "evil.example", "head.cluster.evil" + with_port,
           "localhost.evil" + with_port, "a:b:c", "[::1", "127.0.0.1:http"}) {
    for (const char* path : {"/", "/api/cluster", "/metrics", "/api/nodes/0/log"}) {
      const std::string answer = Exchange(port, Get(path, host));
      EXPECT_THAT(answer, StartsWith("HTTP/1.1 421 Misdirected Request")) << host << path;
      EXPECT_THAT(answer, HasSubstr("does not name this server")) << host;
      EXPECT_THAT(answer, Not(HasSubstr("run-7"))) << host << path;
    }
  }
  EXPECT_THAT(Exchange(port, Get("/", "evil.example")), HasSubstr("--status-host"));
  // Loopback names and IP literals with any port (a tunnel forwards another
  // one), and the name let in.
  for (const std::string& host : std::vector<std::string>{
           "127.0.0.1" + with_port, "localhost" + with_port, "LocalHost." + with_port, "[::1]:9000",
           "127.0.0.1", "10.1.2.3:8265", "head.cluster" + with_port, "HEAD.cluster"}) {
    const std::string answer = Exchange(port, Get("/api/cluster", host));
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK")) << host;
    EXPECT_THAT(answer, HasSubstr("run-7")) << host;
  }
  // No Host at all is not a browser (HTTP/1.0 tools).
  EXPECT_THAT(Exchange(port, "GET /api/cluster HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 200"));
  // Two Host headers.
  EXPECT_THAT(Exchange(port,
                       "GET /api/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
                       "Connection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
}

TEST(StatusHostTest, NamesTheServer) {
  const std::vector<std::string> allowed = {"Head.Cluster.", "[fd00::1]"};
  EXPECT_TRUE(StatusHostAllowed("", "127.0.0.1", {}));
  EXPECT_TRUE(StatusHostAllowed(" localhost:1 ", "127.0.0.1", {}));
  EXPECT_TRUE(StatusHostAllowed("192.168.0.7:", "0.0.0.0", {}));
  EXPECT_TRUE(StatusHostAllowed("[::ffff:127.0.0.1]:80", "::", {}));
  EXPECT_TRUE(StatusHostAllowed("node7:8265", "node7", {}));
  EXPECT_TRUE(StatusHostAllowed("head.cluster", "0.0.0.0", allowed));
  EXPECT_FALSE(StatusHostAllowed("fd00::1", "0.0.0.0", allowed));  // brackets needed
  EXPECT_FALSE(StatusHostAllowed("node8:8265", "node7", {}));
  EXPECT_FALSE(StatusHostAllowed("localhost:123456", "127.0.0.1", {}));
  EXPECT_FALSE(StatusHostAllowed("localhost:-1", "127.0.0.1", {}));
  EXPECT_FALSE(StatusHostAllowed("[::1]x", "127.0.0.1", {}));
  EXPECT_FALSE(StatusHostAllowed("[evil.example]", "127.0.0.1", {}));
  EXPECT_FALSE(StatusHostAllowed(":8265", "127.0.0.1", {}));
  EXPECT_FALSE(StatusHostAllowed(".", "127.0.0.1", {}));
  EXPECT_FALSE(StatusHostAllowed("127.0.0.1.evil.example", "127.0.0.1", {}));
}

TEST(StatusRequestTest, LogPathAndLines) {
  EXPECT_EQ(LogPathExecutor("/api/nodes/12/log"), "12");
  EXPECT_EQ(LogPathExecutor("/api/nodes/a b/log"), "a b");
  EXPECT_EQ(LogPathExecutor("/api/nodes//log"), std::nullopt);
  EXPECT_EQ(LogPathExecutor("/api/nodes/1/2/log"), std::nullopt);
  EXPECT_EQ(LogPathExecutor("/api/nodes/1/logs"), std::nullopt);
  EXPECT_EQ(LogPathExecutor("/api/nodes/log"), std::nullopt);
  EXPECT_EQ(ParseLogLines("0"), 0u);
  EXPECT_EQ(ParseLogLines("20"), 20u);
  EXPECT_EQ(ParseLogLines("99999999999999999999999999"), 1000u);
  EXPECT_EQ(ParseLogLines(""), std::nullopt);
  EXPECT_EQ(ParseLogLines("-1"), std::nullopt);
  EXPECT_EQ(ParseLogLines("12abc"), std::nullopt);
  EXPECT_EQ(ParseLogLines(" 1"), std::nullopt);
  EXPECT_EQ(ParseLogSince("0"), 0u);
  EXPECT_EQ(ParseLogSince("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseLogSince("18446744073709551616"), std::nullopt);  // no number a line has
  EXPECT_EQ(ParseLogSince(""), std::nullopt);
  EXPECT_EQ(ParseLogSince("+1"), std::nullopt);
  EXPECT_EQ(ParseLogSince("-1"), std::nullopt);
  EXPECT_EQ(ParseLogSince("1 "), std::nullopt);
}

// Issue #15: connections beyond what the threads and the queue hold are
// answered 503 at once; once the others are gone the server answers again.
TEST_F(StatusServerTest, ConnectionsBeyondTheQueueGet503) {
  StatusServerOptions options;
  options.limits.threads = 1;
  options.limits.max_queued = 2;
  options.limits.request_timeout = milliseconds(60'000);  // the idle ones stay
  auto server = Serve("127.0.0.1", "", options);
  ASSERT_NE(server, nullptr);
  constexpr int kConnections = 8;  // at least 8 - 1 - 2 refused
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    int fd = Connect(server->port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  // The refused ones are answered and closed without sending anything.
  int refused = 0;
  std::vector<bool> done(fds.size(), false);
  const auto deadline = Clock::now() + seconds(20);
  while (refused < kConnections - 3 && Clock::now() < deadline) {
    std::vector<pollfd> polls;
    for (int fd : fds) polls.push_back({fd, POLLIN, 0});
    if (::poll(polls.data(), polls.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (done[i] || polls[i].revents == 0) continue;
      done[i] = true;
      const std::string answer = ReadUntilClosed(fds[i]);
      EXPECT_THAT(answer, StartsWith("HTTP/1.1 503 Service Unavailable"));
      EXPECT_THAT(answer, HasSubstr("too many connections"));
      ++refused;
    }
  }
  EXPECT_GE(refused, kConnections - 3);
  for (int fd : fds) ::close(fd);
  // The held ones are noticed as closed; a new request is served.
  std::string answer;
  for (int attempt = 0; attempt < 200; ++attempt) {
    answer = Exchange(server->port(), Get("/api/cluster", "127.0.0.1"));
    if (answer.rfind("HTTP/1.1 200", 0) == 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
}

// Issue #15: a request that never ends (slow loris), one whose headers go on
// and on, and one with a huge body: each ends its connection, and the server
// goes on serving.
TEST_F(StatusServerTest, OversizedAndEndlessRequestsEndTheirConnection) {
  StatusServerOptions options;
  options.limits.request_timeout = milliseconds(300);
  auto server = Serve("127.0.0.1", "", options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  {  // Half a request, then nothing.
    int fd = Connect(port);
    ASSERT_GE(fd, 0);
    SendAll(fd, "GET /api/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    const std::string answer = ReadUntilClosed(fd);
    ::close(fd);
    EXPECT_THAT(answer, Not(HasSubstr("TIMEOUT")));
    EXPECT_THAT(answer, Not(HasSubstr("run-7")));
  }
  {  // A connection that never sends anything.
    int fd = Connect(port);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(ReadUntilClosed(fd), "");
    ::close(fd);
  }
  std::string headers = "GET /api/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 200; ++i)
    headers += "X-Pad-" + std::to_string(i) + ": " + std::string(1000, 'p') + "\r\n";
  EXPECT_THAT(Exchange(port, headers + "\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Exchange(port, "GET /" + std::string(100'000, 'a') + " HTTP/1.1\r\n\r\n"),
              Not(HasSubstr("200 OK")));
  EXPECT_THAT(Exchange(port,
                       "POST /api/cluster HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
                       "100000000000\r\nConnection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(Exchange(port, Get("/api/cluster", "127.0.0.1")), StartsWith("HTTP/1.1 200"));
}

TEST_F(StatusServerTest, KeepAliveServesAFewRequestsPerConnection) {
  StatusServerOptions options;
  options.limits.keep_alive_requests = 3;
  auto server = Serve("127.0.0.1", "", options);
  ASSERT_NE(server, nullptr);
  std::string requests;
  for (int i = 0; i < 5; ++i) {
    requests += "GET /api/nodes/0/log?lines=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  }
  const std::string answer = Exchange(server->port(), requests);
  size_t answers = 0;
  for (size_t at = answer.find("HTTP/1.1 200"); at != std::string::npos;
       at = answer.find("HTTP/1.1 200", at + 1)) {
    ++answers;
  }
  EXPECT_EQ(answers, 3u) << answer;
  EXPECT_THAT(answer, HasSubstr("Connection: close"));
}

TEST_F(StatusServerTest, UnboundServerAnswersRawRequests) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<StatusServer> server,
                       StatusServer::Unbound(StatusServerOptions{}, status_));
  EXPECT_THAT(server->Answer(Get("/api/nodes/0/log?lines=1", "127.0.0.1")),
              AllOf(StartsWith("HTTP/1.1 200"), HasSubstr("\"lines\":[\"bad ")));
  EXPECT_THAT(server->Answer(Get("/api/cluster", "rebound.example")), StartsWith("HTTP/1.1 421"));
  EXPECT_THAT(server->Answer("garbage\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_EQ(server->Answer(""), "");
}

TEST(LoopbackTest, KnowsLoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackAddress("::"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("host-b"));
}

}  // namespace
}  // namespace drover

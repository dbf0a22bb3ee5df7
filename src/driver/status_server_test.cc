#include "driver/status_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

namespace drover {
namespace {

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

  std::unique_ptr<StatusServer> Serve(const std::string& address, std::string bearer_token = "") {
    StatusServerOptions options;
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
  EXPECT_EQ(client.Get("/api/nodes/9/log")->status, 404);
  EXPECT_EQ(client.Get("/api/nodes/0/log?lines=x")->status, 400);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("drover_nodes{state=\"starting\"} 1"), std::string::npos);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
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

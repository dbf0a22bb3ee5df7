// Fuzzes the status server's request handling (docs/status.md): raw bytes
// of one connection, answered in process by the server's own code (the
// library's parser, the Host check, the token check, the routes and the
// limits) through StatusServer::Answer, and the parsers of its own (Host,
// log path, lines=). Any bytes get an HTTP answer or none, never a crash.

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "driver/status_server.h"

namespace {

drover::RunStatus& Status() {
  static drover::RunStatus* status = [] {
    auto* made = new drover::RunStatus;
    drover::RunSnapshot snapshot;
    snapshot.cluster_id = "run-fuzz";
    snapshot.phase = "running";
    drover::NodeSnapshot node;
    node.executor_id = "0";
    node.job = "worker";
    snapshot.nodes.push_back(node);
    made->Publish(snapshot);
    made->AppendLog("0", {"a line", "bad \xff utf-8", std::string(3000, 'x')});
    return made;
  }();
  return *status;
}

drover::StatusServer& Server(bool beyond_loopback) {
  static drover::StatusServer* loopback = [] {
    drover::StatusServerOptions options;
    options.allowed_hosts = {"head.cluster"};
    return drover::StatusServer::Unbound(options, Status()).value().release();
  }();
  static drover::StatusServer* with_token = [] {
    drover::StatusServerOptions options;
    options.address = "0.0.0.0";
    options.bearer_token =
        drover::Credential::ForStatus(drover::ClusterToken::Generate().value()).value().ToText();
    return drover::StatusServer::Unbound(options, Status()).value().release();
  }();
  return beyond_loopback ? *with_token : *loopback;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view raw(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool beyond_loopback = (data[0] & 1) != 0;
  const std::string remote = (data[0] & 2) ? "10.1.2.3" : "127.0.0.1";
  const std::string answer = Server(beyond_loopback).Answer(raw, remote);
  if (!answer.empty() && answer.rfind("HTTP/1.1 ", 0) != 0) std::abort();

  const std::string_view line = raw.substr(0, raw.find('\n'));
  (void)drover::StatusHostAllowed(line, "127.0.0.1", {"head.cluster"});
  (void)drover::StatusHostAllowed(line, "::1", {});
  (void)drover::LogPathExecutor(line);
  if (auto lines = drover::ParseLogLines(line); lines && *lines > 1000) std::abort();
  return 0;
}

#include "cli/rendezvous_command.h"

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/resolve_command.h"
#include "drover/rendezvous.h"

namespace drover::cli {
namespace {

using Json = nlohmann::ordered_json;

int Fail(std::ostream& err, const Status& status, int code) {
  err << "drover rendezvous: " << status.message() << "\n";
  return code;
}

// Reads the token file, or creates it (0600) with a fresh token when absent.
Result<ClusterToken> LoadOrCreateToken(const std::string& path, std::ostream& err) {
  bool created = false;
  DROVER_ASSIGN_OR_RETURN(ClusterToken token, ClusterToken::ReadOrCreateFile(path, &created));
  if (created) {
    err << "drover rendezvous: wrote a new cluster token to " << path
        << " (mode 0600); give it to every node\n";
  }
  return token;
}

Json NodeJson(const NodeInfo& node) {
  return Json{{"executor_id", node.executor_id},
              {"job", node.job_name},
              {"index", node.task_index},
              {"host", node.host},
              {"ports", node.ports},
              {"pid", node.pid},
              {"gpus", node.gpus},
              {"agent_address", node.agent_address},
              {"feed_socket", node.feed_socket}};
}

Json ClusterJson(const FormedCluster& cluster) {
  Json nodes = Json::array();
  for (const NodeInfo& node : cluster.nodes) nodes.push_back(NodeJson(node));
  return Json{{"cluster_id", cluster.cluster_id},
              {"cluster", Json::parse(cluster.spec.ToJson())},
              {"nodes", std::move(nodes)}};
}

std::string Describe(const NodeEvent& event) {
  std::string who = "executor " + event.node.executor_id + " (" + event.node.job_name + ":" +
                    std::to_string(event.node.task_index) + ")";
  switch (event.kind) {
    case NodeEvent::Kind::kDead:
      return who + " is dead: " + event.message;
    case NodeEvent::Kind::kError:
      return who + " reported an error: " + event.message;
    case NodeEvent::Kind::kStopped:
      return who + " stopped: " + event.message;
    case NodeEvent::Kind::kLeft:
      return who + " " + event.message;
    case NodeEvent::Kind::kRegistered:
    case NodeEvent::Kind::kJoining:
      break;  // below: "executor 3 (...): registered"
  }
  return who + ": " + event.message;
}

constexpr int kInterrupted = -1;

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

// Waits up to `poll` for SIGINT/SIGTERM; returns the signal or 0.
int WaitForStopSignal(Milliseconds poll) {
  sigset_t signals = StopSignals();
  timespec wait{static_cast<time_t>(poll.count() / 1000),
                static_cast<long>((poll.count() % 1000) * 1'000'000)};
  int signal = sigtimedwait(&signals, nullptr, &wait);
  return signal > 0 ? signal : 0;
}

// Polls the server so that Ctrl-C works while nodes are still registering.
int WaitUntilNotReserving(RendezvousServer& server, std::ostream& err) {
  for (;;) {
    if (WaitForStopSignal(Milliseconds(100)) != 0) return kInterrupted;
    if (server.QueryState().phase != "reserving") return 0;
  }
}

bool AllNodesGone(RendezvousServer& server) {
  ClusterState state = server.QueryState();
  for (const NodeStatus& node : state.nodes) {
    if (node.alive) return false;
  }
  return true;
}

// Waits for SIGINT/SIGTERM (blocked by the caller) or for every node to go.
void Supervise(RendezvousServer& server, Milliseconds poll, std::ostream& err) {
  for (;;) {
    if (WaitForStopSignal(poll) != 0) {
      err << "drover rendezvous: interrupted; telling every node to stop\n";
      server.StopAll();
      return;
    }
    if (AllNodesGone(server)) {
      err << "drover rendezvous: every node has left; done\n";
      return;
    }
  }
}

}  // namespace

int RunRendezvous(const RendezvousFlags& flags, std::ostream& out, std::ostream& err) {
  RendezvousServerOptions options;
  options.cluster.num_nodes = flags.nodes;
  options.cluster.num_ps = flags.ps;
  if (flags.chief) options.cluster.master_node = "chief";
  options.cluster.eval_node = flags.evaluator;
  if (Status valid = options.cluster.Validate(); !valid.ok()) {
    return Fail(err, valid, kExitBadInput);
  }
  auto token = LoadOrCreateToken(flags.token_file, err);
  if (!token.ok()) return Fail(err, token.status(), kExitBadInput);
  options.token = std::move(token).value();
  options.bind_address = flags.bind;
  options.port = static_cast<uint16_t>(flags.port);
  options.reservation_timeout = Milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
  options.heartbeat_interval = Milliseconds(static_cast<int64_t>(flags.heartbeat_seconds * 1000));
  options.quiet_heartbeat_interval =
      Milliseconds(static_cast<int64_t>(flags.quiet_heartbeat_seconds * 1000));
  options.on_event = [&err](const NodeEvent& event) {
    if (event.kind == NodeEvent::Kind::kLeft) return;  // the server's log says it
    err << "drover rendezvous: " << Describe(event) << "\n";
    for (const std::string& line : event.last_log_lines) err << "  | " << line << "\n";
  };

  // Block the signals before the server's thread starts so only sigtimedwait sees them.
  sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = RendezvousServer::Start(std::move(options));
  if (!server.ok()) return Fail(err, server.status(), kExitFailure);
  err << "drover rendezvous: listening on " << flags.bind << ":" << (*server)->port()
      << ", waiting up to " << flags.timeout_seconds << " s for " << flags.nodes << " nodes\n";

  if (WaitUntilNotReserving(**server, err) == kInterrupted) {
    ClusterState state = (*server)->QueryState();
    err << "drover rendezvous: interrupted while waiting for nodes (" << state.registered << " of "
        << state.expected << " registered)\n";
    return kExitFailure;
  }
  // The phase changed: the cluster formed, or the reservation timed out.
  auto cluster = (*server)->WaitForCluster(Clock::now() + Milliseconds(5000));
  if (!cluster.ok()) return Fail(err, cluster.status(), kExitFailure);
  out << ClusterJson(*cluster).dump(2) << "\n" << std::flush;
  Supervise(**server, Milliseconds(static_cast<int64_t>(flags.heartbeat_seconds * 1000)), err);
  return kExitOk;
}

}  // namespace drover::cli

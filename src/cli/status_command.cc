#include "cli/status_command.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/resolve_command.h"
#include "cli/status_client.h"
#include "driver/etcd_run.h"
#include "driver/run_history.h"
#include "driver/status_text.h"
#include "drover/rendezvous.h"

namespace drover::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int ShowFinished(const RunStatusFlags& flags, const std::string& dir, std::ostream& out,
                 std::ostream& err) {
  Result<json> record = ReadRunRecord(dir);
  if (!record.ok()) {
    err << "drover status: " << record.status().message() << "\n";
    return kExitFailure;
  }
  out << (flags.json ? record->dump(2) + "\n" : RenderStatus(*record));
  return kExitOk;
}

// The server `target` names (or the run going on here) and the key it wants.
Result<std::pair<StatusServerRef, std::string>> ServerAndBearer(const std::string& target,
                                                                const std::string& token_file,
                                                                int* failure_code) {
  *failure_code = kExitFailure;
  DROVER_ASSIGN_OR_RETURN(StatusServerRef server, FindStatusServer(target, token_file));
  Result<std::string> bearer = StatusBearer(server);
  if (!bearer.ok()) {
    *failure_code = kExitBadInput;
    return bearer.status();
  }
  return std::make_pair(std::move(server), std::move(bearer).value());
}

int ShowLive(const RunStatusFlags& flags, const std::string& target, std::ostream& out,
             std::ostream& err) {
  int failure_code = kExitFailure;
  auto server = ServerAndBearer(target, flags.token_file, &failure_code);
  if (!server.ok()) {
    err << "drover status: " << server.status().message() << "\n";
    return failure_code;
  }
  const auto& [ref, bearer] = *server;
  for (;;) {
    Result<json> cluster = GetStatusJson(ref.url, "/api/cluster", bearer);
    if (!cluster.ok()) {
      err << "drover status: " << cluster.status().message() << "\n";
      return kExitFailure;
    }
    if (flags.json) {
      out << cluster->dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    } else {
      if (flags.watch > 0 && ::isatty(STDOUT_FILENO)) out << "\033[H\033[2J";
      out << RenderStatus(*cluster);
    }
    out << std::flush;
    if (flags.watch <= 0 || RunEnded(*cluster)) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.watch));
    if (!::isatty(STDOUT_FILENO)) out << "\n";
  }
}

int ListRuns(const std::string& dir, std::ostream& out, std::ostream& err) {
  Result<std::vector<PastRun>> runs = ListPastRuns(dir);
  if (!runs.ok()) {
    err << "drover status: " << runs.status().message() << "\n";
    return kExitFailure;
  }
  if (runs->empty()) {
    err << "drover status: no finished runs in " << dir << " (no " << dir << "/*/run.json)\n";
    return kExitFailure;
  }
  out << RenderRunList(*runs) << std::flush;
  return kExitOk;
}

// A run to compare, and its name in the table: a finished run's record, or
// what a live run's status server says now.
struct Compared {
  std::string name;
  json record;
};

Result<Compared> RunToCompare(const std::string& target, const std::string& token_file,
                              int* failure_code) {
  *failure_code = kExitFailure;
  std::optional<std::string> dir = RunDirectory(target);
  if (dir && fs::exists(fs::path(*dir) / "run.json")) {
    DROVER_ASSIGN_OR_RETURN(json record, ReadRunRecord(*dir));
    return Compared{RunId(*dir), std::move(record)};
  }
  DROVER_ASSIGN_OR_RETURN(auto server,
                          ServerAndBearer(dir.value_or(target), token_file, failure_code));
  DROVER_ASSIGN_OR_RETURN(json cluster,
                          GetStatusJson(server.first.url, "/api/cluster", server.second));
  auto id = cluster.find("cluster_id");
  return Compared{id != cluster.end() && id->is_string() ? id->get<std::string>() : target,
                  std::move(cluster)};
}

int CompareRuns(const RunStatusFlags& flags, std::ostream& out, std::ostream& err) {
  int failure_code = kExitFailure;
  Result<Compared> a = RunToCompare(flags.target, flags.token_file, &failure_code);
  if (!a.ok()) {
    err << "drover status: " << a.status().message() << "\n";
    return failure_code;
  }
  Result<Compared> b = RunToCompare(flags.other, flags.token_file, &failure_code);
  if (!b.ok()) {
    err << "drover status: " << b.status().message() << "\n";
    return failure_code;
  }
  out << RenderComparison(a->name, a->record, b->name, b->record) << std::flush;
  return kExitOk;
}

nlohmann::json EtcdStateJson(const std::string& target, const ClusterState& state) {
  json nodes = json::array();
  for (const NodeStatus& node : state.nodes) {
    nodes.push_back({{"executor_id", node.node.executor_id},
                     {"task", node.node.job_name + ":" + std::to_string(node.node.task_index)},
                     {"host", node.node.host},
                     {"pid", node.program_pid},
                     {"alive", node.alive},
                     {"left", node.left},
                     {"state", EtcdNodeState(node, state.phase)},
                     {"error", node.error}});
    if (const std::optional<ProgramEnd>& end = node.program_end) {
      nodes.back()["exit"] = {
          {"code", end->exit_code}, {"signal", end->signal}, {"text", end->text}};
      nodes.back()["runtime_s"] = end->runtime_s;
    }
  }
  return {{"rendezvous", target},
          {"phase", state.phase},
          {"round", state.round},
          {"round_reason", state.round_reason},
          {"stop_reason", state.stop_reason},
          {"registered", state.registered},
          {"expected", state.expected},
          {"rendezvous_s", state.rendezvous_s ? json(*state.rendezvous_s) : json(nullptr)},
          {"nodes", nodes}};
}

std::string EtcdStateText(const std::string& target, const ClusterState& state) {
  std::string text =
      "run at " + target + ": " + state.phase + ", round " + std::to_string(state.round);
  if (!state.round_reason.empty()) text += " (" + state.round_reason + ")";
  text += "; " + std::to_string(state.registered) + " registered of at most " +
          std::to_string(state.expected);
  if (state.rendezvous_s) text += ", formed in " + FormatDuration(*state.rendezvous_s);
  text += "\n";
  if (!state.stop_reason.empty()) text += "stopped: " + state.stop_reason + "\n";
  for (const NodeStatus& node : state.nodes) {
    const std::string task = node.node.task_index >= 0
                                 ? node.node.job_name + ":" + std::to_string(node.node.task_index)
                                 : "-";
    const std::string condition = StoppedAtRunEnd(node) ? "stopped"
                                  : node.left           ? "finished"
                                  : node.reported       ? "failed"
                                  : node.alive          ? "alive"
                                                        : "lost";
    text += "  " + task + "  executor " + node.node.executor_id + " on " + node.node.host + "  " +
            condition;
    if (node.program_pid > 0) text += "  pid " + std::to_string(node.program_pid);
    if (const std::optional<ProgramEnd>& end = node.program_end) {
      text += "  " + end->text + " after " + FormatDuration(end->runtime_s);
    }
    if (!node.error.empty()) text += "  " + node.error;
    text += "\n";
  }
  return text;
}

// A run formed through etcd (drover agent --rendezvous etcd://...): what
// etcd holds, read without joining it.
int ShowEtcdRun(const RunStatusFlags& flags, std::ostream& out, std::ostream& err) {
  RendezvousClientOptions options;
  options.address = flags.target;
  flags.etcd.ApplyTo(&options.etcd);
  options.etcd.cluster.num_nodes = 0;  // watch only
  options.etcd.unavailable_timeout = std::chrono::seconds(10);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  Result<std::unique_ptr<RendezvousClient>> client = RendezvousClient::Connect(options, deadline);
  if (!client.ok()) {
    err << "drover status: " << client.status().message() << "\n";
    return kExitFailure;
  }
  for (;;) {
    Result<ClusterState> state =
        (*client)->QueryState(std::chrono::steady_clock::now() + std::chrono::seconds(15));
    if (!state.ok()) {
      err << "drover status: " << state.status().message() << "\n";
      return kExitFailure;
    }
    if (flags.json) {
      out << EtcdStateJson(flags.target, *state).dump(2) << "\n";
    } else {
      if (flags.watch > 0 && ::isatty(STDOUT_FILENO)) out << "\033[H\033[2J";
      out << EtcdStateText(flags.target, *state);
    }
    out << std::flush;
    if (flags.watch <= 0 || state->phase == "stopped") return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.watch));
  }
}

}  // namespace

int ShowRunStatus(const RunStatusFlags& flags, std::ostream& out, std::ostream& err) {
  if ((flags.list || !flags.other.empty()) && (flags.json || flags.watch > 0)) {
    err << "drover status: --json and --watch show one run; not with --list or two runs\n";
    return kExitBadInput;
  }
  if (flags.list && !flags.other.empty()) {
    err << "drover status: --list takes one directory, not two\n";
    return kExitBadInput;
  }
  if (flags.target.rfind("etcd://", 0) == 0 && !flags.list && flags.other.empty()) {
    return ShowEtcdRun(flags, out, err);
  }
  if (flags.list) return ListRuns(flags.target.empty() ? kDefaultLogsDir : flags.target, out, err);
  if (!flags.other.empty()) return CompareRuns(flags, out, err);
  std::optional<std::string> dir = RunDirectory(flags.target);
  if (dir && fs::exists(fs::path(*dir) / "run.json")) return ShowFinished(flags, *dir, out, err);
  return ShowLive(flags, dir.value_or(flags.target), out, err);
}

}  // namespace drover::cli

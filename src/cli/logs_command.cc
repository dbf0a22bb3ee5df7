#include "cli/logs_command.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cli/resolve_command.h"
#include "cli/status_client.h"
#include "driver/live_runs.h"
#include "driver/node_logs.h"
#include "driver/run_history.h"
#include "drover/environment.h"

namespace drover::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kFilePoll = std::chrono::milliseconds(250);
constexpr auto kServerPoll = std::chrono::milliseconds(500);
// Following a directory that no live run claims (a run without a status
// server): how long nothing new may come before the follow gives up.
constexpr auto kUnclaimedIdle = std::chrono::seconds(60);
constexpr size_t kMaxLinesPerAnswer = 1000;  // the log endpoint's limit
constexpr int kAnswersPerNodePerPoll = 10;

// Writes a node's lines, tagged "[worker:1] " unless one node was asked for.
class Printer {
 public:
  Printer(std::ostream& out, bool tagged) : out_(out), tagged_(tagged) {}
  void Line(const std::string& task, std::string_view line) {
    if (tagged_) out_ << '[' << task << "] ";
    out_ << line << '\n';
  }
  // Whether the lines still go somewhere: a follower whose reader went
  // away (`drover logs -f | head`) stops.
  bool Flush() { return static_cast<bool>(out_.flush()); }

 private:
  std::ostream& out_;
  const bool tagged_;
};

std::string NoTask(const std::string& task, const std::string& run,
                   const std::vector<std::string>& tasks) {
  std::string text = "no task " + task + " in run " + run + "; tasks: ";
  for (size_t i = 0; i < tasks.size(); ++i) text += (i > 0 ? ", " : "") + tasks[i];
  return tasks.empty() ? text + "none yet" : text;
}

// A first word like worker:1 names a task of the run going on here, not a
// host "worker" (`drover logs worker:1`).
bool LooksLikeTask(const std::string& word) {
  std::optional<std::string> task = ParseTaskName(word);
  if (!task) return false;
  const std::string job = task->substr(0, task->find_first_of(": "));
  for (const char* known : {"ps", "chief", "master", "evaluator", "worker", "executor"}) {
    if (job == known) return true;
  }
  return false;
}

// The live run (one with a status server) that logs to `dir`, if any.
std::optional<LiveRun> LiveRunLoggingTo(const std::string& dir) {
  for (const LiveRun& run : ListLiveRuns(LiveRunsDir(ProcessEnvironment()))) {
    std::error_code ec;
    if (fs::equivalent(run.log_dir, dir, ec)) return run;
  }
  return std::nullopt;
}

// ---- From a log directory ----

class DirectoryLogs {
 public:
  DirectoryLogs(std::string dir, const LogsFlags& flags, std::string task, std::ostream& out,
                std::ostream& err)
      : dir_(std::move(dir)),
        flags_(flags),
        task_(std::move(task)),
        printer_(out, task_.empty()),
        err_(err) {}

  int Show() {
    const bool ended = Ended();
    std::vector<NodeLogFile> files = ListNodeLogs(dir_);
    if (!task_.empty()) {
      auto it = std::find_if(files.begin(), files.end(),
                             [this](const NodeLogFile& file) { return file.task == task_; });
      if (it == files.end() && (ended || !flags_.follow)) return Fail(NoTaskHere());
      // Following a run still going on: the node's file comes when it forms.
      files = {it != files.end() ? *it : NodeLogFile{task_, NodeLogPath(dir_, task_)}};
    } else if (files.empty() && !ended && !flags_.follow) {
      return Fail(dir_ + " holds no run.json and no node logs (<job>-<index>.log): not a run's " +
                  "log directory");
    }
    for (const NodeLogFile& file : files) {
      if (Status added = Add(file, flags_.tail); !added.ok()) return Fail(added.message());
    }
    if (Status read = ReadAll(/*final=*/!flags_.follow); !read.ok()) return Fail(read.message());
    printer_.Flush();
    return flags_.follow ? Follow() : kExitOk;
  }

 private:
  struct Node {
    std::string task;
    LogFollower follower;
  };

  bool Ended() const {
    std::error_code ec;
    return fs::exists(fs::path(dir_) / "run.json", ec);
  }

  std::string NoTaskHere() const {
    std::vector<std::string> tasks;
    for (const NodeLogFile& file : ListNodeLogs(dir_)) tasks.push_back(file.task);
    return NoTask(task_, RunId(dir_), tasks);
  }

  // From the start, or from the last `tail` lines (tail >= 0).
  Status Add(const NodeLogFile& file, int tail) {
    uint64_t offset = 0;
    std::error_code ec;
    if (tail >= 0 && fs::exists(file.path, ec)) {
      DROVER_ASSIGN_OR_RETURN(offset, LastLinesOffset(file.path, static_cast<size_t>(tail)));
    }
    nodes_.push_back(Node{file.task, LogFollower(file.path, offset)});
    return Status::Ok();
  }

  // Prints what each node's file gained, node after node. Whether any did: *news.
  Status ReadAll(bool final, bool* news = nullptr) {
    for (Node& node : nodes_) {
      auto print = [this, &node](std::string_view line) { printer_.Line(node.task, line); };
      DROVER_ASSIGN_OR_RETURN(bool read, node.follower.Read(print, final));
      if (news != nullptr) *news = *news || read;
    }
    return Status::Ok();
  }

  // Nodes whose files appeared since (a node forms, or never does).
  Status AddNewFiles() {
    if (!task_.empty()) return Status::Ok();
    for (const NodeLogFile& file : ListNodeLogs(dir_)) {
      auto known = [&file](const Node& node) { return node.follower.path() == file.path; };
      if (std::none_of(nodes_.begin(), nodes_.end(), known)) {
        DROVER_RETURN_IF_ERROR(Add(file, -1));
      }
    }
    return Status::Ok();
  }

  // Until run.json appears (the driver writes it after every line); or the
  // driver that claimed the directory is gone; or, when none claims it,
  // nothing new came for kUnclaimedIdle.
  int Follow() {
    const std::optional<LiveRun> live = LiveRunLoggingTo(dir_);
    if (!live && !Ended()) {
      err_ << "drover logs: no drover run with a status server logs to " << dir_
           << "; following until its run.json appears, or nothing new comes for "
           << std::chrono::duration_cast<std::chrono::seconds>(kUnclaimedIdle).count() << " s\n"
           << std::flush;
    }
    Clock::time_point last_news = Clock::now();
    for (;;) {
      const bool ended = Ended();  // before reading: then the reads see every line
      bool news = false;
      if (Status added = AddNewFiles(); !added.ok()) return Fail(added.message());
      if (Status read = ReadAll(ended, &news); !read.ok()) return Fail(read.message());
      if (!printer_.Flush()) return kExitFailure;
      if (ended) {
        std::error_code ec;
        if (!task_.empty() && !fs::exists(nodes_.front().follower.path(), ec)) {
          return Fail(NoTaskHere());
        }
        return kExitOk;
      }
      if (news) last_news = Clock::now();
      if (live && !LiveRunLoggingTo(dir_) && !Ended()) {
        return Fail("the drover run that logged to " + dir_ + " (pid " + std::to_string(live->pid) +
                    ") is gone without writing run.json (killed?)");
      }
      if (!live && Clock::now() - last_news >= kUnclaimedIdle) {
        return Fail("nothing new in " + dir_ + " and no run.json for " +
                    std::to_string(
                        std::chrono::duration_cast<std::chrono::seconds>(kUnclaimedIdle).count()) +
                    " s; stopped following");
      }
      std::this_thread::sleep_for(kFilePoll);
    }
  }

  int Fail(const std::string& message) {
    printer_.Flush();
    err_ << "drover logs: " << message << "\n";
    return kExitFailure;
  }

  const std::string dir_;
  const LogsFlags& flags_;
  const std::string task_;
  Printer printer_;
  std::ostream& err_;
  std::vector<Node> nodes_;
};

// ---- From a status server ----

class ServerLogs {
 public:
  ServerLogs(StatusServerRef server, std::string bearer, const LogsFlags& flags, std::string task,
             std::ostream& out, std::ostream& err)
      : server_(std::move(server)),
        bearer_(std::move(bearer)),
        flags_(flags),
        task_(std::move(task)),
        printer_(out, task_.empty()),
        err_(err) {}

  int Show() {
    Result<json> cluster = Get("/api/cluster");
    if (!cluster.ok()) return Fail(cluster.status().message());
    for (;;) {
      Remember(*cluster);
      if (!task_.empty() && nodes_.empty()) {
        // The roles come at the barrier: a follower waits for them.
        if (!flags_.follow || Text(*cluster, "phase") != "reserving") {
          return Fail(NoTask(task_, run_id_, Tasks(*cluster)));
        }
        std::this_thread::sleep_for(kServerPoll);
        cluster = Get("/api/cluster");
        if (!cluster.ok()) return Fail(cluster.status().message());
        continue;
      }
      break;
    }
    for (Node& node : nodes_) {
      if (Status fetched = Fetch(node, /*first=*/true); !fetched.ok()) {
        return fetched.code() == Status::Code::kUnavailable ? Gone(fetched)
                                                            : Fail(fetched.message());
      }
    }
    printer_.Flush();
    if (dropped_) {
      err_ << "drover logs: the status server keeps only the last lines of each node; the whole "
              "logs are in "
           << log_dir_ << "\n";
    }
    if (!flags_.follow || RunEnded(*cluster)) return kExitOk;
    return Follow();
  }

 private:
  struct Node {
    std::string executor;
    std::string task;
    uint64_t next = 0;  // the number of the node's next line not yet printed
  };

  Result<json> Get(const std::string& path) { return GetStatusJson(server_.url, path, bearer_); }

  static std::string Text(const json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : "";
  }

  static std::string TaskOf(const json& node) {
    std::string task = Text(node, "task");
    return task.empty() ? "executor " + Text(node, "executor_id") : task;
  }

  static std::vector<std::string> Tasks(const json& cluster) {
    std::vector<std::string> tasks;
    auto nodes = cluster.find("nodes");
    if (nodes == cluster.end() || !nodes->is_array()) return tasks;
    for (const json& node : *nodes) tasks.push_back(TaskOf(node));
    return tasks;
  }

  bool Wanted(const json& node) const {
    return task_.empty() || TaskOf(node) == task_ ||
           (task_ == "executor " + Text(node, "executor_id"));
  }

  // The run's id and log directory, its nodes new since the last look (the
  // one asked for, when one was), and their roles once formed.
  void Remember(const json& cluster) {
    if (std::string id = Text(cluster, "cluster_id"); !id.empty()) run_id_ = id;
    if (std::string dir = Text(cluster, "log_dir"); !dir.empty()) log_dir_ = dir;
    auto nodes = cluster.find("nodes");
    if (nodes == cluster.end() || !nodes->is_array()) return;
    for (const json& node : *nodes) {
      if (!node.is_object() || !Wanted(node)) continue;
      const std::string executor = Text(node, "executor_id");
      auto it = std::find_if(nodes_.begin(), nodes_.end(),
                             [&executor](const Node& n) { return n.executor == executor; });
      if (it == nodes_.end()) {
        nodes_.push_back(Node{executor, TaskOf(node)});
      } else {
        it->task = TaskOf(node);
      }
    }
  }

  // Prints the node's lines: at first its last --tail lines (or all the
  // server keeps), then those after the last printed.
  Status Fetch(Node& node, bool first) {
    const std::string path = "/api/nodes/" + node.executor + "/log?";
    std::string query =
        first ? "lines=" + std::to_string(flags_.tail >= 0 ? static_cast<size_t>(flags_.tail)
                                                           : kMaxLinesPerAnswer)
              : "since=" + std::to_string(node.next);
    for (int answers = 0; answers < kAnswersPerNodePerPoll; ++answers) {
      DROVER_ASSIGN_OR_RETURN(json log, Get(path + query));
      auto lines = log.find("lines");
      auto from = log.find("first");
      auto next = log.find("next");
      if (lines == log.end() || !lines->is_array() || from == log.end() ||
          !from->is_number_unsigned() || next == log.end() || !next->is_number_unsigned()) {
        return Status::FailedPrecondition(server_.url + path +
                                          " answered without line numbers (a drover older than "
                                          "drover logs?)");
      }
      const uint64_t first_number = from->get<uint64_t>();
      if (first && flags_.tail < 0 && first_number > 0) dropped_ = true;
      if (!first && first_number > node.next) {
        err_ << "drover logs: " << node.task << ": " << first_number - node.next
             << " lines came faster than they were read and are no longer kept by the status "
                "server (see "
             << NodeLogPath(log_dir_, node.task) << ")\n";
      }
      if (std::string task = Text(log, "task"); !task.empty()) node.task = task;
      for (const json& line : *lines) {
        printer_.Line(node.task, line.is_string() ? line.get<std::string>() : line.dump());
      }
      node.next = next->get<uint64_t>();
      if (first || lines->size() < kMaxLinesPerAnswer) break;
      query = "since=" + std::to_string(node.next);
    }
    return Status::Ok();
  }

  // Until the server says the run ended (then every line was relayed), or
  // it stops answering.
  int Follow() {
    for (;;) {
      std::this_thread::sleep_for(kServerPoll);
      Result<json> cluster = Get("/api/cluster");
      if (!cluster.ok()) {
        return cluster.status().code() == Status::Code::kUnavailable
                   ? Gone(cluster.status())
                   : Fail(cluster.status().message());
      }
      const bool ended = RunEnded(*cluster);  // before the lines: then they are all there
      Remember(*cluster);
      for (Node& node : nodes_) {
        Status fetched = Fetch(node, /*first=*/false);
        if (fetched.code() == Status::Code::kUnavailable) return Gone(fetched);
        if (!fetched.ok() && fetched.code() != Status::Code::kNotFound) {
          return Fail(fetched.message());
        }
      }
      if (!printer_.Flush()) return kExitFailure;
      if (ended) return kExitOk;
    }
  }

  // The server stopped answering: the driver ended (it stops its server
  // right after writing run.json, unless --status-linger) or died. The
  // lines it relayed after the last look are in the log files, when they
  // are on this host: each node's file holds every line, in order, and the
  // driver's restart markers, which the server never relayed.
  int Gone(const Status& why) {
    std::error_code ec;
    if (log_dir_.empty() || !fs::is_directory(log_dir_, ec)) {
      return Fail(why.message() + " before the run's end was seen; the rest of its logs are in " +
                  (log_dir_.empty() ? std::string("its log directory") : log_dir_) +
                  " on the driver's host");
    }
    Result<json> record = ReadRunRecord(log_dir_);
    if (record.ok()) Remember(*record);  // roles the last look may not have seen
    for (Node& node : nodes_) {
      LogFollower file(NodeLogPath(log_dir_, node.task), 0);
      uint64_t skipped = 0;
      auto print = [this, &node, &skipped](std::string_view line) {
        if (skipped < node.next) {
          if (!IsRestartMarker(line)) ++skipped;
          return;
        }
        printer_.Line(node.task, line);
      };
      if (Result<bool> read = file.Read(print, /*final=*/true); !read.ok()) {
        return Fail(read.status().message());
      }
    }
    printer_.Flush();
    if (record.ok()) return kExitOk;
    return Fail("the status server at " + server_.url + " stopped answering and " + log_dir_ +
                " holds no run.json: the driver is gone without finishing the run (killed?)");
  }

  int Fail(const std::string& message) {
    printer_.Flush();
    err_ << "drover logs: " << message << "\n";
    return kExitFailure;
  }

  const StatusServerRef server_;
  const std::string bearer_;
  const LogsFlags& flags_;
  const std::string task_;
  Printer printer_;
  std::ostream& err_;
  std::string run_id_ = "?";
  std::string log_dir_;
  std::vector<Node> nodes_;
  bool dropped_ = false;  // the first look missed lines the server no longer keeps
};

}  // namespace

int ShowLogs(const LogsFlags& given, std::ostream& out, std::ostream& err) {
  LogsFlags flags = given;
  std::optional<std::string> dir = RunDirectory(flags.run);
  if (!dir && flags.task.empty() && LooksLikeTask(flags.run)) std::swap(flags.run, flags.task);
  std::string task;
  if (!flags.task.empty()) {
    std::optional<std::string> parsed = ParseTaskName(flags.task);
    if (!parsed) {
      err << "drover logs: '" << flags.task
          << "' is not a task (worker:1, worker-1, ps:0, executor:3, ...)\n";
      return kExitBadInput;
    }
    task = *parsed;
  }
  if (dir) return DirectoryLogs(*dir, flags, task, out, err).Show();
  Result<StatusServerRef> server = FindStatusServer(flags.run, flags.token_file);
  if (!server.ok()) {
    err << "drover logs: " << server.status().message() << "\n";
    return kExitFailure;
  }
  Result<std::string> bearer = StatusBearer(*server);
  if (!bearer.ok()) {
    err << "drover logs: " << bearer.status().message() << "\n";
    return kExitBadInput;
  }
  return ServerLogs(*server, *bearer, flags, task, out, err).Show();
}

void AddLogsCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<LogsFlags>();
  CLI::App* logs = app.add_subcommand(
      "logs",
      "Print a run's per-node logs, each line tagged with its node as drover run tags it\n"
      "([worker:1] ...): a finished run's from its log directory, a live run's from its status\n"
      "server; with -f, keep printing new lines until the run ends.");
  logs->add_option("run", flags->run,
                   "A run's log directory (or its run id under ./drover-logs), or HOST:PORT of\n"
                   "a driver's status server; none: the run going on here");
  logs->add_option("task", flags->task,
                   "One node: worker:1 (or worker-1, ps:0, executor:3 for a node that never\n"
                   "formed), its lines untagged; none: every node");
  logs->add_flag("--follow,-f", flags->follow,
                 "Keep printing new lines as they come until the run ends (a log directory:\n"
                 "until its run.json appears)");
  logs->add_option("--tail", flags->tail, "Only the last N lines of each node, to begin with")
      ->type_name("N")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()).description(""));
  logs->add_option("--token-file", flags->token_file,
                   "For a status server beyond loopback: the run's status.token, or the\n"
                   "cluster token (only the status key derived from it is sent)");
  logs->footer(
      "Every node: the nodes one after another, in the order roles are handed out (ps, chief,\n"
      "evaluator, workers, by index; other jobs; nodes that never formed); with -f, then the\n"
      "lines of every node as they come.\n"
      "A status server keeps each node's last 200 lines; the log directory has them all.\n"
      "Examples:\n"
      "  drover logs -f                          # the run going on here, to its end\n"
      "  drover logs worker:1 --tail 20          # one node of the run going on here\n"
      "  drover logs drover-logs/run-20261125-080000-1a2b worker:0\n"
      "  drover logs run-20261125-080000-1a2b --tail 5\n"
      "  drover logs 127.0.0.1:41231 -f\n"
      "Exit codes: 0 shown (with -f: to the run's end), 1 nothing to show or the end not seen\n"
      "(no such run or task, unreachable, refused, the driver gone), 2 bad input.");
  logs->callback([flags, exit_code] { *exit_code = ShowLogs(*flags, std::cout, std::cerr); });
}

}  // namespace drover::cli

#include "driver/driver.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/mutex.h"
#include "driver/line_splitter.h"
#include "driver/node_logs.h"
#include "driver/status_text.h"
#include "drover/placement.h"
#include "os/duration_text.h"
#include "os/fd_io.h"
#include "os/process_tree.h"
#include "os/unique_fd.h"

namespace drover {
namespace {

namespace fs = std::filesystem;

// How often the supervision loop looks at agents an engine cannot wake it
// for (AgentProcess::exit_fd() of -1).
constexpr Milliseconds kPollInterval{100};
// The longest the supervision loop sleeps when nothing wakes it and no check
// waits for a deadline: the status page's idle refresh.
constexpr Milliseconds kIdleWake{1'000};
// The least time between two status publications while events keep coming.
constexpr Milliseconds kPublishInterval{250};
// How long a node may look dead (connection closed, heartbeats missed) while
// its agent is still running before it counts as failed: a node that exits
// cleanly closes its connection a moment before the driver reaps it.
constexpr Milliseconds kDeadConfirm{3'000};
// How long a failure waits for the agent's exit status before being reported.
constexpr Milliseconds kExitStatusWait{2'000};
// How long an agent that exited before the barrier waits for the server's
// verdict (a reservation timeout names the missing nodes better).
constexpr Milliseconds kEarlyExitWait{1'000};
// How long a node that ended by a stop signal the driver did not send waits
// for that signal to reach the driver too: scancel, a pod's eviction or a
// kill of the whole job signals every process at once, in no set order, and
// the run was then stopped, not failed.
constexpr Milliseconds kOutsideStopWait{1'000};
// STOP first; SIGTERM to the agents after this if they are still there.
constexpr Milliseconds kStopBeforeTerm{1'000};
// The most a node's output is read in one go (docs/run.md).
constexpr size_t kMaxReadPerPump = 1 << 20;
// How long, once the agents are gone, a local program still in
// uninterruptible sleep after SIGKILL is given before the driver names it.
constexpr Milliseconds kStuckProgramWait{2'000};

// When the supervision loop must look again though nothing woke it (an
// output, an agent's end, a server event, a signal): the earliest deadline
// one of its checks waits for, at most kIdleWake away. An idle run wakes the
// driver about once a second instead of every kPollInterval.
class WakeAt {
 public:
  explicit WakeAt(Clock::time_point now) : now_(now), at_(now + kIdleWake) {}

  // Whether `deadline` has passed; if not, the loop wakes for it.
  bool Passed(Clock::time_point deadline) {
    if (deadline <= now_) return true;
    By(deadline);
    return false;
  }
  void By(Clock::time_point deadline) { at_ = std::min(at_, deadline); }
  Milliseconds Left() const {
    auto left = std::chrono::ceil<Milliseconds>(at_ - Clock::now());
    return std::max(left, Milliseconds(0));
  }

 private:
  Clock::time_point now_;
  Clock::time_point at_;
};

// SIGTERM, SIGINT or SIGHUP, by the signal or by the shell's 128 + signal.
bool EndedByStopSignal(const os::ExitStatus& exit) {
  const int code = exit.ShellCode();
  return code == 128 + SIGTERM || code == 128 + SIGINT || code == 128 + SIGHUP;
}

std::string NewClusterId() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  std::random_device random;
  char suffix[8];
  std::snprintf(suffix, sizeof(suffix), "%04x", random() & 0xffff);
  return std::string("run-") + stamp + "-" + suffix;
}

}  // namespace

struct Driver::Node {
  std::string executor_id;
  // The engine's executor index; -1 for an agent started by hand that
  // joined an elastic run (no process of ours: its output stays on its own
  // terminal, and the driver only hears from it through the rendezvous).
  int index = -1;
  std::string host;  // a joined node's, as it registered
  std::unique_ptr<AgentProcess> process;
  std::string tag;                     // "executor 3" until the barrier, then "worker:1"
  std::optional<Placement> placement;  // the server's, once the cluster formed
  std::string log_path;                // "" : no log file yet
  LineSplitter splitter;
  std::vector<std::string> unprinted;  // read, not yet tagged
  std::vector<std::string> unlogged;   // read before the log file was known
  bool log_failed = false;             // its log could not be opened: keep nothing for it
  std::deque<std::string> ring;
  std::ofstream log;
  std::optional<os::ExitStatus> exit;
  bool stopping = false;
  bool stopped_while_running = false;  // by the driver: "stopped", not "finished"
  std::optional<Clock::time_point> dead_since;
  std::optional<Clock::time_point> left_at;  // its agent said it finished (LEAVE)
  std::string dead_message;
  std::string error_message;  // from REPORT_ERROR
  std::vector<std::string> reported_lines;
  Clock::time_point launched_at{};
  std::optional<Clock::time_point> exited_at;
  std::string failure;  // why this node failed the round; "" : it did not

  // Remote engines may not know the pid yet (-1): only 0 means not started.
  bool running() const {
    return joined_by_hand() ? !exit : process && process->pid() != 0 && !exit;
  }
  bool joined_by_hand() const { return index < 0; }
  // Elastic: a node whose agent is up and answering, which the next round
  // keeps; any other is lost.
  bool stays() const { return running() && !dead_since; }
  std::string DescribeExit(const os::ExitStatus& status) const {
    return process ? process->DescribeExit(status) : status.ToString();
  }

  // Elastic runs: the node's agent stays up into the next round, which
  // starts with nothing of this one but the agent and its output stream.
  void StartRound() {
    tag = "executor " + executor_id;
    placement.reset();
    if (log.is_open()) log.close();
    log_path.clear();
    log_failed = false;
    stopping = false;
    stopped_while_running = false;
    dead_since.reset();
    left_at.reset();
    dead_message.clear();
    error_message.clear();
    reported_lines.clear();
    failure.clear();
  }
};

// The server's events, handed from its loop thread to the driver's.
struct EventQueue {
  Mutex mu;
  std::vector<NodeEvent> events GUARDED_BY(mu);
  std::vector<std::string> logs
      GUARDED_BY(mu);  // the server's lines, printed by the driver's thread
  os::UniqueFd wake_fd;
  void PushLog(const std::string& line) {
    {
      MutexLock lock(mu);
      logs.push_back(line);
    }
    Wake();
  }
  void Wake() { os::SignalEventFd(wake_fd.get()); }
  std::vector<std::string> TakeLogs() {
    MutexLock lock(mu);
    return std::exchange(logs, {});
  }
  void Push(const NodeEvent& event) {
    {
      MutexLock lock(mu);
      events.push_back(event);
    }
    Wake();
  }
  std::vector<NodeEvent> Take() {
    os::DrainEventFd(wake_fd.get());
    MutexLock lock(mu);
    return std::exchange(events, {});
  }
};

struct Driver::Round {
  Driver& driver;
  int number;
  std::vector<std::unique_ptr<Node>> nodes;
  // Shared with the server's callbacks, which may outlive the round (an
  // elastic run hands the server to the next one).
  std::shared_ptr<EventQueue> queue = std::make_shared<EventQueue>();
  std::unique_ptr<RendezvousServer> server;
  std::ofstream* tee = nullptr;
  bool formed = false;
  int joining_by_hand = 0;  // elastic: admitted joiners that have no Node yet
  // Elastic: the parked joiners (kJoining), those of the round before first.
  std::vector<std::string> joiners;
  std::string cluster_id;
  Clock::time_point started_at = Clock::now();
  Clock::time_point formed_at{};
  nlohmann::json spec = nlohmann::json::object();

  ~Round() {
    if (server) {
      driver.CollectFeedCommits(*server);
      server->Shutdown();
    }
    EmitServerLog();
  }

  // The server's own lines go through the driver's err stream, so they
  // never cut into the progress line.
  void EmitServerLog() {
    std::vector<std::string> lines = queue->TakeLogs();
    for (const std::string& line : lines) driver.err_ << "drover rendezvous: " << line << "\n";
    if (!lines.empty()) driver.err_.flush();
  }

  Node* Find(const std::string& executor_id) {
    for (auto& node : nodes) {
      if (node->executor_id == executor_id) return node.get();
    }
    return nullptr;
  }

  // Waits up to `timeout` for output, a server event or a stop signal, reads
  // what came, reaps exited agents. Returns the stop signal, or 0. With
  // `formation_first`, output that comes once the cluster formed (from the
  // programs) waits until the caller took the formation (OnFormed opens the
  // log files that get every byte of it).
  int Pump(Milliseconds timeout, bool formation_first = false) {
    std::vector<pollfd> fds;
    std::vector<Node*> owners;
    if (driver.options_.signal_fd >= 0) fds.push_back({driver.options_.signal_fd, POLLIN, 0});
    if (driver.options_.stop_fd >= 0) fds.push_back({driver.options_.stop_fd, POLLIN, 0});
    fds.push_back({queue->wake_fd.get(), POLLIN, 0});
    owners.resize(fds.size(), nullptr);
    for (auto& node : nodes) {
      if (node->process && node->process->output_fd() >= 0) {
        fds.push_back({node->process->output_fd(), POLLIN, 0});
        owners.push_back(node.get());
      }
    }
    // An agent's end wakes the loop too: its output may end before it does.
    for (auto& node : nodes) {
      if (node->running() && node->process && node->process->exit_fd() >= 0) {
        fds.push_back({node->process->exit_fd(), POLLIN, 0});
        owners.push_back(nullptr);
      }
    }
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    int signal = 0;
    if (ready > 0) {
      const bool defer_output =
          formation_first && !formed && server->QueryState().phase != "reserving";
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (owners[i] != nullptr) {
          if (!defer_output) ReadOutput(*owners[i]);
        } else if (fds[i].fd == driver.options_.signal_fd) {
          signalfd_siginfo info;
          if (::read(fds[i].fd, &info, sizeof(info)) == sizeof(info)) {
            signal = static_cast<int>(info.ssi_signo);
          }
        } else if (fds[i].fd == driver.options_.stop_fd) {
          os::DrainEventFd(fds[i].fd);
          driver.stop_requested_ = true;
          signal = SIGTERM;
        }
      }
    }
    for (auto& node : nodes) {
      if (!node->running() || !node->process) continue;
      node->exit = node->process->Poll();
      if (node->exit) node->exited_at = Clock::now();
    }
    return signal;
  }

  // Reads what the node's pipe holds, up to kMaxReadPerPump bytes: a
  // program that prints without pause must not keep the driver here (nor
  // grow `unprinted` without bound); poll brings it back for the rest.
  void ReadOutput(Node& node) {
    char buffer[65536];
    LineSplitter::Output split;
    for (size_t total = 0; total < kMaxReadPerPump;) {
      ssize_t n = ::read(node.process->output_fd(), buffer, sizeof(buffer));
      if (n > 0) {
        node.splitter.Feed(std::string_view(buffer, static_cast<size_t>(n)), &split);
        Take(node, split);
        total += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // EOF (or an error): the agent and everything it started closed the pipe.
      node.splitter.Finish(&split);
      Take(node, split);
      node.process->CloseOutput();
      return;
    }
  }

  // The log gets every byte as it comes (once its file is known); the
  // terminal, the status page and the failure report get the lines.
  void Take(Node& node, LineSplitter::Output& split) {
    if (node.log.is_open()) {
      node.log << split.log;
    } else if (!node.log_failed) {
      node.unlogged.insert(node.unlogged.end(), split.lines.begin(), split.lines.end());
    }
    for (std::string& line : split.lines) node.unprinted.push_back(std::move(line));
    split.lines.clear();
    split.log.clear();
  }

  // Tags and writes every line read so far.
  void Emit() {
    EmitServerLog();
    bool any = false;
    for (auto& node : nodes) {
      if (!node->unprinted.empty()) driver.status_.AppendLog(node->executor_id, node->unprinted);
      for (std::string& line : node->unprinted) {
        std::string tagged = "[" + node->tag + "] " + line;
        driver.out_ << tagged << "\n";
        if (tee != nullptr) *tee << tagged << "\n";
        node->ring.push_back(std::move(line));
        if (node->ring.size() > static_cast<size_t>(driver.options_.last_lines)) {
          node->ring.pop_front();
        }
        any = true;
      }
      node->unprinted.clear();
      if (node->log.is_open()) node->log.flush();
    }
    if (any) {
      driver.out_.flush();
      if (tee != nullptr) tee->flush();
    }
  }

  void OpenLog(Node& node, const std::string& name) {
    fs::path path = fs::path(driver.options_.log_dir) / (name + ".log");
    node.log.open(path, std::ios::app);
    node.log_path = path.string();
    if (!node.log) {
      driver.err_ << "drover run: cannot write " << path.string() << ": " << std::strerror(errno)
                  << "\n";
      node.log_failed = true;
      node.unlogged.clear();
      return;
    }
    if (number > 0) node.log << RestartMarker(number) << "\n";
    for (const std::string& line : node.unlogged) node.log << line << "\n";
    node.unlogged.clear();
    node.log.flush();
  }

  void OnFormed(const FormedCluster& cluster) {
    formed = true;
    formed_at = Clock::now();
    spec = nlohmann::json::parse(cluster.spec.ToJson(), nullptr, /*allow_exceptions=*/false);
    std::string roles;
    for (size_t i = 0; i < cluster.nodes.size(); ++i) {
      const NodeInfo& info = cluster.nodes[i];
      Node* node = Find(info.executor_id);
      if (node == nullptr && driver.elastic()) node = AddJoined(info);
      if (node == nullptr) continue;
      node->host = info.host;
      node->placement = cluster.placements[i];
      node->tag = node->placement->Task();
      OpenLog(*node, node->placement->job + "-" + std::to_string(node->placement->index));
      if (!roles.empty()) roles += ", ";
      roles += node->tag + " = executor " + info.executor_id;
    }
    driver.err_ << "drover run: cluster " << cluster.cluster_id << " formed: " << roles << "\n"
                << std::flush;
    // Whoever on_formed wakes sees the formed cluster on the status server too.
    driver.PublishStatus(*this, "running", /*force=*/true);
    if (driver.options_.on_formed) driver.options_.on_formed(cluster);
  }

  void AddJoiner(const std::string& executor_id) {
    if (std::find(joiners.begin(), joiners.end(), executor_id) == joiners.end()) {
      joiners.push_back(executor_id);
    }
  }

  // An agent started by hand that registered with an elastic run.
  Node* AddJoined(const NodeInfo& info) {
    auto node = std::make_unique<Node>();
    node->executor_id = info.executor_id;
    node->host = info.host;
    node->tag = "executor " + info.executor_id;
    node->launched_at = Clock::now();
    driver.err_ << "drover run: executor " << info.executor_id << " on " << info.host
                << " joined (an agent not started by this driver)\n";
    nodes.push_back(std::move(node));
    return nodes.back().get();
  }

  // Logs of nodes that never learnt their role.
  void WriteUnformedLogs() {
    for (auto& node : nodes) {
      if (!node->log.is_open() && !node->unlogged.empty()) {
        OpenLog(*node, "executor-" + node->executor_id);
      }
    }
  }

  // Stops `which` nodes: STOP through the server, SIGTERM to the agents'
  // process groups after a moment, SIGKILL after the grace. Keeps relaying
  // output meanwhile (a full pipe would block an agent). A stop signal
  // arriving now skips straight to SIGKILL.
  void Stop(const std::vector<Node*>& which, bool stop_all) {
    if (stop_all) {
      server->StopAll();
    } else {
      for (Node* node : which) {
        if (node->running()) (void)server->StopNode(node->executor_id);
      }
    }
    for (Node* node : which) {
      node->stopping = true;
      if (node->running()) node->stopped_while_running = true;
      // A joined agent is not ours to signal or wait for: STOP is all it gets.
      if (node->joined_by_hand() && !node->exit) node->exit = os::ExitStatus::Exited(0);
    }
    Clock::time_point start = Clock::now();
    Clock::time_point term_at = start + std::min(kStopBeforeTerm, driver.options_.grace);
    Clock::time_point kill_at = term_at + driver.options_.grace;
    bool termed = false, killed = false;
    for (;;) {
      bool any_running = false;
      for (Node* node : which) any_running = any_running || node->running();
      if (!any_running) break;
      Clock::time_point now = Clock::now();
      if (!termed && now >= term_at) {
        for (Node* node : which) {
          if (node->running()) node->process->Signal(SIGTERM);
        }
        termed = true;
      }
      if (!killed && now >= kill_at) {
        for (Node* node : which) {
          if (node->running()) {
            driver.err_ << "drover run: " << node->tag << " (executor " << node->executor_id
                        << ") did not stop within the grace period; killing it\n";
            node->process->Signal(SIGKILL);
          }
        }
        killed = true;
      }
      int signal = Pump(Milliseconds(50));
      driver.PublishStatus(*this, "stopping");
      if (signal != 0 && driver.interrupt_signal_ == 0) driver.interrupt_signal_ = signal;
      if (signal != 0 && !killed) {
        driver.err_ << "drover run: " << os::SignalName(signal)
                    << " while stopping; killing every node\n";
        for (Node* node : which) {
          if (node->process) node->process->Signal(SIGKILL);
        }
        killed = true;
      }
      Emit();
    }
    // Drain what the stopped agents still had in their pipes.
    for (int i = 0; i < 5; ++i) {
      bool open = false;
      for (Node* node : which) open = open || (node->process && node->process->output_fd() >= 0);
      if (!open) break;
      Pump(Milliseconds(20));
    }
    Emit();
    for (Node* node : which) {
      // Whatever the agent left in its process group.
      if (node->process) node->process->Signal(SIGKILL);
    }
    NameStuckPrograms(which);
  }

  // A program in uninterruptible sleep (a read from a hung network file
  // system) outlives its SIGKILL until that I/O ends, and nothing ends it
  // sooner: the run does not wait for it, but says so, rather than exit as
  // if it were gone. Local programs only, by the pid their heartbeats gave.
  void NameStuckPrograms(const std::vector<Node*>& which) {
    if (!driver.engine_.RunsProgramsHere() || !server) return;
    std::map<std::string, int32_t> program_pids;
    for (const NodeStatus& status : server->QueryState().nodes) {
      program_pids[status.node.executor_id] = status.program_pid;
    }
    // A program's guard makes it a process group leader: its group, by its pid.
    std::map<pid_t, Node*> groups;
    for (Node* node : which) {
      auto pid = program_pids.find(node->executor_id);
      if (pid != program_pids.end() && pid->second > 0) groups[pid->second] = node;
    }
    auto stuck_in_kernel = [&groups] {
      std::vector<std::pair<Node*, os::ProcessEntry>> stuck;
      for (const os::ProcessEntry& process : os::ListProcesses()) {
        auto group = groups.find(process.pgid);
        if (group != groups.end() && process.state == 'D')
          stuck.emplace_back(group->second, process);
      }
      return stuck;
    };
    const Clock::time_point until = Clock::now() + kStuckProgramWait;
    auto stuck = stuck_in_kernel();
    while (!stuck.empty() && Clock::now() < until) {
      std::this_thread::sleep_for(Milliseconds(20));
      stuck = stuck_in_kernel();
    }
    for (const auto& [node, process] : stuck) {
      driver.err_ << "drover run: " << node->tag << "'s program"
                  << (process.pid == process.pgid ? "" : "'s process") << " (pid " << process.pid
                  << ") is still there after SIGKILL: it is stuck in the kernel (uninterruptible"
                     " I/O, such as a read from a hung network file system) and ends when that"
                     " I/O does; not waiting for it\n";
    }
  }

  // A node whose agent finished cleanly (no error reported before it left)
  // but whose launcher has not exited for launcher_exit_wait: the launcher
  // is stopped and the node counts as done; with an error it counts as failed.
  void EndLingeringLaunchers(WakeAt& wake) {
    if (driver.elastic()) return;  // its agents stay up until the run ends
    const Milliseconds wait = driver.options_.launcher_exit_wait;
    for (auto& node : nodes) {
      if (!node->left_at || !node->running() || !node->process ||
          !wake.Passed(*node->left_at + wait)) {
        continue;
      }
      driver.err_ << "drover run: " << node->tag << "'s agent finished " << os::SecondsText(wait)
                  << " ago, but its " << driver.engine_.name() << " launcher (pid "
                  << node->process->pid() << ") has not exited; stopping it\n";
      node->process->Signal(SIGKILL);
      node->exit =
          node->error_message.empty() ? os::ExitStatus::Exited(0) : os::ExitStatus::Exited(1);
    }
  }

  std::string Host(const Node& node) const {
    return node.joined_by_hand() ? node.host : driver.engine_.agent_host(node.index);
  }
  std::string Location(const Node& node) const {
    return node.joined_by_hand() ? node.host : driver.engine_.agent_location(node.index);
  }

  std::vector<Node*> All() {
    std::vector<Node*> all;
    for (auto& node : nodes) all.push_back(node.get());
    return all;
  }

  void ReportFailure(Node& node, const std::string& reason) {
    node.failure = reason;
    // Where it ran matters once nodes are on other hosts.
    const std::string where =
        driver.engine_.name() == "local" && !node.joined_by_hand() ? "" : " on " + Location(node);
    std::string who = node.tag + " (executor " + node.executor_id + where + ")";
    if (!formed) who = "executor " + node.executor_id + where;
    driver.err_ << "drover run: " << who << " failed: " << reason << "\n";
    // The first failure is why the round ends (the next round's reason).
    if (driver.round_failure_.empty()) {
      driver.round_failure_ = (formed ? node.tag : "executor " + node.executor_id) + " on " +
                              Host(node) + ": " + reason;
    }
    // The agent's own report repeats the exit status; it matters when there is none.
    if (!node.exit && !node.error_message.empty() &&
        reason.find(node.error_message) == std::string::npos) {
      driver.err_ << "drover run: its agent reported: " << node.error_message << "\n";
    }
    std::vector<std::string> lines(node.ring.begin(), node.ring.end());
    if (lines.empty()) lines = node.reported_lines;
    if (driver.options_.on_failure) {
      driver.options_.on_failure(
          NodeFailure{node.executor_id, formed ? node.tag : "", Host(node), reason, lines});
    }
    if (!lines.empty()) {
      driver.err_ << "drover run: last " << (lines.size() == 1 ? "line" : "lines") << " of "
                  << node.tag;
      if (node.log.is_open()) driver.err_ << " (" << node.log_path << ")";
      driver.err_ << ":\n";
      for (const std::string& line : lines) driver.err_ << "  | " << line << "\n";
    }
    driver.err_ << std::flush;
  }
};

Driver::Driver(DriverOptions options, Engine& engine, std::ostream& out, std::ostream& err)
    : options_(std::move(options)),
      engine_(engine),
      progress_(out, err, options_.progress),
      out_(progress_.out()),
      err_(progress_.err()),
      stragglers_(kStragglerRatio, std::chrono::duration<double>(options_.straggler_after).count()),
      others_grace_ms_(options_.others_grace.count()) {}

std::vector<std::string> Driver::AgentArgv(int index, int round, uint16_t port) const {
  std::vector<std::string> argv = SharedAgentArgv(round, port);
  std::vector<std::string> own = {"--token-file",  NodeCredentialFile(index),
                                  "--executor-id", std::to_string(index),
                                  "--host",        engine_.agent_host(index)};
  if (!options_.gpus.empty()) {
    own.push_back("--gpus");
    own.push_back(options_.gpus[static_cast<size_t>(index)]);
  }
  argv.insert(argv.begin() + 4, own.begin(), own.end());  // after --rendezvous ADDRESS
  return argv;
}

std::vector<std::string> Driver::SharedAgentArgv(int round, uint16_t port) const {
  std::vector<std::string> argv = {options_.agent_binary, "agent", "--rendezvous",
                                   engine_.rendezvous_host() + ":" + std::to_string(port)};
  if (!feed_plan_file_.empty()) {
    argv.push_back("--feed-plan");
    argv.push_back(feed_plan_file_);
  } else if (options_.feed) {
    argv.push_back("--feed-plan-json");
    argv.push_back(options_.feed->ToJson());
  }
  for (std::string arg : {std::string("--log-dir"), options_.log_dir, std::string("--grace"),
                          os::SecondsValue(options_.grace), std::string("--reservation-timeout"),
                          os::SecondsValue(options_.reservation_timeout),
                          std::string("--restart-count"), std::to_string(round)}) {
    argv.push_back(std::move(arg));
  }
  if (round > 0 && !restart_reason_.empty()) {
    argv.push_back("--restart-reason");
    argv.push_back(restart_reason_);
  }
  if (elastic()) argv.push_back("--elastic");
  if (options_.node_list != NodeList::kAuto) {
    argv.push_back("--node-list");
    argv.push_back(std::string(NodeListName(options_.node_list)));
  }
  argv.push_back("--");
  for (const std::string& arg : options_.command) argv.push_back(arg);
  return argv;
}

std::string Driver::NodeCredentialFile(int index) const {
  return private_dir_ + "/node-" + std::to_string(index) + ".credential";
}

Status Driver::WriteCredentialFile(int index) {
  if (!credential_files_.insert(index).second) return Status::Ok();  // an earlier round's
  // Each agent gets its own node's credential, which lets it join as that
  // node only; the cluster token stays with the driver (docs/security.md).
  // Engines hand the file's line on (ssh, slurm: stdin; Dask: the task).
  DROVER_ASSIGN_OR_RETURN(Credential credential,
                          Credential::ForNode(*options_.token, std::to_string(index)));
  return credential.WriteFile(NodeCredentialFile(index));
}

std::string Driver::ClusterId() const {
  return options_.cluster_id.empty() ? fs::path(options_.log_dir).filename().string()
                                     : options_.cluster_id;
}

Status Driver::Prepare() {
  std::error_code ec;
  if (options_.log_dir.empty()) {
    options_.log_dir = (fs::current_path(ec) / "drover-logs" / NewClusterId()).string();
  }
  options_.log_dir = fs::absolute(options_.log_dir, ec).string();
  fs::create_directories(options_.log_dir, ec);
  if (ec) {
    return Status::IoError("cannot create the log directory " + options_.log_dir + ": " +
                           ec.message());
  }
  std::string pattern = (fs::temp_directory_path(ec) / "drover-run-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::IoError("cannot create a private directory for the node credentials (" +
                           pattern + "): " + std::strerror(errno));
  }
  private_dir_ = pattern;
  if (janitor_) janitor_->Watch(private_dir_);
  if (!options_.token) {
    DROVER_ASSIGN_OR_RETURN(options_.token, ClusterToken::Generate());
  }
  if (options_.feed && !options_.feed->external) {
    feed_plan_file_ = private_dir_ + "/feed-plan.json";
    DROVER_RETURN_IF_ERROR(options_.feed->WriteFile(feed_plan_file_));
  }
  return Status::Ok();
}

namespace {

// Share `share`'s last commit in `server`'s store, if it recorded one that
// parses (a bad one is reported and ignored: it comes from the program's side).
std::optional<feed::FeedPosition> StoredCommit(RendezvousServer& server, int share,
                                               std::ostream& err) {
  std::optional<std::string> value = server.StoredValue(feed::CommitKey(share));
  if (!value) return std::nullopt;
  Result<feed::FeedPosition> position = feed::FeedPositionFromJson(*value);
  if (!position.ok()) {
    err << "drover run: ignoring share " << share << "'s commit: " << position.status().message()
        << "\n";
    return std::nullopt;
  }
  return *position;
}

// The queue entries share `share` claimed in `server`'s store, by feed_seq.
std::vector<uint64_t> StoredClaims(RendezvousServer& server, int share) {
  std::vector<uint64_t> claims;
  for (uint32_t seq = 0;; ++seq) {
    std::optional<std::string> value = server.StoredValue(feed::ClaimKey(share, seq));
    uint64_t entry = 0;
    if (!value ||
        std::from_chars(value->data(), value->data() + value->size(), entry).ec != std::errc()) {
      return claims;
    }
    claims.push_back(entry);
  }
}

}  // namespace

std::optional<QueueSize> Driver::DynamicQueueSize() const {
  if (!options_.feed || options_.feed->balance != feed::Balance::kDynamic) return std::nullopt;
  const feed::FeedPlan& plan = *options_.feed;
  QueueSize size;
  for (const feed::Partition& partition : plan.partitions) {
    size.epoch_bytes += partition.end - partition.begin;
  }
  if (!plan.queue) {
    size.feeds = plan.partitions.size() * static_cast<uint64_t>(plan.epochs);
    size.bytes = size.epoch_bytes * static_cast<uint64_t>(plan.epochs);
    return size;
  }
  size.feeds = plan.queue->size();
  for (const feed::FeedUnit& unit : *plan.queue) {
    const feed::Partition& partition = plan.partitions[static_cast<size_t>(unit.partition)];
    size.bytes += partition.end - partition.begin;  // a resumed one counts whole: an estimate
  }
  return size;
}

void Driver::CollectFeedCommits(RendezvousServer& server) {
  if (!options_.feed || options_.feed->external) return;
  if (options_.feed->balance == feed::Balance::kDynamic) return CollectDynamicQueue(server);
  const size_t shares = options_.feed->shares.size();
  feed_starts_.resize(shares);
  for (size_t k = 0; k < shares; ++k) {
    std::optional<feed::FeedPosition> position = StoredCommit(server, static_cast<int>(k), err_);
    if (position && feed_starts_[k] != *position) {
      feed_starts_[k] = *position;
      feed_starts_changed_ = true;
    }
  }
}

void Driver::CollectDynamicQueue(RendezvousServer& server) {
  const int shares = options_.cluster.FedNodes();
  std::vector<std::vector<uint64_t>> claims;
  std::vector<std::optional<feed::FeedPosition>> commits;
  bool committed = false;
  for (int k = 0; k < shares; ++k) {
    claims.push_back(StoredClaims(server, k));
    commits.push_back(StoredCommit(server, k, err_));
    committed = committed || commits.back().has_value();
  }
  // Without a commit nothing was consumed for good: the same queue again.
  if (!committed) return;
  feed::FeedPlan& plan = *options_.feed;
  const std::vector<feed::FeedUnit> queue = feed::DynamicQueue(plan);
  plan.queue = feed::QueueAfterRound(queue, claims, commits);
  size_t partial = 0;
  for (const feed::FeedUnit& unit : *plan.queue) partial += unit.first_record > 0 ? 1 : 0;
  feed_starts_changed_ = true;
  feed_queue_note_ =
      "drover run: the feed resumes after the last commits: " + std::to_string(plan.queue->size()) +
      " of " + std::to_string(queue.size()) + " queued feeds left" +
      (partial > 0 ? " (" + std::to_string(partial) + " from a record mid-partition)"
                   : std::string()) +
      "\n";
}

Status Driver::WriteFeedPlanForRound() {
  if (!feed_starts_changed_ || feed_plan_file_.empty()) return Status::Ok();
  feed_starts_changed_ = false;
  err_ << std::exchange(feed_queue_note_, "");
  feed::FeedPlan plan = *options_.feed;
  plan.starts = feed_starts_;
  const int shares = static_cast<int>(plan.shares.size());
  for (int k = 0; k < shares; ++k) {
    const std::optional<feed::FeedPosition>& start = feed_starts_[static_cast<size_t>(k)];
    Result<std::vector<feed::FeedUnit>> feeds = feed::FeedsOfShare(plan, k, shares);
    if (!start || !feeds.ok() || start->feed >= feeds->size()) continue;
    const feed::FeedUnit& unit = (*feeds)[start->feed];
    err_ << "drover run: feed share " << k << " resumes after its last commit: "
         << (start->done ? "after the end of "
                         : "at record " + std::to_string(start->record) + " of ")
         << plan.partitions[static_cast<size_t>(unit.partition)].Name() << " (epoch "
         << unit.epoch + 1 << " of " << plan.epochs << ")\n";
  }
  return plan.WriteFile(feed_plan_file_);
}

void Driver::StartJanitor() {
  if (options_.agent_binary.empty()) return;
  Result<std::unique_ptr<os::Janitor>> janitor = os::Janitor::Start(options_.agent_binary);
  if (!janitor.ok()) {
    err_ << "drover run: temporary files may be left behind if this driver is killed: "
         << janitor.status().message() << "\n";
    return;
  }
  janitor_ = std::move(janitor).value();
  for (const std::string& path : engine_.TemporaryPaths()) janitor_->Watch(path);
}

void Driver::StopJanitor() {
  if (!janitor_) return;
  // The engine removes its own when it ends, after the driver.
  for (const std::string& path : engine_.TemporaryPaths()) janitor_->Forget(path);
  janitor_.reset();
}

int Driver::Run() {
  if (Status valid = options_.cluster.Validate(); !valid.ok()) {
    err_ << "drover run: " << valid.message() << "\n";
    return 2;
  }
  StartJanitor();
  struct JanitorStop {
    Driver* driver;
    ~JanitorStop() { driver->StopJanitor(); }
  } janitor_stop{this};
  if (Status ready = Prepare(); !ready.ok()) {
    err_ << "drover run: " << ready.message() << "\n";
    if (!private_dir_.empty()) fs::remove_all(private_dir_);
    return 1;
  }
  err_ << "drover run: " << options_.cluster.num_nodes << " nodes on the " << engine_.name()
       << " engine; logs in " << options_.log_dir << "\n"
       << std::flush;
  started_at_ = Clock::now();
  started_at_unix_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (Status serving = StartStatusServer(); !serving.ok()) {
    err_ << "drover run: " << serving.message() << "\n";
    fs::remove_all(private_dir_);
    return 1;
  }
  int code = 1;
  for (int round = 0;; ++round) {
    Outcome outcome = RunRound(round);
    if (outcome == Outcome::kSuccess) {
      code = 0;
      break;
    }
    // A stop signal that came while a failure was being stopped ends the
    // run as stopped: no restart, the signal's exit status.
    if (outcome == Outcome::kFailure && interrupt_signal_ != 0) outcome = Outcome::kInterrupted;
    if (outcome == Outcome::kInterrupted) {
      err_ << "drover run: stopped every node after "
           << (stop_requested_ ? "a stop request" : os::SignalName(interrupt_signal_)) << "\n";
      code = 128 + interrupt_signal_;
      break;
    }
    if (outcome == Outcome::kReform) continue;
    if (outcome == Outcome::kFailure && !elastic() && round < options_.max_restarts) {
      restart_reason_ = round_failure_.empty() ? "the round failed" : round_failure_;
      err_ << "drover run: re-forming the group (restart " << round + 1 << " of "
           << options_.max_restarts << ") after " << restart_reason_ << "\n"
           << std::flush;
      continue;
    }
    if (outcome == Outcome::kFailure && options_.max_restarts > 0) {
      err_ << "drover run: giving up after " << options_.max_restarts << " restart"
           << (options_.max_restarts == 1 ? "" : "s") << "\n";
    }
    code = 1;
    break;
  }
  Finish(code);
  StopStatusServer();
  std::error_code ec;
  fs::remove_all(private_dir_, ec);
  err_ << std::flush;
  return code;
}

namespace {

// The node's state as the status page shows it (docs/status.md).
std::string NodeState(bool failed, const std::optional<os::ExitStatus>& exit, bool stopped,
                      const NodeStatus* registered, bool formed) {
  if (failed) return "failed";
  if (exit) return stopped ? "stopped" : (exit->success() ? "finished" : "failed");
  if (registered != nullptr && !registered->alive && !registered->left) return "lost";
  if (registered != nullptr) return formed ? "running" : "registered";
  return "starting";
}

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// "  share 1: partitions 2 3 0, 1667 records an epoch" per fed node, in
// rank order.
void PrintShares(const feed::FeedPlan& plan, std::ostream& out) {
  for (size_t k = 0; k < plan.shares.size(); ++k) {
    out << "  share " << k << ":";
    if (plan.shares[k].empty()) out << " nothing";
    uint64_t records = 0;
    bool counted = true;
    for (size_t i = 0; i < plan.shares[k].size(); ++i) {
      const uint32_t p = plan.shares[k][i];
      out << (i == 0 ? " partitions " : " ") << p;
      const auto& count = plan.partitions[p].records;
      counted = counted && count.has_value();
      records += count.value_or(0);
    }
    if (counted && !plan.shares[k].empty()) out << ", " << records << " records an epoch";
    out << "\n";
  }
}

}  // namespace

bool Driver::PublishStatus(Round& round, const std::string& phase, bool force) {
  constexpr size_t kHistoryPoints = 600;
  const Clock::time_point now = Clock::now();
  if (!force && now - last_publish_ < kPublishInterval) return false;
  last_publish_ = now;

  RunSnapshot snapshot;
  snapshot.cluster_id = round.cluster_id;
  snapshot.phase = phase;
  snapshot.engine = engine_.name();
  snapshot.command = options_.command;
  snapshot.log_dir = options_.log_dir;
  snapshot.started_at_unix = started_at_unix_;
  snapshot.elapsed_s = SecondsBetween(started_at_, now);
  snapshot.round = round.number;
  snapshot.round_reason = round.number > 0 ? restart_reason_ : "";
  snapshot.max_restarts = options_.max_restarts;
  snapshot.heartbeat_interval_s =
      std::chrono::duration<double>(options_.heartbeat_interval).count();
  snapshot.quiet_heartbeat_interval_s =
      std::chrono::duration<double>(options_.quiet_heartbeat_interval).count();
  snapshot.expected = options_.cluster.num_nodes;
  snapshot.cluster_spec = round.spec;
  ClusterState state = round.server ? round.server->QueryState() : ClusterState{};
  if (elastic() && state.expected > 0) snapshot.expected = state.expected;  // this round's
  snapshot.registered = state.registered;
  std::map<std::string, const NodeStatus*> registered;
  for (const NodeStatus& status : state.nodes) registered[status.node.executor_id] = &status;
  if (round.formed) snapshot.rendezvous_s = SecondsBetween(round.started_at, round.formed_at);

  for (auto& node : round.nodes) {
    const int index = node->index;
    auto found = registered.find(node->executor_id);
    const NodeStatus* status = found == registered.end() ? nullptr : found->second;
    NodeSnapshot out;
    out.executor_id = node->executor_id;
    if (node->placement) {
      out.job = node->placement->job;
      out.task_index = node->placement->index;
      out.chief = node->placement->chief;
      if (node->placement->rank) out.rank = node->placement->rank->rank;
    }
    out.host = round.Host(*node);
    out.restarts = round.number;
    out.state = NodeState(!node->failure.empty(), node->exit, node->stopped_while_running, status,
                          round.formed);
    out.runtime_s = SecondsBetween(node->launched_at, node->exited_at.value_or(now));
    if (node->exit) {
      out.exited = true;
      out.exit_code = node->exit->exit_code();
      out.exit_signal = node->exit->signal();
      out.exit_text = node->DescribeExit(*node->exit);
    }
    out.error = !node->failure.empty() ? node->failure : node->error_message;
    if (out.error == out.exit_text) out.error.clear();  // said once is enough
    if (status != nullptr) {
      out.host = status->node.host;
      out.ports = status->node.ports;
      out.pid = status->node.pid;
      out.gpus = status->node.gpus;
      out.program_pid = status->program_pid;
      if (status->alive) {
        out.heartbeat_age_s = std::chrono::duration<double>(status->last_heartbeat_age).count();
      }
      if (out.error.empty()) out.error = status->error;
      out.feed = status->feed;
      out.metrics = status->metrics;
      if (out.feed) {
        std::tie(out.records_per_s, out.bytes_per_s) =
            rates_[out.executor_id].Add(snapshot.elapsed_s, out.feed->records, out.feed->bytes);
      }
    } else if (!round.formed && !node->exit && index >= 0) {
      auto [job, task_index] = options_.cluster.Slot(index);
      snapshot.waiting_for.push_back(job + ":" + std::to_string(task_index) + " (executor " +
                                     node->executor_id + ") on " + round.Location(*node));
    }
    snapshot.nodes.push_back(std::move(out));
  }
  bool fed = false;
  for (const NodeSnapshot& node : snapshot.nodes) fed = fed || node.feed.has_value();
  if (fed) {
    snapshot.feed = SumFeeds(snapshot.nodes, DynamicQueueSize());
    if (snapshot.elapsed_s - last_history_t_ >= 1.0) {
      last_history_t_ = snapshot.elapsed_s;
      history_.push_back(
          {snapshot.elapsed_s, snapshot.feed->records_per_s, snapshot.feed->bytes_per_s});
      if (history_.size() > kHistoryPoints) history_.pop_front();
    }
    snapshot.history.assign(history_.begin(), history_.end());
  }
  ObserveTraining(snapshot);
  progress_.Show(ProgressText(snapshot), now);
  status_.Publish(std::move(snapshot));
  return true;
}

struct Driver::Carry {
  std::unique_ptr<RendezvousServer> server;
  std::shared_ptr<EventQueue> queue;
  std::vector<std::unique_ptr<Node>> nodes;
  int admitted_by_hand = 0;                // joiners with no Node yet (AddJoined makes them)
  std::vector<std::string> still_waiting;  // joiners there was no room for
};

Driver::~Driver() = default;

Status Driver::StartRendezvous(Round& round) {
  DROVER_ASSIGN_OR_RETURN(round.queue->wake_fd, os::MakeEventFd());
  RendezvousServerOptions server_options;
  server_options.bind_address = engine_.rendezvous_host();
  server_options.token = *options_.token;
  server_options.cluster = options_.cluster;
  server_options.cluster_id = round.cluster_id;
  server_options.reservation_timeout = options_.reservation_timeout;
  server_options.heartbeat_interval = options_.heartbeat_interval;
  server_options.quiet_heartbeat_interval = options_.quiet_heartbeat_interval;
  server_options.elastic = elastic();
  std::shared_ptr<EventQueue> queue = round.queue;
  server_options.on_event = [queue](const NodeEvent& event) { queue->Push(event); };
  server_options.log = [queue](const std::string& line) { queue->PushLog(line); };
  server_options.on_outcome = [queue] { queue->Wake(); };
  auto server = RendezvousServer::Start(std::move(server_options));
  if (!server.ok()) return server.status().WithContext("cannot start the rendezvous");
  round.server = std::move(server).value();
  if (elastic()) {
    err_ << "drover run: elastic (" << options_.min_nodes << " to " << options_.cluster.num_nodes
         << " nodes): agents may join at " << engine_.rendezvous_host() << ":"
         << round.server->port() << "\n"
         << std::flush;
  }
  return Status::Ok();
}

std::optional<Driver::Outcome> Driver::FormElastic(Round& round, bool held,
                                                   std::optional<Clock::time_point>& enough_since) {
  int alive = 0;
  for (auto& node : round.nodes) {
    if (node->running()) {
      ++alive;
    } else if (node->failure.empty() && node->exit) {
      node->failure =
          "its agent exited before the cluster formed: " + node->DescribeExit(*node->exit);
      err_ << "drover run: executor " << node->executor_id << " left: " << node->failure << "\n";
    }
  }
  if (alive + round.joining_by_hand < options_.min_nodes) {
    round.Emit();
    err_ << "drover run: only " << alive + round.joining_by_hand << " of the " << options_.min_nodes
         << " nodes the run needs at least (MIN of --nodes MIN:MAX) are "
         << "left; missing:";
    for (auto& node : round.nodes) {
      if (!node->running()) {
        err_ << " executor " << node->executor_id << " (" << node->failure << ")";
      }
    }
    err_ << "\n" << std::flush;
    round.Stop(round.All(), true);
    round.WriteUnformedLogs();
    return Outcome::kNoRestart;
  }
  ClusterState state = round.server->QueryState();
  if (state.phase != "reserving") return std::nullopt;
  const Clock::time_point now = Clock::now();
  bool form = false;
  if (held) {
    // Every agent still up registered again (its last round's feed state is
    // all written), and the admitted joiners.
    form = state.registered >= alive + round.joining_by_hand;
  } else if (state.registered >= options_.min_nodes) {
    if (!enough_since) enough_since = now;
    form = state.registered >= alive || now - *enough_since >= options_.join_wait;
  }
  if (!form) return std::nullopt;
  if (held) {
    CollectFeedCommits(*round.server);
    round.server->DeleteKeys(feed::kFeedKeyPrefix);
    if (Status written = WriteFeedPlanForRound(); !written.ok()) {
      err_ << "drover run: " << written.message() << "\n";
      round.Stop(round.All(), true);
      return Outcome::kNoRestart;
    }
  }
  Result<int> formed = round.server->FormWithRegistered(options_.min_nodes);
  if (!formed.ok()) {
    err_ << "drover run: the cluster did not form: " << formed.status().message() << "\n";
    round.Stop(round.All(), true);
    round.WriteUnformedLogs();
    return Outcome::kNoRestart;
  }
  return std::nullopt;
}

Driver::Outcome Driver::HandOver(Round& round, const std::string& reason) {
  restart_reason_ = reason;
  // What the lost nodes still had in their pipes, before they go.
  for (int i = 0; i < 5; ++i) {
    bool open = false;
    for (auto& node : round.nodes) {
      open = open || (!node->running() && node->process && node->process->output_fd() >= 0);
    }
    if (!open) break;
    if (int signal = round.Pump(Milliseconds(20)); signal != 0) {
      interrupt_signal_ = signal;
      round.Emit();
      round.Stop(round.All(), true);
      return Outcome::kInterrupted;
    }
  }
  round.Emit();
  // What the nodes reported this round ends with it; joiners wait on.
  for (const NodeEvent& event : round.queue->Take()) {
    if (event.kind == NodeEvent::Kind::kJoining) round.AddJoiner(event.node.executor_id);
  }
  auto carry = std::make_unique<Carry>();
  std::vector<std::unique_ptr<Node>> lost;
  for (auto& node : round.nodes) {
    if (node->stays()) {
      carry->nodes.push_back(std::move(node));
    } else {
      lost.push_back(std::move(node));
    }
  }
  round.nodes = std::move(lost);
  for (auto& node : round.nodes) {
    if (node->process) node->process->Signal(SIGKILL);
  }
  ReformPlan plan;
  plan.round = round.number + 1;
  plan.cluster_id = ClusterId() + "-restart" + std::to_string(plan.round);
  plan.reason = reason;
  plan.hold = true;
  // A joiner is one of ours that registered late (it stays, and counts
  // already), or an agent started by hand, admitted while there is room.
  auto find = [](const std::vector<std::unique_ptr<Node>>& nodes, const std::string& id) {
    return std::any_of(nodes.begin(), nodes.end(),
                       [&](const std::unique_ptr<Node>& node) { return node->executor_id == id; });
  };
  const int room = options_.cluster.num_nodes - static_cast<int>(carry->nodes.size());
  for (const std::string& id : round.joiners) {
    if (find(carry->nodes, id)) {
      plan.admit.push_back(id);
    } else if (find(round.nodes, id)) {
      continue;  // one of ours, lost before it could join
    } else if (carry->admitted_by_hand < room) {
      plan.admit.push_back(id);
      ++carry->admitted_by_hand;
    } else {
      carry->still_waiting.push_back(id);
    }
  }
  plan.cluster = options_.cluster;
  plan.cluster.num_nodes = static_cast<int>(carry->nodes.size()) + carry->admitted_by_hand;
  // The run ends here: every node, kept or lost, is stopped.
  auto end_run = [&] {
    round.nodes.insert(round.nodes.end(), std::make_move_iterator(carry->nodes.begin()),
                       std::make_move_iterator(carry->nodes.end()));
    round.Stop(round.All(), true);
    return Outcome::kNoRestart;
  };
  if (plan.cluster.num_nodes < options_.min_nodes) {
    err_ << "drover run: " << plan.cluster.num_nodes
         << (plan.cluster.num_nodes == 1 ? " node remains" : " nodes remain") << ", fewer than the "
         << options_.min_nodes << " the run needs at least (MIN of "
         << "--nodes MIN:MAX)";
    for (auto& node : round.nodes) {
      err_ << "; lost " << node->tag << " (executor " << node->executor_id << ")";
    }
    err_ << "\n" << std::flush;
    return end_run();
  }
  if (Status reformed = round.server->Reform(plan); !reformed.ok()) {
    err_ << "drover run: cannot form the group again: " << reformed.message() << "\n";
    return end_run();
  }
  err_ << "drover run: re-forming the group with " << plan.cluster.num_nodes << " node"
       << (plan.cluster.num_nodes == 1 ? "" : "s") << " (round " << plan.round << ") after "
       << reason << "\n"
       << std::flush;
  carry->server = std::move(round.server);
  carry->queue = round.queue;
  carry_ = std::move(carry);
  return Outcome::kReform;
}

Status Driver::LaunchHostAgent(Round& round, uint16_t port, const std::vector<int>& group) {
  // Each node's own credential, here or on another host: the agent carries
  // them all on one connection, proving each (docs/security.md), and the
  // cluster token stays in the driver.
  HostLaunch host;
  host.argv = SharedAgentArgv(round.number, port);
  host.argv.insert(host.argv.begin() + 4, {"--host", engine_.agent_host(group.front())});
  for (int i : group) {
    DROVER_RETURN_IF_ERROR(WriteCredentialFile(i));
    host.nodes.push_back(
        HostLaunch::Node{std::to_string(i), NodeCredentialFile(i),
                         options_.gpus.empty() ? "" : options_.gpus[static_cast<size_t>(i)]});
  }
  DROVER_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<AgentProcess>> processes,
                          engine_.LaunchHost(host));
  for (size_t k = 0; k < group.size(); ++k) {
    Node& node = *round.nodes[static_cast<size_t>(group[k])];
    node.process = std::move(processes[k]);
    node.launched_at = Clock::now();
  }
  return Status::Ok();
}

bool Driver::LaunchAgents(Round& round, uint16_t port) {
  const int count = options_.cluster.num_nodes;
  for (int i = 0; i < count; ++i) {
    auto node = std::make_unique<Node>();
    node->executor_id = std::to_string(i);
    node->index = i;
    node->tag = "executor " + node->executor_id;
    round.nodes.push_back(std::move(node));
  }
  auto failed = [&](const Status& status) {
    err_ << "drover run: " << status.message() << "\n";
    round.Stop(round.All(), true);
    return false;
  };
  std::vector<bool> launched(static_cast<size_t>(count), false);
  if (options_.host_agent && !elastic() && engine_.StartsHostAgents()) {
    for (const std::vector<int>& group : engine_.NodesByHost(count)) {
      if (group.size() < 2 || group.size() > HostLaunch::kMaxNodes) continue;
      if (Status started = LaunchHostAgent(round, port, group); !started.ok()) {
        return failed(started);
      }
      for (int i : group) launched[static_cast<size_t>(i)] = true;
    }
  }
  for (int i = 0; i < count; ++i) {
    if (launched[static_cast<size_t>(i)]) continue;
    Node& node = *round.nodes[static_cast<size_t>(i)];
    if (Status written = WriteCredentialFile(i); !written.ok()) return failed(written);
    auto process = engine_.Launch(AgentLaunch{node.executor_id, AgentArgv(i, round.number, port)});
    if (!process.ok()) return failed(process.status());
    node.process = std::move(process).value();
    node.launched_at = Clock::now();
  }
  return true;
}

Driver::Outcome Driver::RunRound(int number) {
  round_failure_.clear();
  Round round{*this, number};
  // Whichever way the round ends, the status shows its last state.
  struct PublishAtEnd {
    Driver& driver;
    Round& round;
    ~PublishAtEnd() { driver.PublishStatus(round, "stopping", /*force=*/true); }
  } publish_at_end{*this, round};
  round.cluster_id = ClusterId();
  if (number > 0) round.cluster_id += "-restart" + std::to_string(number);
  // An elastic round after the first: the agents and the server carry over,
  // and the round forms when they have all registered again (FormElastic).
  const bool held = carry_ != nullptr;
  if (held) {
    round.server = std::move(carry_->server);
    round.queue = std::move(carry_->queue);
    round.nodes = std::move(carry_->nodes);
    round.joining_by_hand = carry_->admitted_by_hand;
    round.joiners = std::move(carry_->still_waiting);
    carry_.reset();
    for (auto& node : round.nodes) node->StartRound();
  } else if (Status written = WriteFeedPlanForRound(); !written.ok()) {
    err_ << "drover run: " << written.message() << "\n";
    return Outcome::kNoRestart;
  }
  std::ofstream tee;
  if (options_.tee) {
    tee.open(fs::path(options_.log_dir) / "drover.log", std::ios::app);
    if (tee) round.tee = &tee;
  }
  status_.ClearLogs();
  for (auto& [executor, meter] : rates_) meter.Reset();
  for (auto& [executor, meter] : step_rates_) meter.Reset();
  stragglers_.Reset();
  status_.BreakMetrics();

  if (!held) {
    if (Status started = StartRendezvous(round); !started.ok()) {
      err_ << "drover run: " << started.message() << "\n";
      return Outcome::kNoRestart;
    }
    if (!LaunchAgents(round, round.server->port())) return Outcome::kNoRestart;
  }
  PublishStatus(round, "reserving", /*force=*/true);

  Clock::time_point formed_at{};
  std::optional<Clock::time_point> training_done_at;
  std::optional<Clock::time_point> early_exit_since;
  std::optional<Clock::time_point> outside_stop_since;
  std::optional<Clock::time_point> enough_since;  // elastic: MIN registered since
  Node* failed = nullptr;
  std::string failure_reason;
  Clock::time_point failure_deadline{};
  WakeAt wake(Clock::now());
  for (;;) {
    int signal = round.Pump(wake.Left(), /*formation_first=*/true);
    if (signal != 0) {
      interrupt_signal_ = signal;
      round.Emit();
      err_ << "drover run: "
           << (stop_requested_ ? "stop requested" : os::SignalName(signal) + " received")
           << "; stopping every node\n"
           << std::flush;
      round.Stop(round.All(), true);
      round.WriteUnformedLogs();
      return Outcome::kInterrupted;
    }
    if (elastic() && !round.formed) {
      if (std::optional<Outcome> ended = FormElastic(round, held, enough_since)) return *ended;
    }
    Clock::time_point now = Clock::now();
    wake = WakeAt(now);
    if (elastic() && !round.formed && enough_since) wake.By(*enough_since + options_.join_wait);
    for (auto& node : round.nodes) {
      if (node->running() && node->process && node->process->exit_fd() < 0) {
        wake.By(now + kPollInterval);
      }
    }
    if (!round.formed && round.server->QueryState().phase != "reserving") {
      auto cluster = round.server->WaitForCluster(now + Milliseconds(5'000));
      if (!cluster.ok()) {
        round.Emit();
        err_ << "drover run: the cluster did not form: " << cluster.status().message() << "\n"
             << std::flush;
        round.Stop(round.All(), true);
        round.WriteUnformedLogs();
        return Outcome::kNoRestart;
      }
      round.OnFormed(*cluster);
      formed_at = now;
    }
    round.Emit();
    if (!PublishStatus(round, round.formed ? "running" : "reserving")) {
      wake.By(last_publish_ + kPublishInterval);  // what woke the loop is shown then
    }

    for (const NodeEvent& event : round.queue->Take()) {
      if (event.kind == NodeEvent::Kind::kJoining) {
        round.AddJoiner(event.node.executor_id);
        continue;
      }
      Node* node = round.Find(event.node.executor_id);
      if (node == nullptr) continue;
      // No program runs in a held round before it forms: a report is the
      // last round's, sent as it ended.
      if (held && !round.formed && event.kind != NodeEvent::Kind::kDead) continue;
      if (event.kind == NodeEvent::Kind::kError) {
        node->error_message = event.message;
        node->reported_lines = event.last_log_lines;
        if (failed == nullptr && !node->stopping) {
          failed = node;
          failure_reason = event.message;
          // An elastic agent outlives its program: nothing more to wait for.
          failure_deadline = elastic() ? now : now + kExitStatusWait;
        }
      } else if (event.kind == NodeEvent::Kind::kDead && !node->dead_since) {
        node->dead_since = now;
        node->dead_message = event.message;
      } else if (event.kind == NodeEvent::Kind::kLeft) {
        node->left_at = now;
      }
    }
    round.EndLingeringLaunchers(wake);

    if (failed == nullptr) {
      for (auto& node : round.nodes) {
        if (node->stopping) continue;
        if (!round.formed && node->exit) {
          if (elastic()) continue;  // FormElastic forms without it
          if (!early_exit_since) early_exit_since = now;
          if (wake.Passed(*early_exit_since + kEarlyExitWait)) {
            failed = node.get();
            failure_reason =
                "its agent exited before the cluster formed: " + node->DescribeExit(*node->exit);
            failure_deadline = now;
            break;
          }
        } else if (round.formed && node->exit && !node->exit->success()) {
          failed = node.get();
          failure_reason = node->DescribeExit(*node->exit);
          failure_deadline = now;
          break;
        } else if (round.formed && node->running() && node->dead_since &&
                   wake.Passed(*node->dead_since + kDeadConfirm)) {
          failed = node.get();
          failure_reason = node->dead_message;
          failure_deadline = now;
          break;
        }
      }
    }
    if (failed != nullptr && failed->exit && EndedByStopSignal(*failed->exit) &&
        !failed->stopping) {
      if (!outside_stop_since) outside_stop_since = now;
      if (!wake.Passed(*outside_stop_since + kOutsideStopWait)) continue;  // Pump reads the signal
    }
    if (failed != nullptr && (failed->exit || wake.Passed(failure_deadline))) {
      // Elastic: a lost node is the cause the others' failures follow from.
      for (auto& node : round.nodes) {
        if (!elastic() || !round.formed) break;
        if (node.get() != failed && !node->stopping && node->exit && !node->exit->success()) {
          failed = node.get();
          failure_reason = node->DescribeExit(*node->exit);
          break;
        }
      }
      if (failed->exit && failure_reason != failed->DescribeExit(*failed->exit) &&
          failed->error_message == failure_reason) {
        failure_reason = failed->DescribeExit(*failed->exit);
      }
      round.ReportFailure(*failed, failure_reason);
      if (elastic() && round.formed) {
        // A program that failed with every agent alive is restarted in
        // place, as a restart; a lost node changes the membership, which
        // is not one.
        const bool lost = std::any_of(round.nodes.begin(), round.nodes.end(),
                                      [](const auto& node) { return !node->stays(); });
        if (lost || failed_rounds_ < options_.max_restarts) {
          if (!lost) ++failed_rounds_;
          return HandOver(round, round_failure_);
        }
      }
      round.Stop(round.All(), true);
      round.WriteUnformedLogs();
      return Outcome::kFailure;
    }
    if (!round.formed) continue;

    if (elastic() && !round.joiners.empty()) {
      // Room for a joiner, and no member done yet (the run is not ending).
      int members = 0;
      bool ending = false;
      for (auto& node : round.nodes) {
        if (!node->placement) continue;
        ++members;
        ending = ending || node->exit || node->left_at;
      }
      if (members < options_.cluster.num_nodes && !ending) {
        return HandOver(round, "executor " + round.joiners.front() + " joined");
      }
    }

    bool training_done = true;
    std::vector<Node*> others;
    for (auto& node : round.nodes) {
      // The ranked tasks' ends decide; ps and evaluators serve them.
      if (node->placement && node->placement->rank) {
        // An elastic agent stays up after its program finished (LEAVE).
        const bool finished = (node->exit && node->exit->success()) ||
                              (elastic() && node->left_at && node->error_message.empty());
        training_done = training_done && finished;
      } else if (node->placement) {
        others.push_back(node.get());
      }
    }
    if (training_done) {
      std::vector<Node*> still_up;
      for (Node* node : others) {
        if (node->running()) still_up.push_back(node);
      }
      if (!training_done_at) training_done_at = now;
      if (!still_up.empty() &&
          !wake.Passed(*training_done_at + Milliseconds(others_grace_ms_.load()))) {
        continue;
      }
      if (!still_up.empty()) {
        err_ << "drover run: the chief and workers are done; stopping";
        for (Node* node : still_up) err_ << " " << node->tag;
        err_ << "\n" << std::flush;
        round.Stop(still_up, false);
      }
      round.Stop(round.All(), false);  // reaps and clears the process groups
      err_ << "drover run: done; logs in " << options_.log_dir << "\n" << std::flush;
      return Outcome::kSuccess;
    }
    if (options_.shutdown_timeout.count() > 0 &&
        wake.Passed(formed_at + options_.shutdown_timeout)) {
      err_ << "drover run: the workers were not done " << os::SecondsText(options_.shutdown_timeout)
           << " after the cluster formed (--shutdown-timeout); stopping every node\n";
      round.Stop(round.All(), true);
      return Outcome::kNoRestart;
    }
  }
}

void Driver::PrintPlan(std::ostream& out) const {
  const ClusterTemplate& cluster = options_.cluster;
  out << "drover run --dry-run: nothing is started.\n";
  out << "engine: " << engine_.name() << "; rendezvous on " << engine_.rendezvous_host()
      << ":<ephemeral port>, " << cluster.num_nodes << " node"
      << (cluster.num_nodes == 1 ? "" : "s") << ", reservation timeout "
      << os::SecondsText(options_.reservation_timeout) << ", grace "
      << os::SecondsText(options_.grace) << ", max restarts " << options_.max_restarts << "\n";
  if (elastic()) {
    out << "elastic: " << options_.min_nodes << " to " << cluster.num_nodes
        << " nodes; forms with at least " << options_.min_nodes << " after a join wait of "
        << os::SecondsText(options_.join_wait)
        << "; a lost node leaves, agents that register later join at the next round\n";
  }
  out << "log dir: "
      << (options_.log_dir.empty() ? std::string("./drover-logs/<cluster-id>") : options_.log_dir)
      << "\n";
  out << "command:";
  for (const std::string& arg : options_.command) out << " " << arg;
  out << "\n";
  if (options_.feed) {
    const feed::FeedPlan& plan = *options_.feed;
    out << "feed: " << plan.partitions.size() << " partition"
        << (plan.partitions.size() == 1 ? "" : "s") << " ("
        << feed::RecordFormatName(plan.read.format) << ", ingest: " << feed::IngestName(plan.ingest)
        << "), " << plan.epochs << " epoch" << (plan.epochs == 1 ? "" : "s") << ", "
        << (plan.mode == feed::FeedMode::kInference ? "inference into " + plan.output_dir
                                                    : std::string("training"))
        << ", to the chief, master and worker nodes "
        << (plan.balance == feed::Balance::kDynamic
                ? "on demand (dynamic: each partition to the first with room)"
                : "in equal shares")
        << "\n";
    for (size_t p = 0; p < plan.partitions.size(); ++p) {
      const feed::Partition& partition = plan.partitions[p];
      out << "  " << p << ": " << partition.Name();
      if (partition.records) {
        out << " (" << *partition.records << (*partition.records == 1 ? " record)" : " records)");
      }
      out << "\n";
    }
    PrintShares(plan, out);
  }
  // Ranks depend only on the roles and hosts: the same layout as the server's,
  // with placeholder ports (port-bearing values are shown as such).
  std::vector<Placement> placements;
  for (int i = 0; i < cluster.num_nodes; ++i) {
    Placement placement;
    std::tie(placement.job, placement.index) = cluster.Slot(i);
    placement.host = engine_.agent_host(i);
    placement.ports = {static_cast<uint32_t>(1 + i)};
    placements.push_back(std::move(placement));
  }
  Status placed = PlaceTasks(placements);
  out << "nodes:\n";
  for (int i = 0; i < cluster.num_nodes; ++i) {
    const Placement& placement = placements[static_cast<size_t>(i)];
    out << "  " << placement.Task() << "  executor " << i << "  host " << placement.host
        << "  1 port to reserve (<port" << i << ">)";
    if (!options_.gpus.empty()) out << "  gpus " << options_.gpus[static_cast<size_t>(i)];
    out << "\n";
    out << "    DROVER_EXECUTOR_ID=" << i << " DROVER_JOB_NAME=" << placement.job
        << " DROVER_TASK_INDEX=" << placement.index << " DROVER_RESTART_COUNT=0";
    if (!options_.gpus.empty()) {
      std::string gpus = options_.gpus[static_cast<size_t>(i)];
      out << " CUDA_VISIBLE_DEVICES=" << (gpus == "none" ? "" : gpus);
    }
    if (placed.ok() && placement.rank) {
      const RankInfo& info = *placement.rank;
      out << " RANK=" << info.rank << " WORLD_SIZE=" << info.world_size
          << " LOCAL_RANK=" << info.local_rank << " MASTER_ADDR=" << info.master_host;
    } else {
      out << " (no rank: not a training job)";
    }
    out << "\n";
  }
  out << "every node also gets TF_CONFIG, MASTER_PORT, DROVER_PORT, DROVER_PORTS, "
         "DROVER_CLUSTER_SPEC, DROVER_CONTEXT_FILE once its ports are reserved "
         "(docs/run.md)\n";
}

}  // namespace drover

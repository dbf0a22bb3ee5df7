#include "driver/etcd_run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "driver/live_runs.h"
#include "driver/run_status.h"
#include "driver/status_page_server.h"
#include "driver/status_server.h"
#include "driver/status_text.h"
#include "feed/etcd_feed_ledger.h"
#include "os/duration_text.h"
#include "os/find_program.h"
#include "os/subprocess.h"
#include "rendezvous/etcd_connect.h"
#include "rendezvous/node_info_codec.h"

namespace drover {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// How often the driver looks at the nodes' logs, and at the run in etcd
// (every node's heartbeat: a read that grows with the run).
constexpr Milliseconds kPollInterval{200};
constexpr Milliseconds kStateInterval{1'000};
// The KV key where the driver leaves what an attaching driver needs.
constexpr char kDriverKey[] = "drover/driver";
// How long the nodes get to go after the run ended, beyond the grace time.
constexpr Milliseconds kExitSlack{30'000};

std::string HostName() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::string RunName(const std::string& address) {
  std::string name = address.substr(address.rfind('/') + 1);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return name;
}

// One node's agent as the driver knows it: its log and, when it runs on
// this host, its pid.
struct LocalNode {
  std::string executor_id;
  std::string log;
  int pid = 0;
  bool child = false;  // started by this driver process: reaped here
  uint64_t offset = 0;
  std::string partial;  // an unfinished last line

  bool Running() {
    if (pid <= 0) return false;
    if (child) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        return false;
      }
      return true;
    }
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      pid = 0;
      return false;
    }
    return true;
  }
};

// Starts one `drover agent` in a session of its own, its output appended to
// `log`, so that it outlives this driver. Everything the child needs is
// made before fork: the driver has threads, so the child only calls
// async-signal-safe functions.
Result<int> SpawnDetached(const std::vector<std::string>& argv, const std::string& log,
                          const std::string& password) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("cannot open " + log + ": " + std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::string_view(*entry).rfind("DROVER_ETCD_PASSWORD=", 0) != 0) {
      variables.emplace_back(*entry);
    }
  }
  if (!password.empty()) variables.push_back("DROVER_ETCD_PASSWORD=" + password);
  std::vector<char*> envp;
  for (std::string& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return Status::IoError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::setsid();
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(args[0], args.data(), envp.data());
    static const char kWhy[] = "drover run: cannot run the drover agent\n";
    ssize_t ignored = ::write(2, kWhy, sizeof(kWhy) - 1);
    (void)ignored;
    ::_exit(127);
  }
  ::close(fd);
  return static_cast<int>(pid);
}

// `log_dir`: the run's, where the agents' own logs are too; the programs
// find it as DROVER_LOG_DIR (and save their models there).
std::vector<std::string> AgentArgv(const EtcdDriverOptions& o, const std::string& executor_id,
                                   const std::string& log_dir) {
  const EtcdRunOptions& e = o.etcd;
  const int min = e.min_nodes > 0 ? e.min_nodes : e.cluster.num_nodes;
  std::vector<std::string> argv = {os::AgentBinaryBeside(o.drover_binary),
                                   "agent",
                                   "--rendezvous",
                                   o.address,
                                   "--executor-id",
                                   executor_id,
                                   "--host",
                                   o.host,
                                   "--nodes",
                                   std::to_string(min) + ":" + std::to_string(e.cluster.num_nodes),
                                   "--ps",
                                   std::to_string(e.cluster.num_ps),
                                   "--max-restarts",
                                   std::to_string(e.max_restarts),
                                   "--join-wait",
                                   os::SecondsValue(e.join_wait),
                                   "--lease-ttl",
                                   os::SecondsValue(e.lease_ttl),
                                   "--etcd-timeout",
                                   os::SecondsValue(e.unavailable_timeout),
                                   "--grace",
                                   os::SecondsValue(o.grace),
                                   "--log-dir",
                                   log_dir};
  auto add = [&](const char* flag, const std::string& value) {
    if (!value.empty()) argv.insert(argv.end(), {flag, value});
  };
  if (o.feed && o.feed->external) add("--feed-plan-json", o.feed->ToJson());
  if (e.cluster.master_node) argv.push_back("--chief");
  if (e.cluster.eval_node) argv.push_back("--evaluator");
  add("--etcd-cacert", e.ca_file);
  add("--etcd-cert", e.cert_file);
  add("--etcd-key", e.key_file);
  add("--etcd-user", e.user);
  argv.push_back("--");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

class EtcdWatch {
 public:
  EtcdWatch(const EtcdDriverOptions& options, std::ostream& out, std::ostream& err)
      : o_(options), out_(out), err_(err), status_(o_.status ? *o_.status : own_status_) {}

  int Run();

 private:
  // Watches the run to its end; returns the exit code.
  int Watch();
  Status Launch();
  Status Adopt(const json& record);
  // Stores the feed plan in etcd, or checks that the one there is the same.
  Status PublishFeed();
  // The driver's presence (docs/run.md, --driver-timeout): its key under a
  // lease of its own, refreshed from the watch loop.
  Status Announce();
  void KeepPresence();
  // Prints what the nodes wrote since the last look.
  void Relay();
  void RelayNode(LocalNode& node);
  void Report(const ClusterState& state);
  // drover.Cluster's callbacks (EtcdDriverOptions::on_formed, on_failure).
  void SayFormed(const ClusterState& state);
  void SayFailure(const ClusterState& state);
  // The status page (docs/status.md): started once the run's log directory
  // is known; each look at the run is published to it; run.json at the end.
  Status StartStatusServer();
  void PublishStatus(const ClusterState& state);
  int Finish(int code);
  // Waits for this host's agents to exit (they do once the run ended).
  void AwaitAgents(Milliseconds limit);
  // Takes one last look at the ended run once each node wrote how it ended
  // (left/ID or errors/ID), so that run.json has every program's end: at
  // once when this host's agents are gone (they write it before they exit),
  // else polling until none is missing or `limit`, naming those missing.
  void AwaitLastStatuses(Milliseconds limit);
  std::string Tag(const std::string& executor_id) const;
  // Whether agents ran on this host and none of them is left.
  bool AllAgentsGone() {
    if (!local_) return false;
    for (LocalNode& node : nodes_) {
      if (node.Running()) return false;
    }
    return true;
  }
  std::string LogDirectory() const {
    return nodes_.empty() ? "?" : fs::path(nodes_.front().log).parent_path().string();
  }
  int Fail(const std::string& message) {
    err_ << "drover run: " << message << "\n" << std::flush;
    return 1;
  }

  const EtcdDriverOptions& o_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<RendezvousClient> client_;
  std::vector<LocalNode> nodes_;
  std::map<std::string, std::string> tags_;  // executor id -> "worker:0"
  int round_ = -1;
  int formed_round_ = -1;  // the last round whose cluster was said
  bool local_ = false;     // agents of this run run on this host
  RunStatus own_status_;
  RunStatus& status_;  // o_.status, else own_status_
  std::unique_ptr<StatusServer> status_server_;
  std::map<std::string, RateMeter> rates_;  // executor id -> its feed's rates
  const Clock::time_point started_at_ = Clock::now();
  const double started_at_unix_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string run_dir_;               // LOG_DIR/etcd-RUN: the agents' logs, run.json
  std::vector<std::string> command_;  // the programs' (an attached driver: the record's)
  std::unique_ptr<etcd::EtcdClient> presence_;
  int64_t presence_lease_ = 0;
  Clock::time_point next_keepalive_;
  std::string alive_key_;

 public:
  ~EtcdWatch() {
    // Gone at once, not a lease's TTL later: the run's nodes need not wait.
    if (presence_ && presence_lease_ != 0) (void)presence_->RevokeLease(presence_lease_);
    if (status_server_ && !o_.live_runs_dir.empty()) {
      UnregisterLiveRun(o_.live_runs_dir, static_cast<int>(::getpid()));
    }
  }
};

std::string EtcdWatch::Tag(const std::string& executor_id) const {
  auto it = tags_.find(executor_id);
  return it != tags_.end() ? it->second : "executor " + executor_id;
}

Status EtcdWatch::Launch() {
  const fs::path dir = run_dir_;
  json record = {{"host", HostName()}, {"log_dir", dir.string()}, {"command", o_.command}};
  for (int i = 0; i < o_.etcd.cluster.num_nodes; ++i) {
    LocalNode node;
    node.executor_id = std::to_string(i);
    node.log = (dir / ("node-" + node.executor_id + ".log")).string();
    DROVER_ASSIGN_OR_RETURN(node.pid, SpawnDetached(AgentArgv(o_, node.executor_id, dir.string()),
                                                    node.log, o_.etcd.password));
    node.child = true;
    local_ = true;
    record["nodes"].push_back(
        {{"executor_id", node.executor_id}, {"pid", node.pid}, {"log", node.log}});
    nodes_.push_back(std::move(node));
  }
  err_ << "drover run: started " << nodes_.size() << " agents through " << o_.address
       << " (logs in " << dir.string() << "); the run goes on if this driver dies: "
       << "drover run --attach " << o_.address << "\n"
       << std::flush;
  return client_->Set(kDriverKey, record.dump(), Clock::now() + o_.etcd.unavailable_timeout);
}

Status EtcdWatch::PublishFeed() {
  const Deadline deadline = Clock::now() + o_.etcd.unavailable_timeout;
  DROVER_ASSIGN_OR_RETURN(EtcdRunConnection run, ConnectEtcdRun(o_.address, o_.etcd, deadline));
  feed::EtcdFeedLedger ledger(std::move(run.client), run.prefix, o_.etcd.unavailable_timeout);
  return ledger.Publish(*o_.feed, deadline);
}

Status EtcdWatch::Announce() {
  const Deadline deadline = Clock::now() + o_.etcd.unavailable_timeout;
  DROVER_ASSIGN_OR_RETURN(EtcdRunConnection run, ConnectEtcdRun(o_.address, o_.etcd, deadline));
  presence_ = std::move(run.client);
  alive_key_ = EtcdDriverAliveKey(run.prefix);
  if (o_.driver_timeout) {
    json config = {{"timeout_ms", o_.driver_timeout->count()}};
    DROVER_RETURN_IF_ERROR(presence_->Put(EtcdDriverConfigKey(run.prefix), config.dump()).status());
  }
  const auto ttl = std::max<int64_t>(1, (o_.etcd.lease_ttl.count() + 999) / 1000);
  DROVER_ASSIGN_OR_RETURN(presence_lease_, presence_->GrantLease(std::chrono::seconds(ttl)));
  json me = {{"host", HostName()}, {"pid", ::getpid()}};
  DROVER_RETURN_IF_ERROR(presence_->Put(alive_key_, me.dump(), presence_lease_).status());
  next_keepalive_ = Clock::now() + o_.etcd.lease_ttl / 3;
  return Status::Ok();
}

void EtcdWatch::KeepPresence() {
  if (!presence_ || Clock::now() < next_keepalive_) return;
  next_keepalive_ = Clock::now() + o_.etcd.lease_ttl / 3;
  Result<int64_t> ttl = presence_->KeepAlive(presence_lease_);
  if (!ttl.ok()) return;  // etcd unavailable: the loop says so
  if (*ttl == 0) {
    // Expired (etcd was away longer than the TTL): a new lease.
    const auto seconds = std::max<int64_t>(1, (o_.etcd.lease_ttl.count() + 999) / 1000);
    Result<int64_t> lease = presence_->GrantLease(std::chrono::seconds(seconds));
    if (!lease.ok()) return;
    presence_lease_ = *lease;
  }
  // Written again each time: another driver of the run (attached while this
  // one ran) took the key under its lease, and its end took the key away.
  json me = {{"host", HostName()}, {"pid", ::getpid()}};
  (void)presence_->Put(alive_key_, me.dump(), presence_lease_);
}

Status EtcdWatch::Adopt(const json& record) {
  const bool here = record.value("host", "") == HostName();
  for (const json& entry : record.value("nodes", json::array())) {
    LocalNode node;
    node.executor_id = entry.value("executor_id", "");
    node.log = entry.value("log", "");
    node.pid = here ? entry.value("pid", 0) : 0;
    if (node.pid > 0) local_ = true;
    // Only what comes from now on: the rest was printed by the last driver.
    std::error_code ec;
    if (here) node.offset = fs::file_size(node.log, ec);
    if (ec) node.offset = 0;
    nodes_.push_back(std::move(node));
  }
  err_ << "drover run: attached to the run at " << o_.address
       << (here ? "" : " (its agents run on " + record.value("host", "?") + ")") << "\n"
       << std::flush;
  return Status::Ok();
}

void EtcdWatch::RelayNode(LocalNode& node) {
  const int fd = ::open(node.log.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buffer[64 << 10];
  for (;;) {
    const ssize_t got = ::pread(fd, buffer, sizeof(buffer), static_cast<off_t>(node.offset));
    if (got <= 0) break;
    node.offset += static_cast<uint64_t>(got);
    node.partial.append(buffer, static_cast<size_t>(got));
    size_t start = 0;
    std::vector<std::string> lines;
    for (size_t end; (end = node.partial.find('\n', start)) != std::string::npos; start = end + 1) {
      lines.emplace_back(std::string_view(node.partial).substr(start, end - start));
      out_ << "[" << Tag(node.executor_id) << "] " << lines.back() << "\n";
    }
    node.partial.erase(0, start);
    status_.AppendLog(node.executor_id, lines);
  }
  ::close(fd);
}

void EtcdWatch::Relay() {
  bool refreshed = false;
  for (LocalNode& node : nodes_) {
    std::error_code ec;
    const uint64_t size = fs::file_size(node.log, ec);
    if (ec || size <= node.offset) continue;
    // A node's first lines come once its round formed: learn its role
    // first, so that they are tagged with it.
    if (!refreshed && tags_.count(node.executor_id) == 0) {
      refreshed = true;
      Result<ClusterState> state = client_->QueryState(Clock::now() + o_.etcd.request_timeout);
      if (state.ok()) Report(*state);
    }
    RelayNode(node);
  }
  out_ << std::flush;
}

void EtcdWatch::Report(const ClusterState& state) {
  for (const NodeStatus& node : state.nodes) {
    if (node.node.task_index >= 0) {
      tags_[node.node.executor_id] =
          node.node.job_name + ":" + std::to_string(node.node.task_index);
    }
  }
  if (state.round != round_ && state.round > 0) {
    err_ << "drover run: round " << state.round << ": " << state.round_reason << "\n";
  }
  // Each round's cluster once: seen formed, or seen only once its programs
  // had ended (a short run between two looks).
  const bool placed = std::any_of(state.nodes.begin(), state.nodes.end(),
                                  [](const NodeStatus& node) { return node.node.task_index >= 0; });
  if ((state.phase == "formed" || (state.phase == "stopped" && placed)) &&
      formed_round_ != state.round) {
    formed_round_ = state.round;
    std::string members;
    for (const NodeStatus& node : state.nodes) {
      members +=
          (members.empty() ? "" : ", ") + Tag(node.node.executor_id) + " on " + node.node.host;
    }
    err_ << "drover run: formed with " << state.nodes.size() << " nodes: " << members << "\n";
    SayFormed(state);
  }
  round_ = state.round;
  err_ << std::flush;
}

void EtcdWatch::SayFormed(const ClusterState& state) {
  if (!o_.on_formed) return;
  FormedCluster cluster;
  cluster.cluster_id = "etcd-" + RunName(o_.address);
  cluster.round = state.round;
  cluster.round_reason = state.round_reason;
  for (const NodeStatus& node : state.nodes) cluster.nodes.push_back(node.node);
  if (Status placed = rendezvous_internal::PlaceNodes(cluster); !placed.ok()) {
    err_ << "drover run: cannot lay out round " << state.round << "'s cluster: " << placed.message()
         << "\n";
    return;
  }
  o_.on_formed(cluster);
}

// The node whose report ended the run: the run's end names its message
// (docs/protocol.md, "The etcd backend"); else the first that reported one.
void EtcdWatch::SayFailure(const ClusterState& state) {
  if (!o_.on_failure) return;
  const std::string why = state.stop_reason.substr(std::string_view("failed: ").size());
  const NodeStatus* failed = nullptr;
  for (const NodeStatus& node : state.nodes) {
    if (node.error.empty()) continue;
    if (why.rfind(node.error, 0) == 0) {
      failed = &node;
      break;
    }
    if (failed == nullptr) failed = &node;
  }
  NodeFailure failure;
  failure.reason = why;
  if (failed != nullptr) {
    failure.executor_id = failed->node.executor_id;
    failure.host = failed->node.host;
    if (failed->node.task_index >= 0) {
      failure.task = failed->node.job_name + ":" + std::to_string(failed->node.task_index);
    }
    failure.reason = failed->error;
    failure.last_lines = failed->last_log_lines;
    std::optional<RunStatus::NodeLog> relayed = status_.LogTail(failure.executor_id, 200);
    if (relayed && relayed->lines.size() > failure.last_lines.size()) {
      failure.last_lines = std::move(relayed->lines);
    }
  }
  o_.on_failure(failure);
}

void EtcdWatch::AwaitAgents(Milliseconds limit) {
  const Deadline deadline = Clock::now() + limit;
  for (;;) {
    Relay();
    bool running = false;
    for (LocalNode& node : nodes_) running = node.Running() || running;
    if (!running) return;
    if (Clock::now() >= deadline) {
      for (LocalNode& node : nodes_) {
        if (node.Running()) {
          err_ << "drover run: the agent of " << Tag(node.executor_id) << " (pid " << node.pid
               << ") did not exit within " << os::SecondsText(limit) << " of the run's end\n";
        }
      }
      return;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void EtcdWatch::AwaitLastStatuses(Milliseconds limit) {
  const Deadline deadline = Clock::now() + limit;
  for (;;) {
    Result<ClusterState> state = client_->QueryState(Clock::now() + o_.etcd.request_timeout);
    std::string missing;
    if (state.ok()) {
      PublishStatus(*state);
      for (const NodeStatus& node : state->nodes) {
        // A node still holding its lease with neither key is still ending;
        // one whose lease is gone never will.
        if (node.alive && !node.left && !node.reported) {
          missing += (missing.empty() ? "" : ", ") + Tag(node.node.executor_id);
        }
      }
      if (missing.empty() || local_) return;
    }
    if (Clock::now() >= deadline) {
      err_ << "drover run: "
           << (state.ok() ? "no last status from " + missing
                          : "no last look at the run (" + state.status().message() + ")")
           << " within " << os::SecondsText(limit)
           << " of the run's end; run.json lacks how their programs ended\n"
           << std::flush;
      return;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

int EtcdWatch::Run() {
  RendezvousClientOptions options;
  options.address = o_.address;
  options.etcd = o_.etcd;
  if (o_.attach) options.etcd.cluster.num_nodes = 0;  // watch only
  const Deadline connect_by = Clock::now() + o_.etcd.unavailable_timeout;
  Result<std::unique_ptr<RendezvousClient>> connected =
      RendezvousClient::Connect(options, connect_by);
  if (!connected.ok()) return Fail(connected.status().message());
  client_ = std::move(connected).value();
  Result<std::optional<std::string>> record = client_->Get(kDriverKey, connect_by);
  if (!record.ok()) return Fail(record.status().message());
  Result<ClusterState> state = client_->QueryState(connect_by);
  if (!state.ok()) return Fail(state.status().message());
  if (state->phase == "stopped") {
    return Fail("the run at " + o_.address + " has ended (" + state->stop_reason +
                "); give a new RUN to start another");
  }
  if (Status announced = Announce(); !announced.ok()) return Fail(announced.message());
  if (o_.feed && !o_.attach && !o_.feed->external) {
    if (Status published = PublishFeed(); !published.ok()) return Fail(published.message());
  }
  json driver_record = json::object();
  if (record->has_value()) {
    json parsed = json::parse(**record, nullptr, false);
    if (parsed.is_object()) driver_record = std::move(parsed);
  }
  command_ = o_.command;
  if (command_.empty()) command_ = driver_record.value("command", std::vector<std::string>{});
  // The run's directory: the one its agents log to when they run here, else
  // one of this driver's own (for run.json).
  run_dir_ =
      driver_record.value("host", "") == HostName() ? driver_record.value("log_dir", "") : "";
  if (run_dir_.empty()) run_dir_ = o_.run_dir;
  if (run_dir_.empty()) {
    run_dir_ = fs::absolute(fs::path(o_.log_dir.empty() ? "drover-logs" : o_.log_dir) /
                            ("etcd-" + RunName(o_.address)))
                   .string();
  }
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) return Fail("cannot make " + run_dir_ + ": " + ec.message());
  if (record->has_value()) {
    if (Status adopted = Adopt(driver_record); !adopted.ok()) return Fail(adopted.message());
  } else if (o_.attach) {
    err_ << "drover run: attached to the run at " << o_.address
         << " (its agents were started by hand: their output stays with them)\n";
  } else if (Status launched = Launch(); !launched.ok()) {
    return Fail(launched.message());
  }
  PublishStatus(*state);  // what the page shows before the first look
  if (Status started = StartStatusServer(); !started.ok()) {
    err_ << "drover run: no status page: " << started.message() << "\n";
  }
  return Finish(Watch());
}

int EtcdWatch::Watch() {
  Clock::time_point unavailable_since = Clock::time_point::max();
  Clock::time_point next_look = Clock::now();
  for (;;) {
    if (o_.stop_signal != nullptr && o_.stop_signal->load() != 0) {
      const int signal = o_.stop_signal->load();
      err_ << "drover run: " << os::SignalName(signal) << ": stopping the run\n" << std::flush;
      (void)client_->StopAll();
      AwaitAgents(o_.grace + kExitSlack);
      AwaitLastStatuses(o_.grace + kExitSlack);
      return 128 + signal;
    }
    Relay();
    KeepPresence();
    if (AllAgentsGone()) {
      // Nobody is left to end the run (the nodes end it among themselves).
      Result<ClusterState> last = client_->QueryState(Clock::now() + o_.etcd.unavailable_timeout);
      if (!last.ok() || last->phase != "stopped") {
        (void)client_->StopAll();
        return Fail("every agent of the run at " + o_.address +
                    " exited before the run ended; their logs are in " + LogDirectory());
      }
    }
    if (Clock::now() < next_look) {
      std::this_thread::sleep_for(kPollInterval);
      continue;
    }
    next_look = Clock::now() + kStateInterval;
    Result<ClusterState> now = client_->QueryState(Clock::now() + o_.etcd.unavailable_timeout);
    if (!now.ok()) {
      if (unavailable_since == Clock::time_point::max()) {
        unavailable_since = Clock::now();
        err_ << "drover run: " << now.status().message() << "; the nodes go on without etcd for "
             << os::SecondsText(o_.etcd.unavailable_timeout) << "\n";
      }
      if (Clock::now() - unavailable_since > o_.etcd.unavailable_timeout + o_.etcd.lease_ttl) {
        AwaitAgents(o_.grace + kExitSlack);
        return Fail("lost etcd: " + now.status().message());
      }
      std::this_thread::sleep_for(kPollInterval);
      continue;
    }
    unavailable_since = Clock::time_point::max();
    Report(*now);
    PublishStatus(*now);
    if (now->phase == "stopped") {
      const bool failed = now->stop_reason.rfind("failed: ", 0) == 0;
      if (failed) {
        Relay();
        SayFailure(*now);  // now: a caller feeding the nodes stops at once
      }
      AwaitAgents(o_.grace + kExitSlack);
      AwaitLastStatuses(o_.grace + kExitSlack);
      if (failed) return Fail("the run failed: " + now->stop_reason.substr(8));
      err_ << "drover run: the run at " << o_.address << " finished: " << now->stop_reason << "\n"
           << std::flush;
      return 0;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Status EtcdWatch::StartStatusServer() {
  if (o_.status_port < 0) return Status::Ok();
  StatusPageOptions page;
  page.server.address = o_.status_address;
  page.server.port = o_.status_port;
  page.server.allowed_hosts = o_.status_hosts;
  page.log_dir = run_dir_;
  page.cluster_id = "etcd-" + RunName(o_.address);
  page.started_at_unix = started_at_unix_;
  page.live_runs_dir = o_.live_runs_dir;
  // No cluster token in an etcd run: the status key derives from one of
  // this driver's own.
  DROVER_ASSIGN_OR_RETURN(ClusterToken token, ClusterToken::Generate());
  DROVER_ASSIGN_OR_RETURN(StatusPage started,
                          StartStatusPage(std::move(page), token, status_, err_));
  status_server_ = std::move(started.server);
  if (o_.on_status_page) o_.on_status_page(status_server_->url());
  return Status::Ok();
}

void EtcdWatch::PublishStatus(const ClusterState& state) {
  RunSnapshot snapshot;
  snapshot.cluster_id = "etcd-" + RunName(o_.address);
  snapshot.phase = state.phase == "formed" ? "running" : state.phase;
  snapshot.engine = "etcd";
  snapshot.command = command_;
  snapshot.log_dir = run_dir_;
  snapshot.started_at_unix = started_at_unix_;
  snapshot.elapsed_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  snapshot.round = state.round;
  snapshot.round_reason = state.round_reason;
  snapshot.max_restarts = o_.etcd.max_restarts;
  snapshot.registered = state.registered;
  snapshot.expected = state.expected;
  snapshot.rendezvous_s = state.rendezvous_s;
  for (const NodeStatus& status : state.nodes) {
    const NodeInfo& node = status.node;
    NodeSnapshot out;
    // A node has a role only in a formed round, which gives its placement.
    if (status.placement) {
      out.chief = status.placement->chief;
      if (status.placement->rank) out.rank = status.placement->rank->rank;
    }
    out.executor_id = node.executor_id;
    out.job = node.job_name;
    out.task_index = node.task_index;
    out.host = node.host;
    out.ports = node.ports;
    out.pid = node.pid;
    out.gpus = node.gpus;
    out.program_pid = status.program_pid;
    out.restarts = state.round;
    out.state = EtcdNodeState(status, state.phase);
    out.error = status.error;
    if (const std::optional<ProgramEnd>& end = status.program_end) {
      out.exited = true;
      out.exit_code = end->exit_code;
      out.exit_signal = end->signal;
      out.exit_text = end->text;
      out.runtime_s = end->runtime_s;
    }
    out.feed = status.feed;
    out.metrics = status.metrics;
    if (out.feed) {
      std::tie(out.records_per_s, out.bytes_per_s) =
          rates_[out.executor_id].Add(snapshot.elapsed_s, out.feed->records, out.feed->bytes);
    }
    if (!out.job.empty() && !node.ports.empty()) {
      json& tasks = snapshot.cluster_spec[out.job];
      if (!tasks.is_array()) tasks = json::array();
      while (static_cast<int>(tasks.size()) <= out.task_index) tasks.push_back("");
      if (out.task_index >= 0) {
        tasks[static_cast<size_t>(out.task_index)] =
            node.host + ":" + std::to_string(node.ports.front());
      }
    }
    if (!out.metrics.empty() && (snapshot.metrics.empty() || out.job == "chief")) {
      snapshot.metrics_task = out.Task();
      snapshot.metrics = out.metrics;
    }
    if (!out.metrics.empty()) status_.AddMetrics(out.Task(), snapshot.elapsed_s, out.metrics);
    snapshot.nodes.push_back(std::move(out));
  }
  bool fed = false;
  for (const NodeSnapshot& node : snapshot.nodes) fed = fed || node.feed.has_value();
  if (fed) snapshot.feed = SumFeeds(snapshot.nodes);
  status_.Publish(std::move(snapshot));
}

int EtcdWatch::Finish(int code) {
  RunSnapshot snapshot = status_.Snapshot();
  if (snapshot.nodes.empty()) return code;  // never saw the run formed
  snapshot.phase = code == 0 ? "succeeded" : (code > 128 ? "interrupted" : "failed");
  snapshot.exit_code = code;
  snapshot.elapsed_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  if (snapshot.feed) {
    snapshot.feed->records_per_s = snapshot.feed->bytes_per_s = 0;
    snapshot.feed->eta_s.reset();
    snapshot.feed->epoch_eta_s.reset();
  }
  for (NodeSnapshot& node : snapshot.nodes) node.records_per_s = node.bytes_per_s = 0;
  status_.Publish(snapshot);
  json record = SnapshotToJson(snapshot);
  record["metric_history"] = status_.MetricHistoryJson();
  const fs::path path = fs::path(run_dir_) / "run.json";
  std::ofstream out(path, std::ios::trunc);
  out << record.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  if (!out.flush()) err_ << "drover run: cannot write " << path.string() << "\n" << std::flush;
  return code;
}

}  // namespace

std::string EtcdNodeState(const NodeStatus& node, const std::string& phase) {
  // As without etcd: a node stopped at the run's end is "stopped".
  return StoppedAtRunEnd(node)  ? "stopped"
         : node.left            ? "finished"
         : !node.error.empty()  ? (node.alive || node.reported ? "failed" : "lost")
         : phase == "formed"    ? "running"
         : phase == "reserving" ? "registered"
                                : "stopped";
}

bool StoppedAtRunEnd(const NodeStatus& node) {
  return node.left &&
         (node.ended_before_start || (node.program_end && node.program_end->exit_code != 0));
}

int RunThroughEtcd(const EtcdDriverOptions& options, std::ostream& out, std::ostream& err) {
  EtcdWatch watch(options, out, err);
  return watch.Run();
}

}  // namespace drover

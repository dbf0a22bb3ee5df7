#include "drover/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "agent/feed_service.h"
#include "agent/node_link.h"
#include "agent/output_tail.h"
#include "agent/port_reservation.h"
#include "agent/process_guard.h"
#include "common/mutex.h"
#include "drover/data_feed.h"
#include "drover/framework_env.h"
#include "drover/node_context.h"
#include "drover/placement.h"
#include "feed/etcd_feed_ledger.h"
#include "os/fd_io.h"
#include "os/find_program.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"
#include "rendezvous/etcd_connect.h"
#include "report/metrics_inbox.h"

namespace drover {
namespace {

namespace fs = std::filesystem;

// An IP address in binary, so that two spellings of one IPv6 address match;
// nullopt when `text` is not an IP address.
std::optional<std::pair<int, in6_addr>> ParseIp(const std::string& text) {
  in6_addr bytes{};  // large enough for either family
  if (::inet_pton(AF_INET, text.c_str(), &bytes) == 1) return std::make_pair(AF_INET, bytes);
  if (::inet_pton(AF_INET6, text.c_str(), &bytes) == 1) return std::make_pair(AF_INET6, bytes);
  return std::nullopt;
}

// The name of the non-loopback interface that holds `address` ("" when none
// does, or it is not an IP address).
std::string InterfaceOf(const std::string& address,
                        const std::vector<InterfaceAddress>& interfaces) {
  const std::optional<std::pair<int, in6_addr>> wanted = ParseIp(address);
  if (!wanted) return "";
  for (const InterfaceAddress& interface : interfaces) {
    if (interface.loopback) continue;
    std::optional<std::pair<int, in6_addr>> held = ParseIp(interface.address);
    if (held && held->first == wanted->first &&
        std::memcmp(&held->second, &wanted->second, sizeof(in6_addr)) == 0) {
      return interface.name;
    }
  }
  return "";
}

// A socket and its private directory as plain arrays, for a signal handler
// to remove (unlink and rmdir are async-signal-safe) when the agent exits
// before its program started.
struct SocketDirForSignals {
  char dir[64] = {};
  char socket[108] = {};  // sockaddr_un's sun_path
  std::atomic<bool> ready{false};

  void Set(const std::string& dir_path, const std::string& socket_path) {
    std::snprintf(dir, sizeof(dir), "%s", dir_path.c_str());
    std::snprintf(socket, sizeof(socket), "%s", socket_path.c_str());
    ready = true;
  }
  void RemoveNow() {
    if (!ready.load()) return;
    ::unlink(socket);
    ::rmdir(dir);
  }
};

constexpr size_t kTailLines = 20;
// The agent waits this much longer than the reservation timeout, so that the
// server's message (naming the missing nodes) arrives first.
constexpr Milliseconds kRegisterSlack{5'000};
// How long output may keep coming after the program's group is gone (from a
// process that left the group but holds the pipe), and how long the agent's
// reader may take nothing before the rest of the output is dropped.
constexpr Milliseconds kDrainLimit{1'000};
// How long the agent waits for the server to take a failure report.
constexpr Milliseconds kReportTimeout{5'000};
// How long after SIGKILL the agent waits for the group to be reaped.
constexpr Milliseconds kReapLimit{2'000};
// How long the process guard may take to start the program (an exec, a
// sanitizer's start-up, a slow disk).
constexpr Milliseconds kGuardStart{60'000};
// How much longer than the grace time the agent gives the guard to stop the
// program's tree before it SIGKILLs the guard.
constexpr Milliseconds kGuardSlack{1'000};
// How long one of the agent's own lines may wait for a reader.
constexpr Milliseconds kSayLimit{2'000};
// Recording a commit in the driver: one KV round trip.
constexpr Milliseconds kCommitWait{30'000};

// Writes what it can of `data` to `fd` until `deadline`; a reader that
// stopped reading (or a closed stdout) must not stop the supervision.
// Returns how many bytes went.
size_t WriteAll(int fd, const char* data, size_t size, Clock::time_point deadline) {
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, data + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      const auto left = std::chrono::ceil<Milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
      continue;
    }
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  return written;
}

// As WriteAll, for a reader that keeps reading however slowly (a driver
// busy with a flood of output, under load): gives up only once it took
// nothing for `idle` (a reader that stopped reading, or is gone).
void WriteAllWhileTaken(int fd, const char* data, size_t size, Milliseconds idle) {
  while (size > 0) {
    const size_t written = WriteAll(fd, data, size, Clock::now() + idle);
    if (written == 0) return;
    data += written;
    size -= written;
  }
}

// Where one of the program's streams goes (the agent's stdout or stderr),
// written without blocking: while the reader (the driver, ssh) is slow, the
// program's output waits in its pipe (back-pressure) and the agent stays
// free to handle STOP and signals.
class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {
    if (fd_ >= 0) os::SetNonBlocking(fd_);
  }
  int fd() const { return fd_; }
  bool has_room() const { return pending_.size() < kRoom; }
  bool pending() const { return !pending_.empty(); }
  void Write(std::string_view data) {
    pending_.append(data);
    Flush();
  }
  void Flush() {
    while (!pending_.empty()) {
      ssize_t n = ::write(fd_, pending_.data(), pending_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {  // a closed stdout: nothing more can go there
        pending_.clear();
        return;
      }
      pending_.erase(0, static_cast<size_t>(n));
    }
  }
  // Writes everything pending while the reader takes it; what is left once
  // it took nothing for `idle` is dropped.
  void FlushWhileTaken(Milliseconds idle) {
    WriteAllWhileTaken(fd_, pending_.data(), pending_.size(), idle);
    pending_.clear();
  }

 private:
  static constexpr size_t kRoom = 256 << 10;
  int fd_;
  std::string pending_;
};

std::string JoinInts(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(values[i]);
  }
  return out;
}

// An executor id as a file name component.
std::string FileSafe(const std::string& id) {
  std::string out = id;
  for (char& c : out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  }
  return out;
}

Result<std::string> MakeAbsolute(const std::string& dir, const char* what) {
  std::error_code error;
  fs::path path = dir.empty() ? fs::current_path(error) : fs::absolute(dir, error);
  if (error)
    return Status::IoError(std::string("cannot resolve the ") + what + ": " + error.message());
  return path.lexically_normal().string();
}

Status EnsureDirectory(const std::string& dir, const char* what) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir)) {
    return Status::IoError(std::string("cannot create the ") + what + " " + dir + ": " +
                           (error ? error.message() : "not a directory"));
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << contents << "\n";
    if (!out.flush()) return Status::IoError("cannot write the context file " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    std::remove(temp.c_str());
    return Status::IoError("cannot write the context file " + path + ": " + std::strerror(saved));
  }
  return Status::Ok();
}

// The agent authenticates as its own node only, whatever it was given: the
// cluster token (a node started by hand) gives it the node's credential.
Result<Credential> OwnCredential(const Credential& given, const std::string& executor_id) {
  switch (given.kind) {
    case Credential::Kind::kCluster:
      return Credential::ForNode(ClusterToken{given.key}, executor_id);
    case Credential::Kind::kNode:
      if (given.executor_id != executor_id) {
        return Status::InvalidArgument("the credential given is " + given.Describe() +
                                       ", not executor " + executor_id + "'s");
      }
      return given;
    case Credential::Kind::kStatus:
      break;
  }
  return Status::InvalidArgument(
      "the status key cannot join a cluster: give the cluster token or this node's credential");
}

}  // namespace

class Agent::Impl {
 public:
  Impl(AgentOptions options, const Environment& env)
      : options_(std::move(options)),
        env_(env),
        through_etcd_(options_.rendezvous_address.rfind("etcd://", 0) == 0) {
    // Nodes formed through etcd re-form among themselves: always elastic.
    if (through_etcd_) options_.elastic = true;
    event_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    quit_watcher_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  }
  ~Impl() {
    feed_.reset();
    metrics_.reset();
    std::error_code ignored;
    if (!feed_dir_.empty()) fs::remove_all(feed_dir_, ignored);
    if (!report_dir_.empty()) fs::remove_all(report_dir_, ignored);
  }

  int Run();

  bool Interrupt(int signal) {
    int expected = 0;
    interrupt_signal_.compare_exchange_strong(expected, signal);
    Notify();
    const bool started = started_.load();
    if (!started) {
      // The caller (a signal handler) exits now: leave no socket directory
      // behind.
      feed_dir_for_signals_.RemoveNow();
      report_dir_for_signals_.RemoveNow();
    }
    return started;
  }

 private:
  enum class Reason { kNone, kExited, kStopped, kInterrupted, kLost, kFeedFailed, kReform };
  // The round an elastic driver started next (REFORM).
  struct NextRound {
    int round = 0;
    std::string reason;
  };
  // How a round ended: the process exit code, or the next round.
  struct RoundEnd {
    RoundEnd() = default;
    RoundEnd(int exit_code) : code(exit_code) {}  // NOLINT: every `return code;` in a round
    int code = 0;
    std::optional<NextRound> next;
  };
  // One round: reserve ports, register, run the program to its end.
  RoundEnd RunRound(NodeLink& link, int round, const std::string& restart_reason);
  // Clears what the last round left: its feed, its metrics inbox, its flags.
  void StartRound();
  RoundEnd TakeReform();
  // After the program ended and the server was told: in an elastic run,
  // waits for the driver's REFORM (the next round) or STOP (`code`).
  RoundEnd AwaitNextRound(NodeLink& link, int code);
  bool ReformRequested() {
    MutexLock lock(mu_);
    return reform_.has_value();
  }

  void Notify() { os::SignalEventFd(event_fd_.get()); }

  int Fail(const Status& status) {
    Say(status.message());
    return 1;
  }
  void Say(const std::string& message) {
    std::string line = "drover agent " + options_.executor_id + ": " + message + "\n";
    WriteAll(options_.stderr_fd, line.data(), line.size(), Clock::now() + kSayLimit);
  }

  Result<std::map<std::string, std::string>> BuildEnvironment(const FormedCluster& cluster,
                                                              const NodeContext& context,
                                                              const std::string& context_path);
  // Forwards the program's output and supervises it to its end.
  Reason Supervise(os::Subprocess& child, OutputTail& tail, os::ExitStatus* status);
  // Reads one chunk of the program's output pipe `stream` into its sink;
  // false at EOF.
  bool Forward(os::Subprocess& child, int stream, OutputTail& tail, OutputSink& sink);
  void WatchForStop(NodeLink* link);
  // REPORT_ERROR, flushed (NodeLink::ReportError); says so when it fails.
  void Report(NodeLink& link, const std::string& message,
              const std::vector<std::string>& last_lines);
  // LEAVE (the program finished; not a death), flushed the same way.
  void LeaveCluster(NodeLink& link);
  // The run ended after forming with this node, before it started anything
  // (Register's kCancelled, `why`): the node leaves as stopped, and exits as
  // a node stopped at the run's end would.
  int EndedBeforeStart(NodeLink& link, const Status& why);
  // Starts feeding this node when the run has a feed plan and the node gets a
  // share of it; sets DROVER_FEED_SOCKET in *env.
  Status StartFeeding(const FormedCluster& cluster, const std::string& task,
                      std::map<std::string, std::string>* env);
  // The connection that records commits and claims (feed_'s loop thread
  // only), made when first needed.
  Result<RendezvousClient*> CommitClient(Deadline deadline);
  // Runs through etcd: the feed's ledger (made when first needed), the plan
  // given to this agent published there, and each round's plan read from it.
  Result<feed::EtcdFeedLedger*> EtcdLedger(Deadline deadline);
  Status PublishEtcdPlan();
  Status LoadEtcdRoundPlan(int round);
  // Claims and commits through the rendezvous store (the built-in server)
  // or through etcd's ledger.
  void RecordFeedThroughStore(int share, FeedServiceOptions* feed);
  void RecordFeedThroughEtcd(int round, int share, FeedServiceOptions* feed);
  // options_.drover_binary, else this executable: runs `drover guard` and
  // `drover feeder`.
  Result<std::string> DroverBinary() const;
  // Reads the plan (inline or from its file) and, for an external plan,
  // makes the feed socket's directory; sets node->feed_socket.
  Status PrepareFeeding(NodeInfo* node);
  // Makes the metrics inbox (drover::Report) in a private directory; sets
  // DROVER_REPORT_SOCKET in *env.
  Status OpenMetricsInbox(std::map<std::string, std::string>* env);

  AgentOptions options_;
  const Environment& env_;  // variables, host name and interfaces come only from here
  const bool through_etcd_;
  os::UniqueFd event_fd_;
  // Written once when supervision ends: the STOP watcher blocks on the
  // connection and this, with no timeout, so an idle agent does not wake.
  os::UniqueFd quit_watcher_fd_;
  std::atomic<int> interrupt_signal_{0};
  std::atomic<bool> started_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> connection_lost_{false};
  std::atomic<bool> feed_failed_{false};
  Mutex mu_;
  std::string lost_reason_ GUARDED_BY(mu_);
  std::optional<NextRound> reform_ GUARDED_BY(mu_);
  // Why the run failed, when a STOP said so (etcd runs): the agent exits 1
  // with it even when its own program succeeded.
  std::string run_failure_ GUARDED_BY(mu_);
  // Held while feed_ and metrics_ are replaced between rounds and while the
  // heartbeat thread reads them.
  Mutex round_mu_;
  std::unique_ptr<FeedService> feed_;
  // This round's program, once it ended (HeartbeatPayload::program_end).
  std::optional<ProgramEnd> program_end_;
  // The feed's commits go to the driver on a connection of their own
  // (made when the first comes; feed_'s loop thread only): the main
  // client's reads belong to the stop watcher.
  RendezvousClientOptions commit_options_;
  std::unique_ptr<RendezvousClient> commit_client_;
  // Made on the main thread before the first feed starts; thread-safe.
  std::unique_ptr<feed::EtcdFeedLedger> ledger_;
  // The feed plan, read before registering; its error is reported once the
  // node has registered, as any failure to start feeding.
  std::optional<Result<feed::FeedPlan>> plan_;
  // An external plan's socket directory (0700, made before registering;
  // removed with the agent) and copies of its paths for Interrupt().
  std::string feed_dir_;
  SocketDirForSignals feed_dir_for_signals_;
  // The program's reports (drover::Report), read by the heartbeat thread;
  // their directory (0700) and copies of its paths for Interrupt().
  std::unique_ptr<report::MetricsInbox> metrics_;
  std::string report_dir_;
  SocketDirForSignals report_dir_for_signals_;
};

int Agent::Impl::Run() {
  const AgentOptions& o = options_;
  // A host's node takes its place on the host's connection first: however
  // Run ends, the link's end then tells the host's other nodes not to wait
  // for this one to register.
  std::unique_ptr<NodeLink> link;
  if (o.host_connection) {
    if (through_etcd_ || o.elastic) {
      return Fail(Status::InvalidArgument(
          "a host connection is for a driver's HOST:PORT rendezvous in a run that is not "
          "elastic"));
    }
    Result<std::unique_ptr<NodeLink>> linked = LinkThroughHost(*o.host_connection, o.executor_id);
    if (!linked.ok()) return Fail(linked.status());
    link = std::move(linked).value();
  }
  if (o.executor_id.empty()) return Fail(Status::InvalidArgument("no executor id given"));
  if (o.command.empty()) return Fail(Status::InvalidArgument("no command to run after `--`"));
  if (!event_fd_.valid() || !quit_watcher_fd_.valid())
    return Fail(Status::IoError(std::string("eventfd: ") + std::strerror(errno)));
  if (o.exit_with_parent > 0) {
    // SIGTERM when the parent dies: the agent stops its program as for any
    // SIGTERM. A parent that died before this line is not watched, so check.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != o.exit_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, 0);
      return Fail(Status::Unavailable("the process that started this agent (--exit-with-parent " +
                                      std::to_string(o.exit_with_parent) +
                                      ") is gone; parent now " + std::to_string(::getppid())));
    }
  }
  if (!o.feed_plan.empty() && !o.feed_plan_json.empty()) {
    return Fail(Status::InvalidArgument("give the feed plan as a file or inline, not both"));
  }

  // The program's orphans become ours, so its process group empties as soon
  // as they die (Subprocess reaps them) rather than when init gets to them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  RendezvousClientOptions client_options;
  client_options.address = o.rendezvous_address;
  if (through_etcd_) {
    if (!o.feed_plan.empty() || !o.feed_plan_json.empty()) {
      if (Status published = PublishEtcdPlan(); !published.ok()) return Fail(published);
    }
    client_options.etcd = o.etcd;
  } else {
    Result<Credential> credential = OwnCredential(o.credential, o.executor_id);
    if (!credential.ok()) return Fail(credential.status());
    client_options.credential = std::move(credential).value();
  }
  client_options.name = o.executor_id;
  client_options.node_list = o.node_list;
  commit_options_ = client_options;
  if (!link) {
    Result<std::unique_ptr<NodeLink>> connected = ConnectNode(
        client_options, o.executor_id, Clock::now() + o.reservation_timeout + kRegisterSlack);
    if (!connected.ok()) return Fail(connected.status());
    link = std::move(connected).value();
  }

  // Elastic runs: the same connection registers again for every round the
  // driver starts (REFORM), until a round ends the node.
  int round = o.restart_count;
  std::string reason = o.restart_reason;
  for (;;) {
    RoundEnd end = RunRound(*link, round, reason);
    if (!end.next) return end.code;
    round = end.next->round;
    reason = end.next->reason;
    Say("re-registering for round " + std::to_string(round) + " (" + reason + ")");
  }
}

Agent::Impl::RoundEnd Agent::Impl::RunRound(NodeLink& link, int round,
                                            const std::string& restart_reason) {
  const AgentOptions& o = options_;
  StartRound();
  Result<PortReservation> reserved = PortReservation::Reserve(o.num_ports);
  if (!reserved.ok()) return Fail(reserved.status());
  PortReservation ports = std::move(reserved).value();
  const Deadline deadline = Clock::now() + o.reservation_timeout + kRegisterSlack;

  NodeInfo node;
  node.executor_id = o.executor_id;
  node.host = o.host.empty() ? env_.HostName() : o.host;
  for (int port : ports.ports()) node.ports.push_back(static_cast<uint32_t>(port));
  node.pid = static_cast<int32_t>(::getpid());
  if (o.gpus) node.gpus.assign(o.gpus->begin(), o.gpus->end());
  if (Status prepared = PrepareFeeding(&node); !prepared.ok()) return Fail(prepared);
  Result<FormedCluster> formed = link.Register(node, deadline);
  if (through_etcd_ && formed.status().code() == Status::Code::kCancelled) {
    return EndedBeforeStart(link, formed.status());
  }
  if (!formed.ok()) return Fail(formed.status());
  const FormedCluster& cluster = *formed;
  const Placement& own = *cluster.own();  // a client's cluster always places it
  // Alive from the barrier on: preparing and starting the program (under
  // `drover guard`) can outlast the server's patience on a slow host. The
  // program's pid and the feed's counters join once the program runs.
  link.StartHeartbeats(cluster.heartbeat_interval);
  const std::string task = own.Task();

  NodeContext context;
  context.executor_id = o.executor_id;
  context.job_name = own.job;
  context.task_index = own.index;
  context.cluster_spec = cluster.spec;
  context.cluster_id = cluster.cluster_id;
  context.ports = ports.ports();
  context.port = context.ports.front();
  Result<std::string> working_dir = MakeAbsolute(o.working_dir, "working directory");
  if (!working_dir.ok()) return Fail(working_dir.status());
  context.working_dir = *working_dir;
  if (!o.log_dir.empty()) {
    Result<std::string> log_dir = MakeAbsolute(o.log_dir, "log directory");
    if (!log_dir.ok()) return Fail(log_dir.status());
    context.log_dir = *log_dir;
    if (Status made = EnsureDirectory(context.log_dir, "log directory"); !made.ok()) {
      return Fail(made);
    }
  }
  if (!o.working_dir.empty()) {
    if (Status made = EnsureDirectory(context.working_dir, "working directory"); !made.ok()) {
      return Fail(made);
    }
  }
  // A joiner learns the round from the cluster it joins.
  context.restart_count = std::max(round, cluster.round);
  context.restart_reason = cluster.round > round ? cluster.round_reason : restart_reason;
  auto workers = cluster.job_sizes.find("worker");
  context.num_workers = workers == cluster.job_sizes.end() ? 0 : workers->second;
  if (!cluster.has_node_list) {
    Say(task + " did not get the node list (" + std::to_string(cluster.node_count) +
        " nodes, --node-list " + std::string(NodeListName(o.node_list)) +
        "): TF_CONFIG and DROVER_CLUSTER_SPEC are not set; --node-list always sets them");
  }
  context.is_chief = own.chief;

  // The context file: beside the program's files, else the logs, else /tmp.
  std::string context_dir = !o.working_dir.empty() ? context.working_dir
                            : !o.log_dir.empty()   ? context.log_dir
                                                   : fs::temp_directory_path().string();
  const bool temporary_context = o.working_dir.empty() && o.log_dir.empty();
  std::string context_path =
      (fs::path(context_dir) / ("drover-context-" + FileSafe(o.executor_id) + ".json")).string();
  if (Status written = WriteFileAtomically(context_path, context.ToJson(2)); !written.ok()) {
    return Fail(written);
  }

  Result<std::map<std::string, std::string>> env = BuildEnvironment(cluster, context, context_path);
  if (!env.ok()) return Fail(env.status().WithContext(task));
  if (Status feeding = StartFeeding(cluster, task, &*env); !feeding.ok()) {
    std::string message = task + " could not start feeding: " + feeding.message();
    Report(link, message, {});
    return Fail(Status::InvalidArgument(message));
  }
  // Reports are worth a warning, not the run.
  if (Status opened = OpenMetricsInbox(&*env); !opened.ok()) {
    Say(opened.message() + "; drover.report will do nothing on " + task);
  }
  Result<std::string> drover_binary = DroverBinary();
  if (!drover_binary.ok()) return Fail(drover_binary.status());
  const std::string guard_binary = os::GuardBinaryBeside(*drover_binary);
  Result<os::Pipe> report = os::MakePipe(O_CLOEXEC);
  if (!report.ok()) return Fail(report.status());
  os::SubprocessOptions spawn;
  // The program runs under `drover guard` (drover-guard where it is
  // installed), which stops every process it starts, and stops them all if
  // this agent dies (its death signal).
  spawn.argv = {guard_binary,  "guard",
                "--grace",     std::to_string(static_cast<double>(o.grace.count()) / 1000.0),
                "--report-fd", std::to_string(report->write.get()),
                "--"};
  const std::string feed_dir =
      feed_ ? fs::path(feed_->socket_path()).parent_path().string() : feed_dir_;
  for (const std::string& path :
       {feed_dir, report_dir_, temporary_context ? context_path : std::string()}) {
    if (!path.empty()) spawn.argv.insert(spawn.argv.end() - 1, {"--remove-at-exit", path});
  }
  spawn.argv.insert(spawn.argv.end(), o.command.begin(), o.command.end());
  spawn.keep_fds = {report->write.get()};
  spawn.parent_death_signal = SIGTERM;
  spawn.env.emplace();
  for (const auto& [name, value] : *env) spawn.env->push_back(name + "=" + value);
  spawn.working_dir = o.working_dir.empty() ? "" : context.working_dir;
  spawn.pipe_output = true;

  started_ = true;
  if (int signal = interrupt_signal_.load(); signal != 0) return 128 + signal;
  ports.Release();
  const Clock::time_point program_started = Clock::now();
  Result<os::Subprocess> spawned = os::Subprocess::Spawn(spawn);
  // The guard's copy is the only writer left: its death is an end of file.
  report->write.Reset();
  Result<int> program_pid = spawned.ok()
                                ? ReadGuardReport(report->read.get(), Clock::now() + kGuardStart)
                                : Result<int>(spawned.status());
  report->read.Reset();
  if (!program_pid.ok()) {
    std::string message = task + " could not start: " + program_pid.status().message();
    Report(link, message, {});
    return Fail(Status::NotFound(message));
  }
  os::Subprocess child = std::move(spawned).value();
  // feed_ outlives the link (and so its heartbeats): ~Impl resets it.
  // This sends the first heartbeat with the pid and the feed at once.
  link.StartHeartbeats(cluster.heartbeat_interval, [this, program_pid = *program_pid] {
    HeartbeatPayload payload;
    payload.program_pid = program_pid;
    MutexLock lock(round_mu_);
    payload.program_end = program_end_;
    if (feed_) payload.feed = feed_->Progress();
    if (metrics_) {
      payload.metrics = metrics_->Latest();
      payload.change_fd = metrics_->change_fd();
    }
    // A feed's counters move in the program's process, unannounced.
    payload.changes_announced = !feed_;
    return payload;
  });
  std::thread watcher([this, &link] { WatchForStop(&link); });

  OutputTail tail(kTailLines);
  os::ExitStatus status = os::ExitStatus::Exited(0);
  Reason reason = Supervise(child, tail, &status);
  {
    MutexLock lock(round_mu_);
    program_end_ =
        ProgramEnd{status.exit_code(), status.signal(), status.ToString(),
                   std::chrono::duration<double>(Clock::now() - program_started).count()};
  }
  os::SignalEventFd(quit_watcher_fd_.get());
  watcher.join();
  if (temporary_context) std::remove(context_path.c_str());

  // A program that met the feed's error (a bad record) fails at once, often
  // before the service has reaped the feeder that stopped the feed: the node
  // failed with that error, and exits with the program's code.
  const Status feed_failure =
      reason == Reason::kExited && !status.success() && feed_ ? feed_->Failure() : Status::Ok();
  if (feed_ && !(reason == Reason::kExited && status.success())) feed_->Stop(task + " stopped");
  if (!feed_failure.ok()) {
    Report(link, feed_failure.message(), tail.Lines());
    return AwaitNextRound(link, status.ShellCode());
  }
  switch (reason) {
    case Reason::kFeedFailed:
      // The service keeps what it reported (on_failure), Stop or not.
      Report(link, feed_->Failure().message(), tail.Lines());
      return AwaitNextRound(link, 1);
    case Reason::kInterrupted:
      return 128 + interrupt_signal_.load();
    case Reason::kStopped: {
      LeaveCluster(link);
      MutexLock lock(mu_);
      if (run_failure_.empty()) return 0;
      Say("the run failed: " + run_failure_);
      return 1;
    }
    case Reason::kReform:
      return TakeReform();
    case Reason::kLost: {
      MutexLock lock(mu_);
      Say("lost the rendezvous server (" + lost_reason_ + "); stopped " + task + ", which " +
          (status.signaled() ? "was " + status.ToString() : "exited with " + status.ToString()));
      return 1;
    }
    case Reason::kExited:
    case Reason::kNone:
      break;
  }
  if (status.success() && feed_) {
    if (Status finished = feed_->Finish(); !finished.ok()) {
      Report(link, finished.message(), tail.Lines());
      return AwaitNextRound(link, 1);
    }
  }
  if (status.success()) {
    LeaveCluster(link);
    // Elastic: the node stays a member until the run ends, so that a node
    // lost after this one finished can still re-form the group with it.
    return AwaitNextRound(link, 0);
  }
  std::string message = task + (status.signaled() ? " " : " exited with ") + status.ToString();
  Report(link, message, tail.Lines());
  return AwaitNextRound(link, status.ShellCode());
}

void Agent::Impl::StartRound() {
  started_ = false;
  stop_requested_ = false;
  feed_failed_ = false;
  os::DrainEventFd(quit_watcher_fd_.get());
  {
    MutexLock lock(mu_);
    reform_.reset();
  }
  std::unique_ptr<FeedService> feed;
  std::unique_ptr<report::MetricsInbox> metrics;
  {
    // The heartbeat thread reads both under round_mu_.
    MutexLock lock(round_mu_);
    feed = std::move(feed_);
    metrics = std::move(metrics_);
    program_end_.reset();
  }
  feed.reset();
  metrics.reset();
  plan_.reset();
  std::error_code ignored;
  if (!report_dir_.empty()) fs::remove_all(report_dir_, ignored);
  report_dir_.clear();
  // Each round makes its own (PrepareFeeding, StartFeeding).
  feed_dir_for_signals_.ready = false;
  if (!feed_dir_.empty()) fs::remove_all(feed_dir_, ignored);
  feed_dir_.clear();
}

Agent::Impl::RoundEnd Agent::Impl::TakeReform() {
  MutexLock lock(mu_);
  RoundEnd end;
  end.next = reform_;
  return end;
}

Agent::Impl::RoundEnd Agent::Impl::AwaitNextRound(NodeLink& link, int code) {
  if (!options_.elastic) return code;
  // The program ended with its agent alive: the driver starts the next
  // round (REFORM) or ends the run (STOP); a signal ends the wait. The stop
  // watcher may have taken the REFORM already, as the program was ending.
  if (ReformRequested()) return TakeReform();
  for (;;) {
    Result<RendezvousClient::Instruction> told =
        link.WaitForInstruction(Clock::time_point::max(), event_fd_.get());
    if (!told.ok()) {
      // The built-in driver closing its connection ends the run. Through
      // etcd the peers may still re-form or fail the run: this node cannot
      // know, so it does not claim success.
      if (!through_etcd_) return code;
      Say("cannot learn how the run ends: " + told.status().message());
      return code != 0 ? code : 1;
    }
    if (int signal = interrupt_signal_.load(); signal != 0) return 128 + signal;
    if (told->kind == RendezvousClient::Instruction::Kind::kStop) {
      if (!told->failed) return code;
      Say("the run failed: " + told->reason);
      return code != 0 ? code : 1;
    }
    if (told->kind == RendezvousClient::Instruction::Kind::kReform) {
      RoundEnd end;
      end.next = NextRound{told->round, told->reason};
      return end;
    }
    os::DrainEventFd(event_fd_.get());
  }
}

Status Agent::Impl::OpenMetricsInbox(std::map<std::string, std::string>* env) {
  std::error_code error;
  std::string temp = fs::temp_directory_path(error).string();
  // A socket's path has room for 107 bytes.
  if (error || temp.size() > 40) temp = "/tmp";
  std::string pattern = temp + "/drover-report-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::IoError("cannot make a directory for the metrics socket (" + pattern +
                           "): " + std::strerror(errno));
  }
  report_dir_ = pattern;
  const std::string socket_path = report_dir_ + "/metrics.sock";
  report_dir_for_signals_.Set(report_dir_, socket_path);
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<report::MetricsInbox> inbox,
                          report::MetricsInbox::Open(socket_path));
  MutexLock lock(round_mu_);
  metrics_ = std::move(inbox);
  (*env)["DROVER_REPORT_SOCKET"] = socket_path;
  return Status::Ok();
}

Result<std::string> Agent::Impl::DroverBinary() const {
  if (!options_.drover_binary.empty()) return options_.drover_binary;
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) return Status::IoError("cannot find the drover executable: " + error.message());
  // drover-agent has no `feeder` or `guard`: the drover installed beside it does.
  if (self.filename() == "drover-agent") self.replace_filename("drover");
  return self.string();
}

Status Agent::Impl::PrepareFeeding(NodeInfo* node) {
  if (!options_.feed_plan_json.empty()) {
    Result<feed::FeedPlan> plan = feed::FeedPlan::FromJson(options_.feed_plan_json);
    plan_ = plan.ok() ? std::move(plan) : plan.status().WithContext("--feed-plan-json");
  } else if (!options_.feed_plan.empty()) {
    plan_ = feed::FeedPlan::ReadFile(options_.feed_plan);
  }
  if (!plan_ || !plan_->ok() || !(*plan_)->external) return Status::Ok();
  // Writers find an external feed through the cluster (NodeInfo), so its
  // socket's place is known before the node registers.
  char dir[] = "/tmp/drover-feed-XXXXXX";
  if (::mkdtemp(dir) == nullptr) {
    return Status::IoError(std::string("cannot make the feed socket directory: ") +
                           std::strerror(errno));
  }
  feed_dir_ = dir;
  node->feed_socket = feed_dir_ + "/feed.sock";
  static_assert(sizeof(dir) <= sizeof(SocketDirForSignals::dir));
  feed_dir_for_signals_.Set(feed_dir_, node->feed_socket);
  return Status::Ok();
}

Result<RendezvousClient*> Agent::Impl::CommitClient(Deadline deadline) {
  if (!commit_client_) {
    DROVER_ASSIGN_OR_RETURN(commit_client_, RendezvousClient::Connect(commit_options_, deadline));
  }
  return commit_client_.get();
}

Result<feed::EtcdFeedLedger*> Agent::Impl::EtcdLedger(Deadline deadline) {
  if (!ledger_) {
    DROVER_ASSIGN_OR_RETURN(EtcdRunConnection run,
                            ConnectEtcdRun(options_.rendezvous_address, options_.etcd, deadline));
    ledger_ = std::make_unique<feed::EtcdFeedLedger>(std::move(run.client), run.prefix,
                                                     options_.etcd.unavailable_timeout);
  }
  return ledger_.get();
}

Status Agent::Impl::PublishEtcdPlan() {
  Result<feed::FeedPlan> plan = options_.feed_plan_json.empty()
                                    ? feed::FeedPlan::ReadFile(options_.feed_plan)
                                    : feed::FeedPlan::FromJson(options_.feed_plan_json);
  if (!plan.ok()) return plan.status();
  // An external plan (drover.Cluster.train) is each node's own: its writers
  // push into the node's socket, and etcd has no queue to keep for it.
  if (plan->external) return Status::Ok();
  const Deadline deadline = Clock::now() + options_.etcd.unavailable_timeout;
  DROVER_ASSIGN_OR_RETURN(feed::EtcdFeedLedger * ledger, EtcdLedger(deadline));
  return ledger->Publish(*plan, deadline);
}

Status Agent::Impl::LoadEtcdRoundPlan(int round) {
  // The first node of the round to get here works the queue out (from the
  // last round's commits); it has a while, as etcd may be slow to answer.
  const Deadline deadline = Clock::now() + options_.etcd.unavailable_timeout;
  DROVER_ASSIGN_OR_RETURN(feed::EtcdFeedLedger * ledger, EtcdLedger(deadline));
  Result<feed::EtcdFeedLedger::RoundPlan> got = ledger->PlanOfRound(round, deadline);
  if (got.status().code() == Status::Code::kNotFound) return Status::Ok();  // not fed
  if (!got.ok()) return got.status();
  if (!got->resumed.empty()) Say("the feed resumes after the last commits: " + got->resumed);
  plan_ = std::move(got->plan);
  return Status::Ok();
}

void Agent::Impl::RecordFeedThroughStore(int share, FeedServiceOptions* feed) {
  feed->record_commit = [this, share](const feed::FeedPosition& position) {
    const Deadline deadline = Clock::now() + kCommitWait;
    DROVER_ASSIGN_OR_RETURN(RendezvousClient * client, CommitClient(deadline));
    Status set = client->Set(feed::CommitKey(share), feed::FeedPositionToJson(position), deadline);
    if (!set.ok()) commit_client_.reset();  // connect again for the next one
    return set;
  };
  if (feed->plan.balance != feed::Balance::kDynamic) return;
  const uint64_t queue_size = feed::DynamicQueue(feed->plan).size();
  feed->claim_feed = [this, share, queue_size](uint32_t seq) -> Result<std::optional<uint64_t>> {
    const Deadline deadline = Clock::now() + kCommitWait;
    DROVER_ASSIGN_OR_RETURN(RendezvousClient * client, CommitClient(deadline));
    Result<int64_t> claimed = client->Add(feed::ClaimCounterKey(), 1, deadline);
    if (!claimed.ok()) {
      commit_client_.reset();
      return claimed.status().WithContext("claiming a partition from the driver");
    }
    if (*claimed < 1 || static_cast<uint64_t>(*claimed) > queue_size) {
      return std::optional<uint64_t>();
    }
    const uint64_t entry = static_cast<uint64_t>(*claimed) - 1;
    // Recorded so that the next round knows what this share took: an
    // entry claimed but not recorded (this agent died in between) is fed
    // again then.
    Status recorded = client->Set(feed::ClaimKey(share, seq), std::to_string(entry), deadline);
    if (!recorded.ok()) {
      commit_client_.reset();
      return recorded.WithContext("recording a claimed partition in the driver");
    }
    return std::optional(entry);
  };
}

void Agent::Impl::RecordFeedThroughEtcd(int round, int share, FeedServiceOptions* feed) {
  feed::EtcdFeedLedger* ledger = ledger_.get();
  feed->record_commit = [ledger, round, share](const feed::FeedPosition& position) {
    return ledger->Commit(round, share, position, Clock::now() + kCommitWait);
  };
  const uint64_t queue_size = feed::DynamicQueue(feed->plan).size();
  feed->claim_feed = [ledger, round, share,
                      queue_size](uint32_t seq) -> Result<std::optional<uint64_t>> {
    Result<std::optional<uint64_t>> claimed =
        ledger->Claim(round, share, seq, queue_size, Clock::now() + kCommitWait);
    if (!claimed.ok()) return claimed.status().WithContext("claiming a partition in etcd");
    return claimed;
  };
}

Status Agent::Impl::StartFeeding(const FormedCluster& cluster, const std::string& task,
                                 std::map<std::string, std::string>* env) {
  env->erase(kFeedSocketVariable);
  const std::optional<FeedShare>& share = cluster.own()->feed;
  if (through_etcd_ && share) {
    DROVER_RETURN_IF_ERROR(LoadEtcdRoundPlan(cluster.round));
  } else if (!options_.feed_plan.empty()) {
    // Read again now that the cluster formed: an elastic driver writes each
    // round's plan (the queue left after the last one) before it forms.
    plan_ = feed::FeedPlan::ReadFile(options_.feed_plan);
  }
  if (!plan_) return Status::Ok();
  if (!share) {  // ps and evaluator nodes are not fed
    feed_dir_for_signals_.ready = false;
    if (!feed_dir_.empty()) {
      std::error_code ignored;
      fs::remove_all(feed_dir_, ignored);
      feed_dir_.clear();
    }
    return Status::Ok();
  }
  if (!plan_->ok()) return plan_->status();
  FeedServiceOptions feed;
  feed.plan = **plan_;
  // Through etcd the round's plan is the ledger's, not the file's.
  feed.plan_path = through_etcd_ ? "" : options_.feed_plan;
  feed.socket_dir = feed_dir_;  // "" : the service makes its own
  if (feed.plan_path.empty() && !feed.plan.external) {
    // An inline plan from files: the feeder reads it from the socket's
    // directory, which goes with the service.
    char dir[] = "/tmp/drover-feed-XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
      return Status::IoError(std::string("cannot make the feed socket directory: ") +
                             std::strerror(errno));
    }
    feed_dir_ = feed.socket_dir = dir;
    feed.plan_path = feed_dir_ + "/plan.json";
    DROVER_RETURN_IF_ERROR(feed.plan.WriteFile(feed.plan_path));
  }
  feed.share = share->share;
  feed.shares = share->shares;
  feed.task = task;
  DROVER_ASSIGN_OR_RETURN(feed.drover_binary, DroverBinary());
  // A host's agent runs several nodes: each feeder's lines go with its node's.
  if (options_.stderr_fd != STDERR_FILENO) feed.output_fd = options_.stderr_fd;
  feed.say = [this, task](const std::string& message) { Say(task + ": " + message); };
  if (through_etcd_) {
    RecordFeedThroughEtcd(cluster.round, share->share, &feed);
  } else {
    RecordFeedThroughStore(share->share, &feed);
  }
  // What failed stays with the service (FeedService::Failure).
  feed.on_failure = [this](const Status&) {
    feed_failed_ = true;
    Notify();
  };
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<FeedService> service,
                          FeedService::Start(std::move(feed)));
  (*env)[kFeedSocketVariable] = service->socket_path();
  MutexLock lock(round_mu_);
  feed_ = std::move(service);
  return Status::Ok();
}

Result<std::map<std::string, std::string>> Agent::Impl::BuildEnvironment(
    const FormedCluster& cluster, const NodeContext& context, const std::string& context_path) {
  std::map<std::string, std::string> env = env_.Variables();
  // The placement says it all, torch's store port (rank 0's second port) too.
  // Without the node list there is no cluster to write into TF_CONFIG.
  FrameworkEnvOptions framework;
  framework.tensorflow = cluster.has_node_list;
  DROVER_ASSIGN_OR_RETURN(auto vars, FrameworkEnvironment(cluster.spec, *cluster.own(), framework));
  if (!cluster.has_node_list) {
    vars.erase("DROVER_CLUSTER_SPEC");
    env.erase("TF_CONFIG");
    env.erase("DROVER_CLUSTER_SPEC");
  }
  for (auto& [name, value] : vars) env[name] = value;
  env["DROVER_EXECUTOR_ID"] = context.executor_id;
  env["DROVER_CONTEXT_FILE"] = context_path;
  env["DROVER_PORT"] = std::to_string(context.port);
  env["DROVER_PORTS"] = JoinInts(context.ports);
  env["DROVER_RESTART_COUNT"] = std::to_string(context.restart_count);
  if (context.restart_reason.empty()) {
    env.erase("DROVER_RESTART_REASON");
  } else {
    env["DROVER_RESTART_REASON"] = context.restart_reason;
  }
  env["DROVER_CLUSTER_ID"] = context.cluster_id;
  env["DROVER_LOG_DIR"] = context.log_dir;
  env["DROVER_WORKING_DIR"] = context.working_dir;
  if (options_.gpus) env["CUDA_VISIBLE_DEVICES"] = JoinInts(*options_.gpus);
  // Gloo, NCCL and TensorPipe pick their interface from the host name, which
  // on many hosts resolves to 127.0.x.1: point them at the one holding the
  // node's cluster address, unless the user chose.
  if (std::string interface = InterfaceOf(options_.host, env_.InterfaceAddresses());
      !interface.empty()) {
    for (const char* name : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"}) {
      env.emplace(name, interface);
    }
  }
  return env;
}

void Agent::Impl::Report(NodeLink& link, const std::string& message,
                         const std::vector<std::string>& last_lines) {
  Status reported = link.ReportError(message, last_lines, Clock::now() + kReportTimeout);
  if (!reported.ok()) Say(message + "; could not report it: " + reported.message());
}

void Agent::Impl::LeaveCluster(NodeLink& link) {
  Status left = link.Leave(Clock::now() + kReportTimeout);
  // Best effort: the program has finished either way; at worst the driver
  // sees this node's connection close.
  if (!left.ok()) Say("could not tell the rendezvous this node finished: " + left.message());
}

int Agent::Impl::EndedBeforeStart(NodeLink& link, const Status& why) {
  Say(why.message() + "; its program is not started");
  Result<RendezvousClient::Instruction> told =
      link.WaitForInstruction(Clock::now() + kReportTimeout, -1);
  LeaveCluster(link);
  if (!told.ok() || told->kind != RendezvousClient::Instruction::Kind::kStop) {
    Say("cannot learn how the run ended: " +
        (told.ok() ? std::string("no STOP came") : told.status().message()));
    return 1;
  }
  if (!told->failed) return 0;
  Say("the run failed: " + told->reason);
  return 1;
}

void Agent::Impl::WatchForStop(NodeLink* link) {
  // No deadline: only a STOP, a REFORM, a lost connection or
  // quit_watcher_fd_ ends the wait.
  Result<RendezvousClient::Instruction> told =
      link->WaitForInstruction(Clock::time_point::max(), quit_watcher_fd_.get());
  if (!told.ok()) {
    {
      MutexLock lock(mu_);
      lost_reason_ = told.status().message();
    }
    connection_lost_ = true;
    Notify();
  } else if (told->kind == RendezvousClient::Instruction::Kind::kStop) {
    if (told->failed) {
      MutexLock lock(mu_);
      run_failure_ = told->reason;
    }
    stop_requested_ = true;
    Notify();
  } else if (told->kind == RendezvousClient::Instruction::Kind::kReform) {
    {
      MutexLock lock(mu_);
      reform_ = NextRound{told->round, told->reason};
    }
    Notify();
  }
}

bool Agent::Impl::Forward(os::Subprocess& child, int stream, OutputTail& tail, OutputSink& sink) {
  int fd = stream == 0 ? child.stdout_fd() : child.stderr_fd();
  char buffer[65536];
  for (;;) {
    // One chunk a call: a program that floods its output must not keep the
    // loop from STOP and signals.
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      sink.Write(std::string_view(buffer, static_cast<size_t>(n)));
      tail.Append(stream, std::string_view(buffer, static_cast<size_t>(n)));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    tail.Finish(stream);
    if (stream == 0) {
      child.CloseStdout();
    } else {
      child.CloseStderr();
    }
    return false;
  }
}

Agent::Impl::Reason Agent::Impl::Supervise(os::Subprocess& child, OutputTail& tail,
                                           os::ExitStatus* status) {
  using std::chrono::milliseconds;
  OutputSink sinks[2] = {OutputSink(options_.stdout_fd), OutputSink(options_.stderr_fd)};
  auto stream_fd = [&](int stream) { return stream == 0 ? child.stdout_fd() : child.stderr_fd(); };
  Reason reason = Reason::kNone;
  bool terminating = false;
  bool killed = false;
  Clock::time_point kill_at;
  std::optional<os::ExitStatus> exited;
  for (;;) {
    pollfd fds[6];
    int count = 0;
    fds[count++] = {event_fd_.get(), POLLIN, 0};
    int read_slot[2] = {-1, -1};
    int write_slot[2] = {-1, -1};
    for (int stream : {0, 1}) {
      if (stream_fd(stream) >= 0 && sinks[stream].has_room()) {
        read_slot[stream] = count;
        fds[count++] = {stream_fd(stream), POLLIN, 0};
      }
      if (sinks[stream].pending()) {
        write_slot[stream] = count;
        fds[count++] = {sinks[stream].fd(), POLLOUT, 0};
      }
    }
    if (!exited && child.exit_fd() >= 0) fds[count++] = {child.exit_fd(), POLLIN, 0};
    milliseconds timeout(-1);
    // Without a pidfd, or while waiting for the rest of the group, poll.
    if ((!exited && child.exit_fd() < 0) || exited) timeout = milliseconds(20);
    if (killed) timeout = milliseconds(5);
    if (terminating && !killed) {
      auto left = std::chrono::ceil<milliseconds>(kill_at - Clock::now());
      left = std::max(left, milliseconds(0));
      timeout = timeout.count() < 0 ? left : std::min(timeout, left);
    }
    int ready = ::poll(fds, static_cast<nfds_t>(count), static_cast<int>(timeout.count()));
    if (ready < 0 && errno != EINTR) break;  // cannot happen with valid fds

    uint64_t events;
    while (::read(event_fd_.get(), &events, sizeof(events)) > 0) {
    }
    for (int stream : {0, 1}) {
      if (write_slot[stream] >= 0 && fds[write_slot[stream]].revents != 0) sinks[stream].Flush();
      if (read_slot[stream] >= 0 && fds[read_slot[stream]].revents != 0) {
        Forward(child, stream, tail, sinks[stream]);
      }
    }

    if (!exited) exited = child.Poll();
    if (reason == Reason::kNone) {
      if (interrupt_signal_.load() != 0) {
        reason = Reason::kInterrupted;
      } else if (stop_requested_) {
        reason = Reason::kStopped;
      } else if (ReformRequested()) {
        reason = Reason::kReform;
      } else if (connection_lost_) {
        reason = Reason::kLost;
      } else if (feed_failed_) {
        reason = Reason::kFeedFailed;
      } else if (exited) {
        reason = Reason::kExited;
      }
    }
    if (reason != Reason::kNone && !terminating) {
      terminating = true;
      // The guard stops the program's tree within the grace time; the agent
      // SIGKILLs the guard only if it did not.
      kill_at = Clock::now() + options_.grace + kGuardSlack;
      child.SignalGroup(SIGTERM);
    }
    if (terminating && !killed && Clock::now() >= kill_at) {
      child.SignalGroup(SIGKILL);
      killed = true;
    }
    // After SIGKILL, the group's members die at once; reaping the ones we
    // adopted takes a moment, and init's ones are not ours to wait for long.
    if (exited && (!child.GroupAlive() || (killed && Clock::now() >= kill_at + kReapLimit))) {
      break;
    }
  }
  if (!exited) exited = child.Wait();
  *status = *exited;

  // The rest of the output, until every writer is gone or the limit (a
  // process that left the group but holds the pipe). Handing what was read
  // to a slow reader does not count against the limit: the program's last
  // lines are not dropped because the driver was busy.
  Clock::time_point drain_until = Clock::now() + kDrainLimit;
  auto flush = [&](OutputSink& sink) {
    const Clock::time_point start = Clock::now();
    sink.FlushWhileTaken(kDrainLimit);
    drain_until += Clock::now() - start;
  };
  for (;;) {
    for (int stream : {0, 1}) {
      // A sink full as the program ended: nothing more is read until it
      // is written out.
      if (stream_fd(stream) >= 0 && !sinks[stream].has_room()) flush(sinks[stream]);
      while (stream_fd(stream) >= 0 && sinks[stream].has_room() &&
             Forward(child, stream, tail, sinks[stream])) {
        if (!sinks[stream].has_room()) flush(sinks[stream]);
        pollfd more{stream_fd(stream), POLLIN, 0};
        if (::poll(&more, 1, 0) <= 0) break;
      }
    }
    if ((child.stdout_fd() < 0 && child.stderr_fd() < 0) || Clock::now() >= drain_until) break;
    pollfd fds[2];
    int count = 0;
    for (int stream : {0, 1}) {
      if (stream_fd(stream) >= 0) fds[count++] = {stream_fd(stream), POLLIN, 0};
    }
    auto left = std::chrono::ceil<milliseconds>(drain_until - Clock::now());
    ::poll(fds, static_cast<nfds_t>(count), static_cast<int>(std::max<int64_t>(left.count(), 0)));
  }
  for (OutputSink& sink : sinks) sink.FlushWhileTaken(kDrainLimit);
  tail.Finish(0);
  tail.Finish(1);
  return reason;
}

Agent::Agent(AgentOptions options, const Environment& env)
    : impl_(std::make_unique<Impl>(std::move(options), env)) {}
Agent::~Agent() = default;
int Agent::Run() {
  return impl_->Run();
}
bool Agent::Interrupt(int signal) {
  return impl_->Interrupt(signal);
}

}  // namespace drover

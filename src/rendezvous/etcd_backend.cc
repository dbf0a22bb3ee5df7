// The etcd backend of RendezvousClient (docs/protocol.md, "The etcd
// backend"): the nodes form each round among themselves through etcd, with
// no server and no driver on the path.
//
// Keys, under the run's prefix P (docs/protocol.md has the table):
//   P/c/f/config, P/c/f/round, P/c/f/end, P/c/f/formed/R   the signals
//   P/c/m/alive/ID, P/c/m/r/R/{nodes,left,errors}/ID,
//   P/c/m/waiting/ID                                       the membership
//   P/s/ID                                                 heartbeat payloads
//   P/kv/KEY                                               the key-value store
// A node waiting for its round watches the signals and reads counts; a
// running node watches all of P/c/. Every decision is a transaction that
// compares P/c/f/round's revision, so when several nodes see the same thing
// (a lost peer, a full round) exactly one acts on it.

#include <google/protobuf/util/json_util.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "common/mutex.h"
#include "drover.pb.h"
#include "etcd/etcd_client.h"
#include "os/duration_text.h"
#include "rendezvous/client_backend.h"
#include "rendezvous/etcd_connect.h"
#include "rendezvous/node_info_codec.h"
#include "rendezvous/node_table.h"

namespace drover::rendezvous_internal {
namespace {

using ::drover::etcd::Compare;
using ::drover::etcd::EtcdClient;
using ::drover::etcd::KeyValue;
using ::drover::etcd::TxnOp;
using nlohmann::json;

// How long a failed etcd call waits before the next try.
constexpr Milliseconds kRetryPause{200};
// How often a node waiting on a watch looks at its lease.
constexpr Milliseconds kWatchSlice{2'000};
// How often a node waiting for its round to form counts the registrations.
constexpr Milliseconds kFormationRecheck{10'000};
// Under P/c/m/r/R/: how long round R took to form, in ms, from its record
// to its cluster (written with the cluster).
constexpr char kFormedIn[] = "formed_in_ms";

Status HostsUnsupported() {
  return Status::FailedPrecondition(
      "a host connection (several nodes on one client) is the built-in server's; through etcd "
      "each node registers itself");
}

std::string RandomHex(int bytes) {
  std::random_device random;
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    unsigned value = random() & 0xff;
    out.push_back(kDigits[value >> 4]);
    out.push_back(kDigits[value & 15]);
  }
  return out;
}

// The run's shape, as `drover agent` flags say it.
struct RunShape {
  int min_nodes = 1;
  int max_nodes = 1;
  int num_ps = 0;
  std::string master;  // "" : none
  bool eval_node = false;
  int max_restarts = 0;
  int64_t join_wait_ms = 0;

  static RunShape Of(const EtcdRunOptions& o) {
    RunShape shape;
    shape.max_nodes = o.cluster.num_nodes;
    shape.min_nodes = o.min_nodes > 0 ? o.min_nodes : o.cluster.num_nodes;
    shape.num_ps = o.cluster.num_ps;
    shape.master = o.cluster.master_node.value_or("");
    shape.eval_node = o.cluster.eval_node;
    shape.max_restarts = o.max_restarts;
    shape.join_wait_ms = o.join_wait.count();
    return shape;
  }
  json ToJson() const {
    return {{"min_nodes", min_nodes},
            {"max_nodes", max_nodes},
            {"num_ps", num_ps},
            {"master", master},
            {"eval_node", eval_node},
            {"max_restarts", max_restarts},
            {"join_wait_ms", join_wait_ms}};
  }
  static RunShape FromJson(const json& j) {
    RunShape shape;
    shape.min_nodes = j.value("min_nodes", 1);
    shape.max_nodes = j.value("max_nodes", 1);
    shape.num_ps = j.value("num_ps", 0);
    shape.master = j.value("master", "");
    shape.eval_node = j.value("eval_node", false);
    shape.max_restarts = j.value("max_restarts", 0);
    shape.join_wait_ms = j.value("join_wait_ms", int64_t{0});
    return shape;
  }
  // What every node must agree on (the restarts and the join wait are the
  // first node's).
  bool SameRoles(const RunShape& other) const {
    return min_nodes == other.min_nodes && max_nodes == other.max_nodes && num_ps == other.num_ps &&
           master == other.master && eval_node == other.eval_node;
  }
  std::string Describe() const {
    std::string text = "--nodes " + std::to_string(min_nodes) + ":" + std::to_string(max_nodes);
    if (num_ps > 0) text += " --ps " + std::to_string(num_ps);
    if (!master.empty()) text += " (" + master + ")";
    if (eval_node) text += " (evaluator)";
    return text;
  }
  ClusterTemplate Template(int num_nodes) const {
    ClusterTemplate cluster;
    cluster.num_nodes = num_nodes;
    cluster.num_ps = num_ps;
    if (!master.empty()) cluster.master_node = master;
    cluster.eval_node = eval_node;
    return cluster;
  }
};

struct RoundRecord {
  int round = 0;
  std::string reason;
  int failures = 0;
  // Who the round waits for before it forms (the last round's survivors
  // and the admitted joiners); empty in round 0.
  std::vector<std::string> expect;
  // When the round began, on the clock of the node that began it (ms since
  // the epoch; 0: not said); the node that forms it writes how long that
  // took.
  int64_t began_unix_ms = 0;
  int64_t mod_revision = 0;  // P/c/f/round's, for the next compare-and-swap

  json ToJson() const {
    return {{"round", round},
            {"reason", reason},
            {"failures", failures},
            {"expect", expect},
            {"began_unix_ms", began_unix_ms}};
  }
  static RoundRecord FromJson(const json& j) {
    RoundRecord record;
    record.round = j.value("round", 0);
    record.reason = j.value("reason", "");
    record.failures = j.value("failures", 0);
    record.expect = j.value("expect", std::vector<std::string>{});
    record.began_unix_ms = j.value("began_unix_ms", int64_t{0});
    return record;
  }
  static int64_t UnixMillisNow() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

struct EndRecord {
  bool failed = false;
  std::string message;
};

// What P/c/ holds about one round, read at one revision: the signals and
// counts (ReadSignals, a few bytes), or everything too (ReadRound).
struct RoundView {
  int64_t revision = 0;
  RoundRecord round;
  std::optional<EndRecord> end;
  bool formed = false;
  int nodes_count = 0;
  int left_count = 0;
  int waiting_count = 0;
  // The driver (docs/run.md, --driver-timeout): how long the run goes on
  // without one, when its driver said; and whether one is there now.
  std::optional<Milliseconds> driver_timeout;
  bool driver_alive = false;
  bool detailed = false;
  // The details:
  std::map<std::string, NodeInfo> nodes;  // registered, by executor id
  std::optional<FormedCluster> cluster;
  // Executor id -> its last status (StatusJson) as it left: the status keys
  // go with the agents' leases, these stay with the round.
  std::map<std::string, std::string> left;
  std::map<std::string, json> errors;  // each with the node's last status
  std::set<std::string> waiting;
  std::set<std::string> alive;
  std::optional<int64_t> formed_in_ms;  // how long the round took to form
};

Result<json> ParseJson(const std::string& text, const std::string& what) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Status::InvalidArgument("etcd holds a malformed " + what + ": " + text.substr(0, 200));
  }
  return parsed;
}

std::string NodeToJson(const NodeInfo& node) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(NodeToWire(node), &out);
  return out;
}

Result<NodeInfo> NodeFromJson(const std::string& text) {
  wire::NodeInfo node;
  if (!google::protobuf::util::JsonStringToMessage(text, &node).ok()) {
    return Status::InvalidArgument("etcd holds a malformed node: " + text.substr(0, 200));
  }
  return NodeFromWire(node);
}

std::string Task(const NodeInfo& node) {
  return node.job_name + ":" + std::to_string(node.task_index) + " (executor " + node.executor_id +
         " on " + node.host + ")";
}

// P/s/ID: a node's last heartbeat (its program's pid, its feed's progress,
// its program's reports, as the built-in server's Heartbeat frame has them)
// and its round.
std::string StatusJson(const HeartbeatPayload& beat, int round, bool left) {
  wire::Heartbeat heartbeat;
  heartbeat.set_program_pid(beat.program_pid);
  if (beat.feed) *heartbeat.mutable_feed() = FeedProgressToWire(*beat.feed);
  MetricsToWire(beat.metrics, heartbeat.mutable_metrics());
  std::string text;
  (void)google::protobuf::util::MessageToJsonString(heartbeat, &text);
  json status = {{"round", round}, {"heartbeat", json::parse(text, nullptr, false)}};
  if (left) status["left"] = true;
  if (const std::optional<ProgramEnd>& end = beat.program_end) {
    status["program_end"] = {{"exit_code", end->exit_code},
                             {"signal", end->signal},
                             {"text", end->text},
                             {"runtime_s", end->runtime_s}};
  }
  return status.dump();
}

// The heartbeat StatusJson wrote into `status`; a malformed one is ignored
// (it only informs the status).
void ParseStatus(const std::string& text, NodeStatus* status) {
  json parsed = json::parse(text, nullptr, false);
  if (!parsed.is_object()) return;
  status->ended_before_start = parsed.value("ended_before_start", false);
  if (!parsed.contains("heartbeat")) return;
  if (const auto end = parsed.find("program_end"); end != parsed.end() && end->is_object()) {
    const json& exit_code = (*end)["exit_code"];
    const json& signal = (*end)["signal"];
    const json& words = (*end)["text"];
    const json& runtime = (*end)["runtime_s"];
    if (exit_code.is_number_integer() && signal.is_number_integer() && words.is_string() &&
        runtime.is_number()) {
      status->program_end = ProgramEnd{exit_code.get<int>(), signal.get<int>(),
                                       words.get<std::string>(), runtime.get<double>()};
    }
  }
  wire::Heartbeat heartbeat;
  if (!google::protobuf::util::JsonStringToMessage(parsed["heartbeat"].dump(), &heartbeat).ok()) {
    return;
  }
  status->program_pid = heartbeat.program_pid();
  if (heartbeat.has_feed()) status->feed = FeedProgressFromWire(heartbeat.feed());
  status->metrics = MetricsFromWire(heartbeat.metrics());
}

class EtcdBackend final : public RendezvousClient::Backend {
 public:
  EtcdBackend(RendezvousClientOptions options, std::unique_ptr<EtcdClient> etcd, std::string prefix)
      : options_(std::move(options)),
        o_(options_.etcd),
        etcd_(std::move(etcd)),
        prefix_(std::move(prefix)),
        shape_(RunShape::Of(o_)) {}

  ~EtcdBackend() override {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (keepalive_.joinable()) keepalive_.join();
    // Revoking drops this node's keys at once: its peers need not wait for
    // the lease to expire to see it gone.
    if (lease_ != 0) (void)etcd_->RevokeLease(lease_);
  }

  Status Start(Deadline deadline);

  Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline) override;
  Result<std::vector<FormedCluster>> RegisterHost(const std::vector<NodeInfo>& nodes,
                                                  Deadline deadline) override {
    return HostsUnsupported();
  }
  Status LeaveNode(const std::string& executor_id) override { return HostsUnsupported(); }
  void StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload) override;
  Status StartHostHeartbeats(Milliseconds, std::function<std::vector<NodeHeartbeat>()>) override {
    return HostsUnsupported();
  }
  Status ReportError(const std::string& executor_id, const std::string& message,
                     const std::vector<std::string>& last_log_lines) override;
  Result<ClusterState> QueryState(Deadline deadline) override;
  Status StopAll() override;
  Status Leave() override;
  Result<bool> WaitForStop(Deadline deadline, int wake_fd) override;
  Result<RendezvousClient::Instruction> WaitForInstruction(Deadline deadline, int wake_fd) override;
  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  Result<std::optional<std::string>> Get(const std::string& key, Deadline deadline) override;
  Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired, Deadline deadline) override;
  Result<bool> Delete(const std::string& key, Deadline deadline) override;

 private:
  // The formation signals (what a node waiting for a round watches) and the
  // membership (what a running node watches as well, all under P/c/).
  std::string Control(const std::string& rest) const { return prefix_ + "/c/f/" + rest; }
  std::string Member(const std::string& rest) const { return prefix_ + "/c/m/" + rest; }
  std::string Formed(int round) const { return Control("formed/" + std::to_string(round)); }
  std::string RoundDir(int round) const { return Member("r/" + std::to_string(round) + "/"); }
  std::string StatusKey(const std::string& id) const { return prefix_ + "/s/" + id; }
  std::string NodeKey(int round, const std::string& id) const {
    return RoundDir(round) + "nodes/" + id;
  }
  std::string KvKey(const std::string& key) const { return prefix_ + "/kv/" + key; }
  std::string Where() const { return options_.address; }

  // Runs `call` until it succeeds, fails for a reason other than etcd being
  // unavailable, or etcd stayed unavailable for unavailable_timeout (or
  // past `deadline`).
  template <typename Call>
  auto Retrying(Call call, Deadline deadline) -> decltype(call());

  Result<RoundView> ReadRound(int round);
  // `with_driver`: the driver's keys too (a running node's look).
  Result<RoundView> ReadSignals(int round, bool with_driver = false);
  Result<std::optional<FormedCluster>> ReadFormed(int round);
  Status WriteConfig();
  // Forms `view`'s round with the nodes registered (at most MAX), unless
  // another node did first or the round moved on.
  Status TrySeal(const RoundView& view);
  // The next round, if P/c/f/round is still what `view` read.
  Status BumpRound(const RoundView& view, const std::string& reason, int failures,
                   std::vector<std::string> expect);
  // Ends the run, if nothing ended it first.
  Status End(bool failed, const std::string& message);
  // The node's status now (StatusJson; "" before heartbeats started): its
  // final counts when it leaves or fails.
  std::string LastStatus(int round, bool left);
  // What the formed round `view` calls for: a new round for a lost node or
  // a joiner, the end when every node finished. Returns whether it wrote.
  Result<bool> Act(const RoundView& view);
  // Whether the counts of `view` say Act may have something to do (a member
  // gone, every member finished, a node waiting with room).
  bool CallsForAction(const RoundView& view);
  Status Ended(const EndRecord& end) const {
    return Status::Unavailable("the run at " + Where() + " has ended: " + end.message);
  }
  // What Register returns for a run that ended: kCancelled when `round`
  // formed with node `id`, registered in it by this backend, before the
  // node read the cluster (the node takes no part, and Leave says it
  // stopped rather than letting its lease expire); Ended otherwise.
  Status EndedBeforeStart(const EndRecord& end, int round, const std::string& id);
  void KeepAliveLoop();
  // Watches `prefix` (the signals, or all of P/c/) from revision `from`:
  // true when something changed, false at the deadline or when wake_fd is
  // readable; the lease's loss is an error.
  Result<bool> WatchControl(const std::string& prefix, int64_t from, Deadline deadline,
                            int wake_fd);
  Status LeaseStatus();
  // A run whose driver gave --driver-timeout and is gone (view's driver
  // keys): when the run is to end without it (ended already, if that is
  // now); nullopt while a driver is there or none set a limit.
  Result<std::optional<Deadline>> CheckDriver(const RoundView& view);

  const RendezvousClientOptions options_;
  const EtcdRunOptions& o_;
  std::unique_ptr<EtcdClient> etcd_;
  const std::string prefix_;
  RunShape shape_;
  int64_t lease_ = 0;

  Mutex mu_;
  std::condition_variable_any cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool lease_lost_ GUARDED_BY(mu_) = false;
  std::string lease_error_ GUARDED_BY(mu_);
  std::function<HeartbeatPayload()> payload_ GUARDED_BY(mu_);
  bool heartbeat_now_ GUARDED_BY(mu_) = false;
  std::string executor_id_ GUARDED_BY(mu_);
  int round_ GUARDED_BY(mu_) = -1;  // the round this node registered for
  std::optional<FormedCluster> formed_ GUARDED_BY(mu_);
  // The round whose nodes/ key Register last put (Register's own).
  int put_round_ = -1;
  // Register returned EndedBeforeStart's kCancelled: Leave says so.
  bool ended_before_start_ GUARDED_BY(mu_) = false;
  bool reform_reported_ GUARDED_BY(mu_) = false;
  std::thread keepalive_;
  // Since when this node has seen the run without its driver (the thread
  // that waits for instructions only).
  std::optional<Clock::time_point> driver_gone_since_;
};

template <typename Call>
auto EtcdBackend::Retrying(Call call, Deadline deadline) -> decltype(call()) {
  return etcd::RetryWhileUnavailable(call, deadline, o_.unavailable_timeout, kRetryPause);
}

Status EtcdBackend::Start(Deadline deadline) {
  if (o_.cluster.num_nodes == 0) {  // an observer
    DROVER_ASSIGN_OR_RETURN(etcd::RangeResult config,
                            Retrying([&] { return etcd_->Get(Control("config")); }, deadline));
    if (config.kvs.empty()) return Status::NotFound("no run at " + Where());
    DROVER_ASSIGN_OR_RETURN(json stored, ParseJson(config.kvs[0].value, "run config"));
    shape_ = RunShape::FromJson(stored);
    return Status::Ok();
  }
  if (shape_.max_nodes < 1 || shape_.min_nodes < 1 || shape_.min_nodes > shape_.max_nodes) {
    return Status::InvalidArgument("the etcd rendezvous needs 1 <= MIN <= MAX nodes; got " +
                                   shape_.Describe());
  }
  DROVER_RETURN_IF_ERROR(shape_.Template(shape_.min_nodes).Validate());
  const auto ttl = std::max<int64_t>(1, (o_.lease_ttl.count() + 999) / 1000);
  DROVER_ASSIGN_OR_RETURN(
      lease_, Retrying([&] { return etcd_->GrantLease(std::chrono::seconds(ttl)); }, deadline));
  DROVER_RETURN_IF_ERROR(Retrying(
                             [&]() -> Result<bool> {
                               DROVER_RETURN_IF_ERROR(WriteConfig());
                               return true;
                             },
                             deadline)
                             .status());
  if (!options_.name.empty()) {
    DROVER_RETURN_IF_ERROR(
        Retrying([&] { return etcd_->Put(Member("alive/" + options_.name), "", lease_); }, deadline)
            .status());
  }
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  return Status::Ok();
}

Status EtcdBackend::WriteConfig() {
  // A read first: every node but the first finds the config there, and a
  // read costs etcd no raft write.
  DROVER_ASSIGN_OR_RETURN(etcd::RangeResult config, etcd_->Get(Control("config")));
  if (config.kvs.empty()) {
    RoundRecord first;
    first.began_unix_ms = RoundRecord::UnixMillisNow();
    DROVER_ASSIGN_OR_RETURN(etcd::TxnResult txn,
                            etcd_->Txn({Compare::Absent(Control("config"))},
                                       {TxnOp::Put(Control("config"), shape_.ToJson().dump()),
                                        TxnOp::Put(Control("round"), first.ToJson().dump())},
                                       {TxnOp::Get(Control("config"))}));
    if (txn.succeeded) return Status::Ok();
    if (txn.ranges.empty() || txn.ranges[0].kvs.empty()) return Status::Ok();
    config = txn.ranges[0];
  }
  DROVER_ASSIGN_OR_RETURN(json stored, ParseJson(config.kvs[0].value, "run config"));
  RunShape theirs = RunShape::FromJson(stored);
  if (!theirs.SameRoles(shape_)) {
    return Status::InvalidArgument("the run at " + Where() + " was started with " +
                                   theirs.Describe() + "; this node asks for " + shape_.Describe());
  }
  shape_ = theirs;
  return Status::Ok();
}

Result<FormedCluster> ClusterFromJson(const std::string& text, int round) {
  wire::SharedCluster shared;
  if (!google::protobuf::util::JsonStringToMessage(text, &shared).ok()) {
    return Status::InvalidArgument("etcd holds a malformed cluster for round " +
                                   std::to_string(round));
  }
  return SharedClusterFromWire(shared);
}

// The first two ranges of `txn`: P/c/f/round and P/c/f/end.
Status ParseRoundAndEnd(const etcd::TxnResult& txn, RoundView* view) {
  if (!txn.ranges[0].kvs.empty()) {
    DROVER_ASSIGN_OR_RETURN(json record, ParseJson(txn.ranges[0].kvs[0].value, "round"));
    view->round = RoundRecord::FromJson(record);
    view->round.mod_revision = txn.ranges[0].kvs[0].mod_revision;
  }
  if (!txn.ranges[1].kvs.empty()) {
    DROVER_ASSIGN_OR_RETURN(json record, ParseJson(txn.ranges[1].kvs[0].value, "end"));
    view->end = EndRecord{record.value("failed", false), record.value("message", "")};
  }
  return Status::Ok();
}

Result<RoundView> EtcdBackend::ReadRound(int round) {
  DROVER_ASSIGN_OR_RETURN(
      etcd::TxnResult txn,
      etcd_->Txn({}, {TxnOp::Get(Control("round")), TxnOp::Get(Control("end")),
                      TxnOp::GetPrefix(Member("waiting/")), TxnOp::GetPrefix(RoundDir(round)),
                      TxnOp::GetPrefix(Member("alive/")), TxnOp::Get(Formed(round))}));
  if (txn.ranges.size() != 6) {
    return Status::Internal("etcd answered a read of 6 ranges with fewer");
  }
  RoundView view;
  view.revision = txn.revision;
  DROVER_RETURN_IF_ERROR(ParseRoundAndEnd(txn, &view));
  for (const KeyValue& kv : txn.ranges[2].kvs) {
    view.waiting.insert(kv.key.substr(Member("waiting/").size()));
  }
  const std::string dir = RoundDir(round);
  for (const KeyValue& kv : txn.ranges[3].kvs) {
    const std::string rest = kv.key.substr(dir.size());
    auto after = [&](std::string_view head) { return rest.substr(head.size()); };
    if (rest.rfind("nodes/", 0) == 0) {
      DROVER_ASSIGN_OR_RETURN(NodeInfo node, NodeFromJson(kv.value));
      view.nodes[after("nodes/")] = std::move(node);
    } else if (rest.rfind("left/", 0) == 0) {
      view.left[after("left/")] = kv.value;
    } else if (rest.rfind("errors/", 0) == 0) {
      DROVER_ASSIGN_OR_RETURN(view.errors[after("errors/")], ParseJson(kv.value, "error"));
    } else if (rest == kFormedIn) {
      int64_t ms = 0;
      const char* end = kv.value.data() + kv.value.size();
      if (std::from_chars(kv.value.data(), end, ms).ptr == end) view.formed_in_ms = ms;
    }
  }
  for (const KeyValue& kv : txn.ranges[4].kvs) {
    view.alive.insert(kv.key.substr(Member("alive/").size()));
  }
  for (const KeyValue& kv : txn.ranges[5].kvs) {
    DROVER_ASSIGN_OR_RETURN(view.cluster, ClusterFromJson(kv.value, round));
  }
  view.formed = view.cluster.has_value();
  view.nodes_count = static_cast<int>(view.nodes.size());
  view.left_count = static_cast<int>(view.left.size());
  view.waiting_count = static_cast<int>(view.waiting.size());
  view.detailed = true;
  return view;
}

Result<std::optional<FormedCluster>> EtcdBackend::ReadFormed(int round) {
  DROVER_ASSIGN_OR_RETURN(etcd::RangeResult got, etcd_->Get(Formed(round)));
  if (got.kvs.empty()) return std::optional<FormedCluster>();
  DROVER_ASSIGN_OR_RETURN(FormedCluster cluster, ClusterFromJson(got.kvs[0].value, round));
  return std::optional<FormedCluster>(std::move(cluster));
}

Result<RoundView> EtcdBackend::ReadSignals(int round, bool with_driver) {
  std::vector<TxnOp> reads = {TxnOp::Get(Control("round")),
                              TxnOp::Get(Control("end")),
                              TxnOp::Count(Formed(round)),
                              TxnOp::CountPrefix(RoundDir(round) + "nodes/"),
                              TxnOp::CountPrefix(RoundDir(round) + "left/"),
                              TxnOp::CountPrefix(Member("waiting/"))};
  if (with_driver) {
    reads.push_back(TxnOp::Get(EtcdDriverConfigKey(prefix_)));
    reads.push_back(TxnOp::Count(EtcdDriverAliveKey(prefix_)));
  }
  DROVER_ASSIGN_OR_RETURN(etcd::TxnResult txn, etcd_->Txn({}, reads));
  if (txn.ranges.size() != reads.size()) {
    return Status::Internal("etcd answered a read of " + std::to_string(reads.size()) +
                            " ranges with fewer");
  }
  RoundView view;
  view.revision = txn.revision;
  DROVER_RETURN_IF_ERROR(ParseRoundAndEnd(txn, &view));
  view.formed = txn.ranges[2].count > 0;
  view.nodes_count = static_cast<int>(txn.ranges[3].count);
  view.left_count = static_cast<int>(txn.ranges[4].count);
  view.waiting_count = static_cast<int>(txn.ranges[5].count);
  if (!with_driver) return view;
  if (!txn.ranges[6].kvs.empty()) {
    json config = json::parse(txn.ranges[6].kvs[0].value, nullptr, false);
    if (config.is_object() && config.value("timeout_ms", int64_t{-1}) >= 0) {
      view.driver_timeout = Milliseconds(config.value("timeout_ms", int64_t{0}));
    }
  }
  view.driver_alive = txn.ranges[7].count > 0;
  return view;
}

Status EtcdBackend::TrySeal(const RoundView& view) {
  std::vector<NodeInfo> nodes;
  for (const auto& [id, node] : view.nodes) nodes.push_back(node);
  std::sort(nodes.begin(), nodes.end(), [](const NodeInfo& a, const NodeInfo& b) {
    return ExecutorIdBefore(a.executor_id, b.executor_id);
  });
  if (static_cast<int>(nodes.size()) > shape_.max_nodes) nodes.resize(shape_.max_nodes);
  const ClusterTemplate roles = shape_.Template(static_cast<int>(nodes.size()));
  DROVER_RETURN_IF_ERROR(roles.Validate());
  FormedCluster cluster;
  cluster.cluster_id = RandomHex(6) + "-r" + std::to_string(view.round.round);
  cluster.round = view.round.round;
  cluster.round_reason = view.round.reason;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto [job, index] = roles.Slot(static_cast<int>(i));
    nodes[i].job_name = job;
    nodes[i].task_index = index;
  }
  cluster.nodes = std::move(nodes);
  DROVER_RETURN_IF_ERROR(PlaceNodes(cluster));
  std::string text;
  (void)google::protobuf::util::MessageToJsonString(SharedClusterToWire(cluster), &text);
  std::vector<TxnOp> writes = {TxnOp::Put(Formed(view.round.round), text)};
  if (view.round.began_unix_ms > 0) {
    // Across two hosts' clocks: a skew can make it negative.
    const int64_t took =
        std::max<int64_t>(0, RoundRecord::UnixMillisNow() - view.round.began_unix_ms);
    writes.push_back(TxnOp::Put(RoundDir(view.round.round) + kFormedIn, std::to_string(took)));
  }
  // The round before is history now.
  if (view.round.round > 0) writes.push_back(TxnOp::DeletePrefix(RoundDir(view.round.round - 1)));
  return etcd_
      ->Txn({Compare::ModRevisionIs(Control("round"), view.round.mod_revision),
             Compare::Absent(Formed(view.round.round)), Compare::Absent(Control("end"))},
            writes)
      .status();
}

Status EtcdBackend::BumpRound(const RoundView& view, const std::string& reason, int failures,
                              std::vector<std::string> expect) {
  RoundRecord next;
  next.began_unix_ms = RoundRecord::UnixMillisNow();
  next.round = view.round.round + 1;
  next.reason = reason;
  next.failures = failures;
  next.expect = std::move(expect);
  return etcd_
      ->Txn({Compare::ModRevisionIs(Control("round"), view.round.mod_revision),
             Compare::Absent(Control("end"))},
            {TxnOp::Put(Control("round"), next.ToJson().dump())})
      .status();
}

Status EtcdBackend::End(bool failed, const std::string& message) {
  json record = {{"failed", failed}, {"message", message}};
  return etcd_->Txn({Compare::Absent(Control("end"))}, {TxnOp::Put(Control("end"), record.dump())})
      .status();
}

Result<bool> EtcdBackend::Act(const RoundView& view) {
  if (view.end || !view.cluster || view.round.round != view.cluster->round) return false;
  const FormedCluster& cluster = *view.cluster;
  std::vector<std::string> survivors;
  std::vector<const NodeInfo*> lost;
  for (const NodeInfo& node : cluster.nodes) {
    if (view.nodes.count(node.executor_id)) {
      survivors.push_back(node.executor_id);
    } else {
      lost.push_back(&node);
    }
  }
  if (!lost.empty()) {
    std::string names;
    for (const NodeInfo* node : lost) names += (names.empty() ? "" : ", ") + Task(*node);
    if (static_cast<int>(survivors.size()) < shape_.min_nodes) {
      DROVER_RETURN_IF_ERROR(
          End(true, std::to_string(survivors.size()) +
                        (survivors.size() == 1 ? " node remains" : " nodes remain") +
                        ", fewer than the " + std::to_string(shape_.min_nodes) +
                        " the run needs at least (MIN of --nodes MIN:MAX); lost " + names));
      return true;
    }
    std::vector<std::string> expect = survivors;
    for (const std::string& id : view.waiting) {
      if (static_cast<int>(expect.size()) < shape_.max_nodes) expect.push_back(id);
    }
    DROVER_RETURN_IF_ERROR(BumpRound(view,
                                     "lost " + names + ": its agent stopped keeping its etcd lease",
                                     view.round.failures, expect));
    return true;
  }
  // As with the built-in driver, the run is done when its training tasks
  // are: ps and evaluator programs serve until then, and are stopped.
  const bool training_done =
      std::all_of(cluster.nodes.begin(), cluster.nodes.end(), [&](const NodeInfo& node) {
        return !IsTrainingJob(node.job_name) || view.left.count(node.executor_id) > 0;
      });
  if (training_done) {
    DROVER_RETURN_IF_ERROR(End(false, "every node's program finished"));
    return true;
  }
  // Room for a node that came late, while no program has finished.
  if (!view.waiting.empty() && static_cast<int>(cluster.nodes.size()) < shape_.max_nodes &&
      view.left.empty()) {
    std::vector<std::string> expect = survivors;
    std::string joined;
    for (const std::string& id : view.waiting) {
      if (static_cast<int>(expect.size()) >= shape_.max_nodes) break;
      expect.push_back(id);
      joined += (joined.empty() ? "" : ", ") + id;
    }
    DROVER_RETURN_IF_ERROR(
        BumpRound(view, "executor " + joined + " joined", view.round.failures, expect));
    return true;
  }
  return false;
}

Result<FormedCluster> EtcdBackend::Register(const NodeInfo& node, Deadline deadline) {
  DROVER_RETURN_IF_ERROR(LeaseStatus());
  {
    MutexLock lock(mu_);
    executor_id_ = node.executor_id;
    formed_.reset();
    ended_before_start_ = false;
    reform_reported_ = false;
  }
  const std::string& id = node.executor_id;
  bool waiting = false;
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(RoundView first, Retrying([&] { return ReadSignals(0); }, deadline));
    const int round = first.round.round;
    // A call after one that ran out of time: its key may be in the round.
    if (first.end) return EndedBeforeStart(*first.end, round, id);
    if (!waiting) {
      DROVER_RETURN_IF_ERROR(
          Retrying([&] { return etcd_->Put(NodeKey(round, id), NodeToJson(node), lease_); },
                   deadline)
              .status());
      put_round_ = round;
    }
    Clock::time_point min_since = Clock::time_point::max();
    for (;;) {
      // The counts only: a node waiting for its round reads a few bytes per
      // look, however many nodes there are.
      DROVER_ASSIGN_OR_RETURN(RoundView view,
                              Retrying([&] { return ReadSignals(round); }, deadline));
      // Between this node's registration and its look, the round formed and
      // its other nodes ran to the end (a ps whose workers were quick).
      if (view.end) return waiting ? Ended(*view.end) : EndedBeforeStart(*view.end, round, id);
      if (view.round.round != round) {
        if (waiting) {
          // A new round: take part, unless it has no room either.
          waiting = false;
          (void)etcd_->DeleteKey(Member("waiting/" + id));
        }
        break;
      }
      if (view.formed) {
        if (waiting) {
          // Formed without this node: wait for the next round.
        } else {
          // The cluster alone: every node reads it once, not the whole round.
          DROVER_ASSIGN_OR_RETURN(std::optional<FormedCluster> cluster,
                                  Retrying([&] { return ReadFormed(round); }, deadline));
          if (!cluster) continue;
          const std::vector<NodeInfo>& nodes = cluster->nodes;
          auto self = std::find_if(nodes.begin(), nodes.end(),
                                   [&](const NodeInfo& n) { return n.executor_id == id; });
          if (self != nodes.end()) {
            FormedCluster formed = *cluster;
            formed.self = static_cast<int>(self - nodes.begin());
            formed.heartbeat_interval = std::max(Milliseconds(100), o_.lease_ttl / 3);
            MutexLock lock(mu_);
            round_ = round;
            formed_ = formed;
            return formed;
          }
          (void)etcd_->DeleteKey(NodeKey(round, id));
          DROVER_RETURN_IF_ERROR(
              Retrying([&] { return etcd_->Put(Member("waiting/" + id), "", lease_); }, deadline)
                  .status());
          waiting = true;
          continue;
        }
      } else {
        const int count = view.nodes_count;
        if (count >= shape_.min_nodes && min_since == Clock::time_point::max()) {
          min_since = Clock::now();
        }
        const bool waited = count >= shape_.min_nodes &&
                            Clock::now() - min_since >= Milliseconds(shape_.join_wait_ms);
        bool ready = count >= shape_.max_nodes || waited;
        std::optional<RoundView> full;
        if (!ready && count >= shape_.min_nodes && !view.round.expect.empty()) {
          // A round after a loss or a failure forms once every node it
          // expects, whose agent is still up, registered.
          DROVER_ASSIGN_OR_RETURN(full, Retrying([&] { return ReadRound(round); }, deadline));
          ready = true;
          for (const std::string& wanted : full->round.expect) {
            if (!full->nodes.count(wanted) && full->alive.count(wanted)) ready = false;
          }
        }
        if (ready) {
          if (!full) {
            DROVER_ASSIGN_OR_RETURN(full, Retrying([&] { return ReadRound(round); }, deadline));
          }
          DROVER_RETURN_IF_ERROR(Retrying(
                                     [&]() -> Result<bool> {
                                       DROVER_RETURN_IF_ERROR(TrySeal(*full));
                                       return true;
                                     },
                                     deadline)
                                     .status());
          continue;
        }
      }
      if (Clock::now() >= deadline) {
        return Status::DeadlineExceeded(
            "the cluster at " + Where() + " did not form in time: round " + std::to_string(round) +
            " needs " + std::to_string(shape_.min_nodes) + " to " +
            std::to_string(shape_.max_nodes) + " nodes; " + std::to_string(view.nodes_count) +
            " registered" + (waiting ? "; this node waits for a round with room" : ""));
      }
      // Registrations are not watched (N nodes would each wake N times): the
      // node whose registration fills the round forms it; the others look
      // again now and then, for the join wait and for expected nodes gone.
      Deadline wake = std::min(deadline, Clock::now() + kFormationRecheck);
      if (min_since != Clock::time_point::max()) {
        wake = std::min(wake, min_since + Milliseconds(shape_.join_wait_ms));
      }
      DROVER_RETURN_IF_ERROR(WatchControl(Control(""), view.revision + 1, wake, -1).status());
    }
  }
}

Status EtcdBackend::EndedBeforeStart(const EndRecord& end, int round, const std::string& id) {
  if (put_round_ != round) return Ended(end);
  Result<std::optional<FormedCluster>> cluster = ReadFormed(round);
  if (!cluster.ok() || !cluster->has_value()) return Ended(end);
  const std::vector<NodeInfo>& nodes = (*cluster)->nodes;
  if (std::none_of(nodes.begin(), nodes.end(),
                   [&](const NodeInfo& n) { return n.executor_id == id; })) {
    return Ended(end);
  }
  {
    MutexLock lock(mu_);
    round_ = round;  // what Leave writes under
    ended_before_start_ = true;
  }
  return Status::Cancelled("the run at " + Where() + " ended (" + end.message + ") after round " +
                           std::to_string(round) + " formed with executor " + id +
                           ", before it read the cluster");
}

Result<RendezvousClient::Instruction> EtcdBackend::WaitForInstruction(Deadline deadline,
                                                                      int wake_fd) {
  using Instruction = RendezvousClient::Instruction;
  int round;
  {
    MutexLock lock(mu_);
    round = round_;
  }
  const Deadline forever = Clock::time_point::max();
  for (;;) {
    DROVER_RETURN_IF_ERROR(LeaseStatus());
    DROVER_ASSIGN_OR_RETURN(RoundView view,
                            Retrying([&] { return ReadSignals(round, true); }, forever));
    if (view.end) {
      Instruction told;
      told.kind = Instruction::Kind::kStop;
      told.reason = view.end->message;
      told.failed = view.end->failed;
      return told;
    }
    if (view.round.round != round) {
      MutexLock lock(mu_);
      if (!reform_reported_) {
        reform_reported_ = true;
        Instruction told;
        told.kind = Instruction::Kind::kReform;
        told.round = view.round.round;
        told.reason = view.round.reason;
        return told;
      }
    } else if (CallsForAction(view)) {
      DROVER_ASSIGN_OR_RETURN(RoundView full, Retrying([&] { return ReadRound(round); }, forever));
      DROVER_ASSIGN_OR_RETURN(bool acted, Retrying([&] { return Act(full); }, forever));
      if (acted) continue;
    }
    DROVER_ASSIGN_OR_RETURN(std::optional<Deadline> driver_limit, CheckDriver(view));
    if (driver_limit && *driver_limit <= Clock::now()) continue;  // ended: read the end
    if (Clock::now() >= deadline) return Instruction{};
    const Deadline watch_until = driver_limit ? std::min(deadline, *driver_limit) : deadline;
    DROVER_ASSIGN_OR_RETURN(bool changed,
                            WatchControl(prefix_ + "/c/", view.revision + 1, watch_until, wake_fd));
    // The deadline, or wake_fd; not the driver's limit, which is looked at again.
    if (!changed && (watch_until == deadline || Clock::now() < watch_until)) return Instruction{};
  }
}

Result<std::optional<Deadline>> EtcdBackend::CheckDriver(const RoundView& view) {
  if (!view.driver_timeout || view.driver_alive) {
    driver_gone_since_.reset();
    return std::optional<Deadline>();
  }
  const Clock::time_point now = Clock::now();
  if (!driver_gone_since_) driver_gone_since_ = now;
  const Deadline limit = *driver_gone_since_ + *view.driver_timeout;
  if (now >= limit) {
    const std::string why = "the driver has been gone for " +
                            os::SecondsText(*view.driver_timeout) +
                            " (--driver-timeout); the run is stopped";
    DROVER_RETURN_IF_ERROR(Retrying(
                               [&]() -> Result<bool> {
                                 DROVER_RETURN_IF_ERROR(End(true, why));
                                 return true;
                               },
                               Clock::time_point::max())
                               .status());
  }
  return std::optional<Deadline>(limit);
}

bool EtcdBackend::CallsForAction(const RoundView& view) {
  int size;
  int training;
  {
    MutexLock lock(mu_);
    if (!formed_) return false;
    size = static_cast<int>(formed_->nodes.size());
    training = static_cast<int>(
        std::count_if(formed_->nodes.begin(), formed_->nodes.end(),
                      [](const NodeInfo& node) { return IsTrainingJob(node.job_name); }));
  }
  return view.nodes_count < size || view.left_count >= training ||
         (view.waiting_count > 0 && size < shape_.max_nodes && view.left_count == 0);
}

Result<bool> EtcdBackend::WatchControl(const std::string& prefix, int64_t from, Deadline deadline,
                                       int wake_fd) {
  // A member without a quorum still serves watches: the keep-alive thread
  // is what notices, so look at the lease between short watches.
  for (;;) {
    DROVER_RETURN_IF_ERROR(LeaseStatus());
    const Deadline slice = std::min(deadline, Clock::now() + kWatchSlice);
    DROVER_ASSIGN_OR_RETURN(
        etcd::WatchResult changes,
        Retrying([&] { return etcd_->WatchPrefix(prefix, from, slice, wake_fd); },
                 Clock::time_point::max()));
    if (!changes.events.empty()) return true;
    if (Clock::now() >= deadline) return false;
    if (wake_fd >= 0) {
      pollfd woken{wake_fd, POLLIN, 0};
      if (::poll(&woken, 1, 0) > 0) return false;
    }
  }
}

Result<bool> EtcdBackend::WaitForStop(Deadline deadline, int wake_fd) {
  DROVER_ASSIGN_OR_RETURN(RendezvousClient::Instruction told,
                          WaitForInstruction(deadline, wake_fd));
  return told.kind == RendezvousClient::Instruction::Kind::kStop;
}

Status EtcdBackend::ReportError(const std::string& executor_id, const std::string& message,
                                const std::vector<std::string>& last_log_lines) {
  int round;
  {
    MutexLock lock(mu_);
    round = round_;
  }
  if (round < 0) return Status::FailedPrecondition("no round registered for " + executor_id);
  const Deadline deadline = Clock::now() + o_.unavailable_timeout;
  json record = {{"message", message}, {"last_log_lines", last_log_lines}};
  // The node's counts up to the failure, kept with the error: its status key
  // goes with its lease when the agent exits.
  if (std::string last = LastStatus(round, /*left=*/false); !last.empty()) record["status"] = last;
  DROVER_RETURN_IF_ERROR(
      Retrying([&] { return etcd_->Put(RoundDir(round) + "errors/" + executor_id, record.dump()); },
               deadline)
          .status());
  // A failed program restarts the round (counted), or ends the run past
  // --max-restarts; the first report of the round decides.
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(RoundView view, Retrying([&] { return ReadRound(round); }, deadline));
    if (view.end || view.round.round != round) return Status::Ok();
    const int failures = view.round.failures + 1;
    Status wrote;
    if (failures > shape_.max_restarts) {
      wrote = End(true, message + " (failure " + std::to_string(failures) + "; --max-restarts " +
                            std::to_string(shape_.max_restarts) + ")");
      return wrote;
    }
    std::vector<std::string> expect;
    for (const auto& [id, node] : view.nodes) expect.push_back(id);
    wrote = BumpRound(view, message, failures, expect);
    if (!wrote.ok()) return wrote;
  }
}

std::string EtcdBackend::LastStatus(int round, bool left) {
  std::function<HeartbeatPayload()> payload;
  {
    MutexLock lock(mu_);
    payload = payload_;
  }
  return payload ? StatusJson(payload(), round, left) : "";
}

Status EtcdBackend::Leave() {
  int round;
  std::string id;
  bool ended_before_start;
  {
    MutexLock lock(mu_);
    round = round_;
    id = executor_id_;
    ended_before_start = ended_before_start_;
  }
  if (round < 0) return Status::Ok();
  const std::string last =
      ended_before_start
          ? json{{"round", round}, {"left", true}, {"ended_before_start", true}}.dump()
          : LastStatus(round, /*left=*/true);
  if (!last.empty()) (void)etcd_->Put(StatusKey(id), last, lease_);
  DROVER_RETURN_IF_ERROR(etcd_->Put(RoundDir(round) + "left/" + id, last).status());
  DROVER_ASSIGN_OR_RETURN(RoundView view, ReadRound(round));
  return Act(view).status();
}

Status EtcdBackend::StopAll() {
  return End(false, "stopped by request");
}

Result<ClusterState> EtcdBackend::QueryState(Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(RoundView first, Retrying([&] { return ReadSignals(0); }, deadline));
  DROVER_ASSIGN_OR_RETURN(RoundView view,
                          Retrying([&] { return ReadRound(first.round.round); }, deadline));
  DROVER_ASSIGN_OR_RETURN(etcd::RangeResult statuses, etcd_->GetPrefix(StatusKey("")));
  std::map<std::string, std::string> heartbeat;
  for (const KeyValue& kv : statuses.kvs) heartbeat[kv.key.substr(StatusKey("").size())] = kv.value;
  ClusterState state;
  state.phase = view.end ? "stopped" : view.cluster ? "formed" : "reserving";
  state.round = view.round.round;
  state.round_reason = view.round.reason;
  if (view.formed_in_ms) state.rendezvous_s = static_cast<double>(*view.formed_in_ms) / 1000.0;
  if (view.end) state.stop_reason = (view.end->failed ? "failed: " : "") + view.end->message;
  // A run that ended holds no registrations (they live under leases): its
  // last round's nodes were the ones registered.
  state.registered =
      static_cast<int>(view.end && view.cluster ? view.cluster->nodes.size() : view.nodes.size());
  state.expected = shape_.max_nodes;
  std::vector<NodeInfo> nodes;
  if (view.cluster) {
    nodes = view.cluster->nodes;
  } else {
    for (const auto& [id, node] : view.nodes) nodes.push_back(node);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeInfo& node = nodes[i];
    NodeStatus status;
    status.node = node;
    if (view.cluster && i < view.cluster->placements.size()) {
      status.placement = view.cluster->placements[i];
    }
    status.alive = view.nodes.count(node.executor_id) > 0;
    const auto left = view.left.find(node.executor_id);
    const auto error = view.errors.find(node.executor_id);
    status.left = left != view.left.end();
    // The last status a node wrote as it ended outlives its lease's key.
    std::string last = status.left ? left->second : "";
    if (error != view.errors.end()) {
      const auto written = error->second.find("status");
      if (written != error->second.end() && written->is_string()) {
        last = written->get<std::string>();
      }
    }
    if (!last.empty()) {
      ParseStatus(last, &status);
    } else if (auto it = heartbeat.find(node.executor_id); it != heartbeat.end()) {
      ParseStatus(it->second, &status);
    }
    if (error != view.errors.end()) {
      status.error = error->second.value("message", "");
      status.last_log_lines = error->second.value("last_log_lines", std::vector<std::string>{});
      status.reported = true;
    } else if (!status.alive && !status.left) {
      status.error = "its etcd lease expired";
    }
    state.nodes.push_back(std::move(status));
  }
  return state;
}

void EtcdBackend::StartHeartbeats(Milliseconds, std::function<HeartbeatPayload()> payload) {
  {
    MutexLock lock(mu_);
    if (payload) payload_ = std::move(payload);
    heartbeat_now_ = true;
  }
  cv_.notify_all();
}

void EtcdBackend::KeepAliveLoop() {
  const Milliseconds period = std::max(Milliseconds(100), o_.lease_ttl / 3);
  Clock::time_point unavailable_since = Clock::time_point::max();
  // The status last written: the key lives as long as the lease, so an
  // unchanged status costs only the keep-alive, which etcd's leader answers
  // alone, and not a write every member must agree on (an idle run's nodes
  // write nothing).
  std::string written;
  MutexLock lock(mu_);
  for (;;) {
    cv_.wait_for(mu_, period, [&] {
      mu_.AssertHeld();
      return stopping_ || heartbeat_now_;
    });
    if (stopping_) return;
    heartbeat_now_ = false;
    std::function<HeartbeatPayload()> payload = payload_;
    const int round = round_;
    const std::string id = executor_id_;
    lock.Unlock();
    Result<int64_t> ttl = etcd_->KeepAlive(lease_);
    if (ttl.ok() && payload && !id.empty()) {
      std::string status = StatusJson(payload(), round, false);
      if (status != written && etcd_->Put(StatusKey(id), status, lease_).ok()) {
        written = std::move(status);
      }
    }
    lock.Lock();
    if (ttl.ok() && *ttl > 0) {
      unavailable_since = Clock::time_point::max();
    } else if (ttl.ok()) {
      lease_lost_ = true;
      lease_error_ = "this node's etcd lease expired (no keep-alive reached " + Where() +
                     " within " + os::SecondsText(o_.lease_ttl) + "); its peers count it lost";
      return;
    } else {
      if (unavailable_since == Clock::time_point::max()) unavailable_since = Clock::now();
      if (Clock::now() - unavailable_since >= o_.unavailable_timeout) {
        lease_lost_ = true;
        lease_error_ = ttl.status().message() + " for " + os::SecondsText(o_.unavailable_timeout) +
                       "; giving up";
        return;
      }
    }
  }
}

Status EtcdBackend::LeaseStatus() {
  MutexLock lock(mu_);
  if (lease_lost_) return Status::Unavailable(lease_error_);
  return Status::Ok();
}

// --- the key-value store -----------------------------------------------

Status EtcdBackend::Set(const std::string& key, const std::string& value, Deadline deadline) {
  return Retrying([&] { return etcd_->Put(KvKey(key), value); }, deadline).status();
}

Result<std::optional<std::string>> EtcdBackend::Get(const std::string& key, Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(etcd::RangeResult got,
                          Retrying([&] { return etcd_->Get(KvKey(key)); }, deadline));
  if (got.kvs.empty()) return std::optional<std::string>();
  return std::optional<std::string>(got.kvs[0].value);
}

Result<int64_t> EtcdBackend::Add(const std::string& key, int64_t delta, Deadline deadline) {
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(etcd::RangeResult got,
                            Retrying([&] { return etcd_->Get(KvKey(key)); }, deadline));
    int64_t value = 0;
    Compare unchanged = Compare::Absent(KvKey(key));
    if (!got.kvs.empty()) {
      try {
        value = std::stoll(got.kvs[0].value);
      } catch (...) {
        return Status::InvalidArgument("ADD '" + key + "': the value is not a number");
      }
      unchanged = Compare::ModRevisionIs(KvKey(key), got.kvs[0].mod_revision);
    }
    value += delta;
    DROVER_ASSIGN_OR_RETURN(etcd::TxnResult txn,
                            Retrying(
                                [&] {
                                  return etcd_->Txn(
                                      {unchanged}, {TxnOp::Put(KvKey(key), std::to_string(value))});
                                },
                                deadline));
    if (txn.succeeded) return value;
    if (Clock::now() >= deadline) return Status::DeadlineExceeded("ADD '" + key + "' kept racing");
  }
}

Status EtcdBackend::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (;;) {
    std::vector<TxnOp> reads;
    for (const std::string& key : keys) reads.push_back(TxnOp::Get(KvKey(key)));
    DROVER_ASSIGN_OR_RETURN(etcd::TxnResult txn,
                            Retrying([&] { return etcd_->Txn({}, reads); }, deadline));
    std::string missing;
    for (size_t i = 0; i < keys.size() && i < txn.ranges.size(); ++i) {
      if (txn.ranges[i].kvs.empty()) missing += (missing.empty() ? "'" : ", '") + keys[i] + "'";
    }
    if (missing.empty()) return Status::Ok();
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded("WAIT: still missing " + missing + " at " + Where());
    }
    (void)etcd_->WatchPrefix(prefix_ + "/kv/", txn.revision + 1, deadline);
  }
}

Result<std::string> EtcdBackend::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, Deadline deadline) {
  const std::string full = KvKey(key);
  Compare matches = expected.empty() ? Compare::Absent(full) : Compare::ValueIs(full, expected);
  DROVER_ASSIGN_OR_RETURN(etcd::TxnResult txn,
                          Retrying(
                              [&] {
                                return etcd_->Txn({matches},
                                                  {TxnOp::Put(full, desired), TxnOp::Get(full)},
                                                  {TxnOp::Get(full)});
                              },
                              deadline));
  if (txn.ranges.empty() || txn.ranges.back().kvs.empty()) return std::string();
  return txn.ranges.back().kvs[0].value;
}

Result<bool> EtcdBackend::Delete(const std::string& key, Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(int64_t deleted,
                          Retrying([&] { return etcd_->DeleteKey(KvKey(key)); }, deadline));
  return deleted > 0;
}

}  // namespace

Result<std::unique_ptr<RendezvousClient::Backend>> ConnectEtcd(RendezvousClientOptions options,
                                                               Deadline deadline) {
  // etcd not answering is --etcd-timeout's to bound, not the reservation's.
  DROVER_ASSIGN_OR_RETURN(EtcdRunConnection run,
                          ConnectEtcdRun(options.address, options.etcd, deadline));
  auto backend =
      std::make_unique<EtcdBackend>(std::move(options), std::move(run.client), run.prefix);
  DROVER_RETURN_IF_ERROR(backend->Start(deadline));
  return std::unique_ptr<RendezvousClient::Backend>(std::move(backend));
}

}  // namespace drover::rendezvous_internal

// Rendezvous: the reservation server that forms a cluster, and the client a
// node uses to join it (docs/protocol.md). TensorFlowOnSpark's
// reservation.Server/Client, authenticated, event-driven and explicit about
// what it waits for.
//
// RendezvousServer runs one event loop thread (Asio) that owns all state;
// public methods are thread-safe: they hand work to the loop and wait for its
// answer. A node waiting for the barrier parks a connection, not a thread.
// Destroying the server stops the loop and closes every connection.
//
// RendezvousClient is one authenticated connection. Its methods are blocking,
// each with a deadline, and must be called from one thread at a time, except
// that StartHeartbeats() runs its own thread, which the client owns and joins.

#ifndef DROVER_RENDEZVOUS_H_
#define DROVER_RENDEZVOUS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/cluster_spec.h"
#include "drover/feed_progress.h"
#include "drover/placement.h"
#include "drover/report.h"
#include "drover/status.h"

namespace drover {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Milliseconds = std::chrono::milliseconds;

// 32 secret bytes shared by the driver and every node (docs/protocol.md).
struct ClusterToken {
  std::vector<unsigned char> bytes;

  static Result<ClusterToken> Generate();
  // Reads a 0600 file of 64 hex characters; refuses a group/world-readable one.
  static Result<ClusterToken> ReadFile(const std::string& path);
  // ReadFile, or when there is no file, a new token written there (0600);
  // *created says which.
  static Result<ClusterToken> ReadOrCreateFile(const std::string& path, bool* created);
  static Result<ClusterToken> FromHex(std::string_view hex);
  // Writes the file with mode 0600.
  Status WriteFile(const std::string& path) const;
  // 64 lower-case hex characters (what the file holds).
  std::string ToHex() const;
};

// What a peer authenticates with (docs/security.md). The cluster token
// itself may do everything; every other credential is derived from it
// (HKDF-SHA256) for one purpose and reveals nothing of it:
//   kNode    authenticates to the rendezvous as `executor_id` only: it may
//            register that slot alone, heartbeat and report for it, use the
//            key-value store and read the state; not stop nodes;
//   kStatus  the status server's bearer token; nothing on the rendezvous.
// As text (a file of mode 0600, or a line on stdin), one line:
//   <64 hex>                            the cluster token
//   drover-node-v1 <executor id> <64 hex>
//   drover-status-v1-<64 hex>           (one word: the status page's bearer token)
struct Credential {
  enum class Kind { kCluster, kNode, kStatus };
  Kind kind = Kind::kCluster;
  std::string executor_id;         // kNode only
  std::vector<unsigned char> key;  // 32 bytes

  static Credential Cluster(const ClusterToken& token);
  // kInvalidArgument for a token not 32 bytes, or an executor id that is
  // empty, over 256 bytes, or holds whitespace or control characters.
  static Result<Credential> ForNode(const ClusterToken& token, const std::string& executor_id);
  static Result<Credential> ForStatus(const ClusterToken& token);
  static Result<Credential> Parse(std::string_view text);
  // Refuses a group/world-readable file, like ClusterToken::ReadFile.
  static Result<Credential> ReadFile(const std::string& path);
  std::string ToText() const;
  Status WriteFile(const std::string& path) const;  // mode 0600
  // 64 lower-case hex characters of the key (the status server's bearer token).
  std::string KeyHex() const;
  // "the cluster token", "the node credential of executor 3", "the status key".
  std::string Describe() const;
};

// Which roles the N slots get, in TensorFlowOnSpark's order: num_ps "ps"
// tasks, then one chief (or "master"), then one "evaluator", then "worker"s.
struct ClusterTemplate {
  int num_nodes = 1;
  int num_ps = 0;
  std::optional<std::string> master_node;  // "chief" or "master"
  bool eval_node = false;

  // kInvalidArgument when the roles do not fit in num_nodes.
  Status Validate() const;
  // The (job, index) of the i-th slot, i in [0, num_nodes).
  std::pair<std::string, int> Slot(int i) const;
  // How many nodes are fed (the chief/master and the workers): every node
  // but the ps and the evaluator.
  int FedNodes() const { return num_nodes - num_ps - (eval_node ? 1 : 0); }
};

// A node's identity and resources, as it registers them.
struct NodeInfo {
  std::string executor_id;  // the engine's stable id: a Spark executor, a Slurm rank
  std::string host;
  std::vector<uint32_t> ports;  // ports[0] is the task's address port
  int32_t pid = 0;
  std::vector<int32_t> gpus;
  std::string agent_address;
  std::string feed_socket;  // the node's external feed socket; "" : none
  // Filled by the server when the barrier completes.
  std::string job_name;
  int32_t task_index = -1;
};

// What every node (and the driver) knows once the barrier completes.
struct FormedCluster {
  std::string cluster_id;
  // Elastic runs: the round (RendezvousServer::Reform; 0 first) and why it
  // began.
  int round = 0;
  std::string round_reason;
  std::vector<NodeInfo> nodes;  // in slot order
  // nodes[i]'s placement, laid out once by the server (drover/placement.h).
  std::vector<Placement> placements;
  ClusterSpec spec;  // derived from the placements: job -> "host:ports[0]"
  // The receiving node's index in `nodes`; -1 on the driver.
  int self = -1;
  Milliseconds heartbeat_interval{1000};
  // How long an agent whose payload stays the same may go between
  // heartbeats (ServerOptions::quiet_heartbeat_interval); 0: never quiet.
  Milliseconds quiet_heartbeat_interval{0};
  // Every node's, whole or not. A node that did not get the node list
  // (NodeList, docs/protocol.md "The node list") holds only its own entry in
  // `nodes` and `placements` (self 0) and an empty `spec`; the sizes are here.
  int node_count = 0;
  std::map<std::string, int> job_sizes;  // job -> how many tasks it has
  bool has_node_list = true;

  // The receiving node's placement; nullptr on the driver.
  const Placement* own() const {
    return self >= 0 && static_cast<size_t>(self) < placements.size()
               ? &placements[static_cast<size_t>(self)]
               : nullptr;
  }
};

// What a node's heartbeats carry besides being alive.
// How a node's program ended, as its agent saw it.
struct ProgramEnd {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // 0 when it exited
  std::string text;    // "exit code 1", "killed by SIGKILL"
  double runtime_s = 0;
};

struct HeartbeatPayload {
  int32_t program_pid = 0;  // 0: not known
  // Set once the program ended. Through etcd it goes into the status the
  // node leaves behind (left/ID, errors/ID), so that the run's record has
  // it after the node's keys are gone; the built-in server learns it from
  // the agent's own exit.
  std::optional<ProgramEnd> program_end;
  std::optional<FeedProgress> feed;
  std::vector<MetricValue> metrics;  // the program's reports, each name's last
  // Whether every change to this payload makes change_fd readable (or, with
  // change_fd -1, the payload never changes). Only then may the heartbeats go
  // quiet while it stays the same: the next one comes within the cluster's
  // quiet interval, or as soon as change_fd is readable, instead of every
  // interval (docs/protocol.md, "Quiet heartbeats"). A fed node's counters
  // change in its program's process, unannounced.
  bool changes_announced = false;
  int change_fd = -1;  // not read by the heartbeat: only waited for
};

// One node's payload in a host's heartbeat (RendezvousClient::StartHostHeartbeats).
struct NodeHeartbeat {
  std::string executor_id;
  HeartbeatPayload payload;
};

struct NodeStatus {
  NodeInfo node;
  int32_t program_pid = 0;           // from the last heartbeat
  std::optional<FeedProgress> feed;  // from the last heartbeat
  std::vector<MetricValue> metrics;  // from the last heartbeat
  bool alive = true;
  bool left = false;  // finished and said so (LEAVE); not alive, not dead
  Milliseconds last_heartbeat_age{0};
  std::string error;                      // reported by the node, or why it was declared dead
  bool reported = false;                  // through etcd: `error` is the node's own report
  std::optional<ProgramEnd> program_end;  // through etcd: as the node left or failed
  std::optional<Placement> placement;     // through etcd: its place in the formed round
  std::vector<std::string> last_log_lines;
  // Through etcd: the run ended after forming with the node, before it
  // started its program (Register's kCancelled); it left.
  bool ended_before_start = false;
};

struct ClusterState {
  std::string phase;  // "reserving", "formed", "stopped"
  int registered = 0;
  int expected = 0;
  // The etcd backend's (the built-in server leaves them as they are): the
  // round, why it began, and why the run stopped.
  int round = 0;
  std::string round_reason;
  std::string stop_reason;
  // How long the round took to form, from the node that began it to the one
  // that formed it (two hosts' clocks); unset before it formed.
  std::optional<double> rendezvous_s;
  std::vector<NodeStatus> nodes;
};

// Something the driver must hear about after the barrier.
struct NodeEvent {
  // kLeft: the node's agent finished and said so (LEAVE) before it closed.
  // kJoining (elastic servers): a node registered after the cluster formed
  // and waits for the next round (RendezvousServer::Reform admits it).
  // kRegistered (elastic servers): a node registered for the round being
  // reserved, so that a driver holding the round hears of it at once.
  enum class Kind { kDead, kError, kStopped, kLeft, kJoining, kRegistered };
  Kind kind;
  NodeInfo node;
  std::string message;
  std::vector<std::string> last_log_lines;
};

struct RendezvousServerOptions {
  std::string bind_address = "0.0.0.0";
  uint16_t port = 0;  // 0: an ephemeral port, see RendezvousServer::port()
  ClusterToken token;
  ClusterTemplate cluster;
  std::string cluster_id;  // "" : generated
  Milliseconds reservation_timeout{600'000};
  // From accept to AUTH; also how long a started frame may take to finish.
  Milliseconds handshake_timeout{10'000};
  // Connections that have not authenticated yet, at most: at the limit the
  // server stops accepting (others wait in the kernel's backlog) until one
  // authenticates, fails or times out (docs/security.md).
  size_t max_unauthenticated_connections = 1024;
  // After an ERROR frame, how long the peer has to read it and close before
  // the server closes anyway (a peer that stops reading holds nothing).
  Milliseconds drain_timeout{2'000};
  // The key-value store's bounds (docs/security.md). A request past one is
  // answered RESOURCE_EXHAUSTED (kFailedPrecondition at the client), naming
  // it; the connection stays usable. max_kv_bytes counts stored keys and
  // values and the keys parked WAITs name, each key 64 bytes more.
  size_t max_kv_keys = 100'000;
  uint64_t max_kv_bytes = uint64_t{256} << 20;
  size_t max_kv_waits = 16'384;  // parked WAITs, all connections
  size_t max_kv_waits_per_connection = 64;
  Milliseconds heartbeat_interval{1'000};
  int missed_heartbeats_until_dead = 5;
  // An agent whose payload has not changed may heartbeat this seldom
  // (Heartbeat.quiet) and is then declared dead after this much more silence;
  // 0: every interval. Connections also get TCP keepalive (idle and probe
  // interval heartbeat_interval, missed_heartbeats_until_dead probes), so a
  // host that stops answering is found as soon as with every-interval
  // heartbeats (docs/protocol.md, "Quiet heartbeats").
  Milliseconds quiet_heartbeat_interval{5'000};
  // Nodes that register with NodeList::kAuto get the whole node list when
  // the cluster has at most this many nodes, else only their own entry.
  int node_list_limit = 1024;
  // Fits the largest valid request (a COMPARE_SET of two 1 MiB values).
  uint32_t max_frame_bytes = (2u << 20) + (8u << 10);
  // Elastic (docs/protocol.md, "Rounds"): the formed cluster may be formed
  // again (Reform) over the connections the nodes hold, and a node that
  // registers after it formed waits for the next round (a kJoining event)
  // instead of being refused.
  bool elastic = false;
  // Called on the loop thread: keep it short, do not call back into the server.
  std::function<void(const NodeEvent&)> on_event;
  // Called on the loop thread once the barrier has an outcome (the cluster
  // formed, the reservation timed out, the server stopped) and again for each
  // round an elastic server forms, so that a caller waits for it instead of
  // polling QueryState. Same rules as on_event.
  std::function<void()> on_outcome;
  // Called on the loop thread with each line of the server's log (without
  // the "drover rendezvous: " prefix or a newline); unset: the line goes to
  // stderr with the prefix. Same rules as on_event.
  std::function<void(const std::string&)> log;
  // Called on the loop thread for every connection closed for a bad frame,
  // failed auth or timeout, with the peer and the reason (tests, logs).
  std::function<void(const std::string& peer, const std::string& reason)> on_rejected;
};

// The next round of an elastic cluster (RendezvousServer::Reform).
struct ReformPlan {
  // The roles of the next round; num_nodes counts the members that will
  // register again plus the admitted joiners.
  ClusterTemplate cluster;
  std::string cluster_id;
  int round = 0;
  std::string reason;  // why the round begins, sent to every node
  // Parked joiners (kJoining events) that take part in the next round.
  std::vector<std::string> admit;
  // The round forms only when FormWithRegistered says so, not when the
  // count is reached (the caller has work to do between the two).
  bool hold = false;
};

class RendezvousServer {
 public:
  // Binds, listens and starts the loop thread.
  static Result<std::unique_ptr<RendezvousServer>> Start(RendezvousServerOptions options);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  uint16_t port() const;

  // Blocks until the barrier completes, the reservation times out
  // (kDeadlineExceeded listing registered and missing slots) or `deadline`.
  Result<FormedCluster> WaitForCluster(Deadline deadline);

  ClusterState QueryState();
  // Sends STOP to one node / every node.
  Status StopNode(const std::string& executor_id);
  // The value the KV store holds under `key` (what nodes SET); nullopt when
  // none, or once the server is shut down.
  std::optional<std::string> StoredValue(const std::string& key);
  // Deletes every key-value key that starts with `prefix`; returns how many.
  size_t DeleteKeys(const std::string& prefix);
  // Elastic servers, once the cluster formed: sends REFORM to every member
  // still connected (one that left too), forgets the members, and waits for
  // plan.cluster.num_nodes registrations under plan.cluster_id, the admitted
  // joiners counting at once. WaitForCluster then waits for the new round.
  // kFailedPrecondition on a server that is not elastic or not formed.
  Status Reform(const ReformPlan& plan);
  // Elastic servers, while reserving: forms the cluster now with the nodes
  // registered, if there are at least `minimum` (else kFailedPrecondition,
  // naming who registered). Returns how many it formed with.
  Result<int> FormWithRegistered(int minimum);
  void StopAll();
  // Stops the loop and closes every connection; idempotent.
  void Shutdown();

 private:
  class Impl;
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// An `etcd://` rendezvous (docs/protocol.md, "The etcd backend"): how to
// reach etcd, and the run's shape, which the first node writes under the
// prefix and every later one must match.
struct EtcdRunOptions {
  // TLS and etcd's own users (--etcd-cacert, --etcd-cert, --etcd-key,
  // --etcd-user); nothing of the cluster token goes to etcd.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string user;
  std::string password;
  // The roles; num_nodes is the most nodes a round takes (MAX). 0: only
  // watch the run (drover status): no lease, nothing written.
  ClusterTemplate cluster;
  int min_nodes = 0;  // 0: cluster.num_nodes
  // A round with MIN but fewer than MAX nodes forms this long after MIN
  // registered (a round after a loss: once every survivor registered).
  Milliseconds join_wait{30'000};
  // Program failures the run survives (each starts a new round).
  int max_restarts = 0;
  // A node is alive while it keeps its lease; lost this long after its
  // agent stopped refreshing it.
  Milliseconds lease_ttl{10'000};
  // How long a node goes on without reaching an etcd quorum before it
  // gives up ("etcd: no quorum at ...").
  Milliseconds unavailable_timeout{30'000};
  // One request to one etcd member, at most.
  Milliseconds request_timeout{5'000};
};

// Whether a registering node's CLUSTER carries every node (TF_CONFIG and
// DROVER_CLUSTER_SPEC need them; torch, JAX and MPI programs need only the
// node's own placement). kAuto: when the cluster has at most
// RendezvousServerOptions::node_list_limit nodes.
enum class NodeList { kAuto, kAlways, kNever };

// "auto", "always", "never"; kInvalidArgument naming the three otherwise.
Result<NodeList> ParseNodeList(std::string_view text);
std::string_view NodeListName(NodeList list);

struct RendezvousClientOptions {
  std::string address;  // "host:port", or etcd://HOST:PORT[,HOST:PORT...]/PREFIX
  // The cluster token (Credential::Cluster: every message), or a node
  // credential (only that node's slot; docs/security.md).
  Credential credential;
  // A host connection opened with one of its nodes' credentials: the other
  // nodes' credentials, each proved in that node's REGISTER (RegisterHost;
  // docs/protocol.md, "Host connections"). Unused with the cluster token.
  std::vector<Credential> host_credentials;
  std::string name;  // for the server's logs; cut to 256 bytes
  // Connection retries: exponential backoff with jitter between these.
  Milliseconds initial_backoff{100};
  Milliseconds max_backoff{2'000};
  uint32_t max_frame_bytes = 64u << 20;
  NodeList node_list = NodeList::kAuto;  // built-in server only; etcd sends every node
  EtcdRunOptions etcd;                   // etcd:// addresses only; the credential is not used then
};

// Errors: an ERROR frame from the server keeps the server's message and maps
// AUTH_FAILED, PERMISSION_DENIED and FRAME_AUTH_FAILED to kPermissionDenied,
// RESERVATION_TIMEOUT to kDeadlineExceeded, CLUSTER_FORMED to
// kAlreadyExists, STOPPED to kUnavailable. After any ERROR
// frame, a closed or reset connection, a bad frame or a failed write, the
// connection is closed and every later call returns that same Status. A call
// that only ran out of its deadline, and a KV reply's error (e.g. a WAIT's
// kDeadlineExceeded), leave the connection usable.
class RendezvousClient {
 public:
  // Connects (retrying until `deadline`) and authenticates; from then on
  // every frame either way is sealed (docs/protocol.md).
  // kDeadlineExceeded names the address; kPermissionDenied for a wrong token
  // or a server that cannot prove it holds the token; kInvalidArgument for an
  // address that is not HOST:PORT or [V6ADDR]:PORT, a key not 32 bytes, or
  // the status key. With a node credential, a call its node may not make
  // (registering another executor, StopAll) is kPermissionDenied, and the
  // server closes the connection.
  static Result<std::unique_ptr<RendezvousClient>> Connect(RendezvousClientOptions options,
                                                           Deadline deadline);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  // Registers and waits for the barrier. Errors carry the server's message
  // (e.g. the reservation timeout's list of missing nodes); kAlreadyExists
  // when the cluster formed without this node. Through etcd, kUnavailable
  // for a run that has ended, and kCancelled for one that ended after a
  // round formed with this node but before the node read it: the node takes
  // no part; Leave records that it stopped, and WaitForInstruction returns
  // the run's STOP (whether the run failed).
  Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline);
  // A host's agent: registers every node of `nodes` (this host's) on this
  // one connection and waits for the barrier; the result is each node's
  // view, in `nodes`' order. The server then counts this connection's
  // heartbeats for all of them, and its close as theirs. Needs the cluster
  // token, or each node's credential (the one the client authenticated
  // with and RendezvousClientOptions::host_credentials: kInvalidArgument,
  // before sending, for a node with none); not in elastic runs, nor
  // through etcd (docs/protocol.md, "Host connections").
  Result<std::vector<FormedCluster>> RegisterHost(const std::vector<NodeInfo>& nodes,
                                                  Deadline deadline);

  // Sends a heartbeat every `interval` from a thread the client owns, until
  // the client is destroyed. `payload`, when given, is called on that thread
  // before each heartbeat and must be thread-safe. Called again, it takes the
  // new interval (and payload, when given) and sends one heartbeat at once.
  // Once the payload (none counts as one that never changes) has stayed the
  // same for an interval and announces its changes, the heartbeats go quiet
  // if the cluster allows it (FormedCluster::quiet_heartbeat_interval).
  void StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload = {});
  // A host's heartbeats, after RegisterHost: as StartHeartbeats, with one
  // payload per node, by executor id. Each heartbeat counts for every node
  // the connection carries, whether `payloads` names it or not; a payload
  // for a node the connection does not carry is ignored by the server.
  // kFailedPrecondition before RegisterHost succeeded, and through etcd.
  Status StartHostHeartbeats(Milliseconds interval,
                             std::function<std::vector<NodeHeartbeat>()> payloads = {});

  Status ReportError(const std::string& executor_id, const std::string& message,
                     const std::vector<std::string>& last_log_lines);
  Result<ClusterState> QueryState(Deadline deadline);
  Status StopAll();
  // Tells the server this node's program finished, so the connection closing
  // next is not reported as a death. With a heartbeat payload, one last
  // heartbeat goes first, so the server keeps the node's final counts.
  Status Leave();
  // A host connection's Leave: `executor_id`'s program finished. With host
  // heartbeat payloads, one last heartbeat goes first, as for Leave.
  Status LeaveNode(const std::string& executor_id);

  // Whether the server told this node to stop, waiting up to `deadline`, or
  // until `wake_fd` (when >= 0; e.g. the caller's eventfd, polled, never read)
  // is readable: false for both, so a watcher thread can block without a
  // timeout and still be told to quit.
  Result<bool> WaitForStop(Deadline deadline, int wake_fd = -1);

  // What the server told this node: nothing yet (the deadline or wake_fd),
  // STOP, or REFORM (elastic runs: stop the program, Register again for
  // `round`). A REFORM is reported once; a STOP every time after it came.
  // On a host connection a STOP for one of its nodes (the driver's
  // StopNode) names it in `executor_id` and is reported once; a STOP with
  // no executor id is every node's.
  struct Instruction {
    enum class Kind { kNone, kStop, kReform };
    Kind kind = Kind::kNone;
    int round = 0;
    std::string reason;       // a REFORM's; with the etcd backend also a STOP's
    bool failed = false;      // a STOP because the run failed (etcd backend)
    std::string executor_id;  // a host connection's STOP for one node; "" : all
  };
  Result<Instruction> WaitForInstruction(Deadline deadline, int wake_fd = -1);

  // The key-value store (PyTorch TCPStore-like).
  Status Set(const std::string& key, const std::string& value, Deadline deadline);
  Result<std::optional<std::string>> Get(const std::string& key, Deadline deadline);
  Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline);
  // kDeadlineExceeded naming the keys still missing.
  Status Wait(const std::vector<std::string>& keys, Deadline deadline);
  // Stores `desired` if the value is `expected` ("" and absent match);
  // returns the value stored afterwards.
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired, Deadline deadline);
  Result<bool> Delete(const std::string& key, Deadline deadline);

  // What the calls go to: the built-in server or etcd.
  class Backend;

 private:
  explicit RendezvousClient(std::unique_ptr<Backend> backend);
  std::unique_ptr<Backend> backend_;
};

}  // namespace drover

#endif  // DROVER_RENDEZVOUS_H_

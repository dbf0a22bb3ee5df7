// Agent: one node of a `drover run` (docs/run.md). It reserves the node's
// ports, registers with the rendezvous, writes the context file, starts the
// user's program with the cluster's environment, heartbeats, relays the
// driver's STOP, and reports a failed program with its last lines of output.
// `drover agent` is a thin CLI over this type.
//
// An Agent owns its rendezvous connection and the program's process group;
// neither outlives Run(). Run() is called once, from a thread that outlives
// the program (its parent-death signal is tied to that thread); it makes the
// process a child subreaper (PR_SET_CHILD_SUBREAPER), so processes the
// program leaves behind are adopted and reaped by the agent, not by an init
// that may be slow to. Interrupt() may be called from any thread or a signal
// handler.
//
// The agent reads environment variables (the program inherits them), the
// host name and the network interfaces only through the Environment it is
// given, which must outlive it: `drover agent` passes ProcessEnvironment().

#ifndef DROVER_AGENT_H_
#define DROVER_AGENT_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/environment.h"
#include "drover/rendezvous.h"

namespace drover {

// One rendezvous connection for a host's nodes (docs/protocol.md, "Host
// connections"; torchrun's shape: one agent per host): one handshake, one
// heartbeat a tick for all of them, one connection on the server, one
// thread reading it. Each node still runs in an Agent of its own, whose
// AgentOptions::host_connection names this; the connection is made once
// every node has reached registration, or ended before it, and registers
// them together (RendezvousClient::RegisterHost). A STOP for one node
// reaches that node's agent only; a lost connection is every node's.
// The built-in rendezvous only, not elastic. It opens with the cluster
// token, or with one node's credential and proves the others' in their
// REGISTERs (RendezvousClientOptions::host_credentials).
class HostConnection {
 public:
  // `executor_ids`: the host's nodes, in the order they register.
  // kInvalidArgument for an etcd:// address, the status key, a node
  // credential without every other node's in host_credentials, or no ids
  // or one twice.
  static Result<std::shared_ptr<HostConnection>> Create(RendezvousClientOptions options,
                                                        std::vector<std::string> executor_ids);
  ~HostConnection();
  HostConnection(const HostConnection&) = delete;
  HostConnection& operator=(const HostConnection&) = delete;

  class Impl;
  Impl& impl() { return *impl_; }  // for Agent

 private:
  explicit HostConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct AgentOptions {
  // "host:port" (the built-in server), or etcd://HOST:PORT[,...]/PREFIX: the
  // nodes form among themselves through etcd (docs/run.md, "Runs without a
  // driver"); no credential is needed then, and the agent is elastic.
  std::string rendezvous_address;
  EtcdRunOptions etcd;  // etcd:// only: etcd's TLS and user, the run's shape
  // This node's credential (Credential::ForNode for executor_id: what the
  // engines hand each agent), or the cluster token, from which the agent
  // derives that credential: either way it authenticates as its own node
  // only (docs/security.md). Another executor's credential, or the status
  // key, fails Run() before it connects.
  Credential credential;
  std::string executor_id;
  // Non-null: the node registers, heartbeats and hears STOP on its host's
  // connection, made for executor_id among others (not elastic, not etcd).
  // The connection holds the cluster token, or every node's credential;
  // `credential` still serves the agent's own calls (the feed's commits,
  // as this node).
  std::shared_ptr<HostConnection> host_connection;
  std::string host;  // the node's address in the cluster; "" : the Environment's HostName()
  int num_ports = 1;
  // CUDA_VISIBLE_DEVICES: nullopt leaves it as inherited; {} sets it to "".
  std::optional<std::vector<int>> gpus;
  std::string log_dir;      // "" : none
  std::string working_dir;  // the program's cwd; "" : the agent's
  Milliseconds grace{10'000};
  // Whether the program gets the whole cluster (TF_CONFIG, DROVER_CLUSTER_SPEC,
  // the context's cluster_spec): kAuto when it has at most 1,024 nodes. Built-in
  // rendezvous only; through etcd every node gets it.
  NodeList node_list = NodeList::kAuto;
  // How long to wait for the cluster to form; the server's own timeout
  // should come first, so the agent waits a little longer.
  Milliseconds reservation_timeout{600'000};
  int restart_count = 0;
  // An elastic run (`drover run --nodes MIN:MAX`): the agent stays up across
  // rounds. A REFORM from the driver stops the program and registers the
  // node again on the same connection; a program that fails is reported and
  // the agent waits for the driver's REFORM (restart in place) or STOP.
  bool elastic = false;
  // Why the group was re-formed ("worker:1 on h2: killed by SIGKILL"); ""
  // in the first round (DROVER_RESTART_REASON, the context's restart_reason).
  std::string restart_reason;
  std::vector<std::string> command;  // argv; argv[0] looked up in PATH
  // The feed plan file of `drover run --input` (docs/feed.md); "" : no
  // feeding. Chief, master and worker nodes get a share of it.
  std::string feed_plan;
  // The plan inline (FeedPlan JSON), instead of feed_plan: the Python
  // driver's external plans (drover.Cluster.train), so no shared filesystem
  // is needed. With an external plan the agent makes its feed socket's
  // directory before registering and publishes the socket in
  // NodeInfo::feed_socket (every node; only chief/master/worker serve it).
  std::string feed_plan_json;
  // Non-zero: the pid of the process that started the agent (a Dask
  // worker). The agent exits at once when that process is already gone, and
  // takes its death as a SIGTERM (PR_SET_PDEATHSIG; it follows the thread
  // that started the agent, so start it from a long-lived one).
  int exit_with_parent = 0;
  // The `drover` executable that runs `drover guard` (the program's parent:
  // nothing the program starts outlives it) and `drover feeder`; "" : this
  // process's.
  std::string drover_binary;
  // Where the program's output and the agent's own lines go.
  int stdout_fd = 1;
  int stderr_fd = 2;
};

class Agent {
 public:
  Agent(AgentOptions options, const Environment& env);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the node to its end and returns the process exit code:
  //   - the program's code (128 + signal when killed by one); on a non-zero
  //     code the agent first sends REPORT_ERROR "<job>:<index> exited with
  //     exit code 3" / "... killed by SIGKILL" and the last 20 lines;
  //   - 0 when the driver's STOP ended the program (no error reported);
  //   - 128 + signal after Interrupt(signal);
  //   - 1 when the node cannot start (bad options, the rendezvous refused or
  //     timed out, the program cannot be run, the exit_with_parent process is
  //     gone), after one line on stderr:
  //     "drover agent <executor-id>: <message>".
  int Run();

  // Asks Run() to stop the program (SIGTERM, SIGKILL after grace) and return
  // 128 + signal. Async-signal-safe. Returns false when the program has not
  // been started yet and Run() is blocked registering: the caller (a signal
  // handler) may then simply exit.
  bool Interrupt(int signal);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover

#endif  // DROVER_AGENT_H_

#include "cli/agent_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/cluster_flags.h"
#include "cli/error_line.h"
#include "cli/etcd_flags.h"
#include "cli/resolve_command.h"
#include "drover/agent.h"
#include "engine/engine.h"  // HostLaunch: the --node list drover run sends
#include "os/output_relay.h"
#include "os/process_tree.h"

namespace drover::cli {
namespace {

struct AgentFlags {
  std::string rendezvous;
  std::string token_file;
  std::string executor_id;
  std::string host;
  int ports = 1;
  std::string gpus;  // "" : not given
  std::string log_dir;
  std::string working_dir;
  double grace = 10;
  NodeList node_list = NodeList::kAuto;
  double reservation_timeout = 600;
  int restart_count = 0;
  std::string restart_reason;
  bool elastic = false;
  // etcd:// rendezvous only (docs/run.md, "Runs without a driver").
  std::string nodes;  // "N" or "MIN:MAX"
  int ps = 0;
  bool chief = false;
  bool evaluator = false;
  int max_restarts = 0;
  double join_wait = 30;
  double lease_ttl = 10;
  double etcd_timeout = 30;
  EtcdFlags etcd;
  std::string feed_plan;
  std::string feed_plan_json;
  int exit_with_parent = 0;
  // A host's agent (drover run's local engine): ID:OUTPUT_FD:GPUS:TOKEN_FILE
  // for each node it runs, and where each node's exit code goes.
  std::vector<std::string> host_nodes;
  int status_fd = -1;
  std::vector<std::string> command;
};

// The running agents (one, or a host's nodes), for the signal handler.
constexpr size_t kMaxHostNodes = HostLaunch::kMaxNodes;
std::atomic<Agent*> g_agents[kMaxHostNodes];

void OnSignal(int signal) {
  // Before a program starts there is nothing to stop: the reserved ports
  // and the connections go with the process.
  bool started = false;
  for (std::atomic<Agent*>& slot : g_agents) {
    Agent* agent = slot.load();
    if (agent != nullptr && agent->Interrupt(signal)) started = true;
  }
  if (!started) ::_exit(128 + signal);
}

// Runs the agents with the signal handler installed; each one's exit code,
// handed to `done` from its own thread as it ends.
void RunAgents(const std::vector<Agent*>& agents, bool stop_at_end_of_stdin,
               const std::function<void(size_t, int)>& done);

// `--token-file -`: the credential is the first line on stdin (an ssh or
// slurm engine's agent: no secret in a file or in argv), read within `timeout`.
Result<Credential> ReadCredentialFromStdin(Milliseconds timeout) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    char c;
    pollfd in{STDIN_FILENO, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&in, 1, static_cast<int>(left.count())) == 0) {
      return Status::DeadlineExceeded("no credential on stdin (--token-file -) within " +
                                      std::to_string(timeout.count() / 1000) + " s");
    }
    const ssize_t got = ::read(STDIN_FILENO, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::InvalidArgument("stdin ended before the credential (--token-file -)");
    }
    if (c == '\n') break;
    // The longest credential line: a node's, with a 256-byte executor id.
    if (line.size() > 1024) return Status::InvalidArgument("stdin holds no credential");
    line.push_back(c);
  }
  return Credential::Parse(line);
}

// After the credential, stdin stays open as long as the driver (through ssh)
// lives: its end of file stops the node as SIGTERM would, so a driver that
// dies, even by SIGKILL, leaves nothing running on remote hosts.
void StopAtEndOfStdin() {
  std::thread([] {
    char buffer[256];
    for (;;) {
      const ssize_t got = ::read(STDIN_FILENO, buffer, sizeof(buffer));
      if (got > 0 || (got < 0 && errno == EINTR)) continue;
      ::kill(::getpid(), SIGTERM);
      return;
    }
  }).detach();
}

Milliseconds Seconds(double seconds) {
  return std::chrono::duration_cast<Milliseconds>(std::chrono::duration<double>(seconds));
}

// "0,1" -> {0, 1}; "none" -> {}.
Result<std::vector<int>> ParseGpus(const std::string& text) {
  std::vector<int> gpus;
  if (text == "none") return gpus;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(',', start);
    std::string item = text.substr(start, end == std::string::npos ? end : end - start);
    size_t used = 0;
    int gpu = -1;
    try {
      gpu = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || gpu < 0) {
      return Status::InvalidArgument("--gpus takes GPU indices like 0,1 or 'none'; got '" + text +
                                     "'");
    }
    gpus.push_back(gpu);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return gpus;
}

// The etcd rendezvous' options from the flags; the password of
// --etcd-user NAME comes from DROVER_ETCD_PASSWORD.
Result<EtcdRunOptions> EtcdOptionsOf(const AgentFlags& flags) {
  EtcdRunOptions etcd;
  if (flags.nodes.empty()) {
    return Status::InvalidArgument("an etcd:// rendezvous needs --nodes N or --nodes MIN:MAX");
  }
  try {
    auto [min, max] = ParseNodeRange(flags.nodes, "--nodes", 1);
    etcd.cluster.num_nodes = *max;
    etcd.min_nodes = min.value_or(*max);
  } catch (const CLI::ValidationError& error) {
    return Status::InvalidArgument(error.what());
  }
  etcd.cluster.num_ps = flags.ps;
  if (flags.chief) etcd.cluster.master_node = "chief";
  etcd.cluster.eval_node = flags.evaluator;
  etcd.max_restarts = flags.max_restarts;
  etcd.join_wait = Seconds(flags.join_wait);
  etcd.lease_ttl = Seconds(flags.lease_ttl);
  etcd.unavailable_timeout = Seconds(flags.etcd_timeout);
  flags.etcd.ApplyTo(&etcd);
  return etcd;
}

// torchrun's etcd nodes need no id: this host and this process.
std::string DefaultExecutorId() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + "-" + std::to_string(::getpid());
}

// Everything the flags say about a node but its credential.
Result<AgentOptions> NodeOptions(const AgentFlags& flags) {
  AgentOptions options;
  options.rendezvous_address = flags.rendezvous;
  if (flags.rendezvous.rfind("etcd://", 0) == 0) {
    DROVER_ASSIGN_OR_RETURN(options.etcd, EtcdOptionsOf(flags));
  } else if (!flags.nodes.empty()) {
    return Status::InvalidArgument(
        "--nodes is for an etcd:// rendezvous; with drover run the driver says how many nodes");
  }
  options.executor_id = flags.executor_id;
  options.host = flags.host;
  options.num_ports = flags.ports;
  if (!flags.gpus.empty()) {
    DROVER_ASSIGN_OR_RETURN(options.gpus, ParseGpus(flags.gpus));
  }
  options.log_dir = flags.log_dir;
  options.working_dir = flags.working_dir;
  options.grace = Seconds(flags.grace);
  options.node_list = flags.node_list;
  options.reservation_timeout = Seconds(flags.reservation_timeout);
  options.restart_count = flags.restart_count;
  options.restart_reason = flags.restart_reason;
  options.elastic = flags.elastic;
  if (!flags.feed_plan.empty() && !flags.feed_plan_json.empty()) {
    return Status::InvalidArgument(
        "--feed-plan and --feed-plan-json are two ways to give the plan: give one");
  }
  options.feed_plan = flags.feed_plan;
  options.feed_plan_json = flags.feed_plan_json;
  options.exit_with_parent = flags.exit_with_parent;
  options.command = flags.command;
  return options;
}

int RunAgent(AgentFlags flags) {
  if (flags.executor_id.empty()) {
    if (flags.rendezvous.rfind("etcd://", 0) != 0) {
      PrintErrorLine("drover agent: --executor-id is required with a HOST:PORT rendezvous");
      return kExitBadInput;
    }
    flags.executor_id = DefaultExecutorId();
  }
  auto fail = [&](const Status& status, int code) {
    PrintErrorLine("drover agent " + flags.executor_id + ": " + status.message());
    return code;
  };
  const bool through_etcd = flags.rendezvous.rfind("etcd://", 0) == 0;
  const bool token_on_stdin = flags.token_file == "-";
  if (!through_etcd && flags.token_file.empty()) {
    return fail(Status::InvalidArgument("--token-file is required with a HOST:PORT rendezvous"),
                kExitBadInput);
  }
  Result<AgentOptions> options = NodeOptions(flags);
  if (!options.ok()) return fail(options.status(), kExitBadInput);
  if (!through_etcd) {
    Result<Credential> credential = token_on_stdin ? ReadCredentialFromStdin(Seconds(60))
                                                   : Credential::ReadFile(flags.token_file);
    if (!credential.ok()) return fail(credential.status(), kExitBadInput);
    options->credential = std::move(credential).value();
  }

  int code = 0;
  {
    Agent agent(std::move(options).value(), ProcessEnvironment());
    RunAgents({&agent}, token_on_stdin, [&code](size_t, int ended) { code = ended; });
  }
  // The agent is a child subreaper: what the program's guard could not stop
  // (the guard was SIGKILLed) was reparented here. The feeder and the guard
  // are gone by now, so everything below this process is a leftover.
  os::KillOwnDescendants(std::chrono::seconds(5));
  return code;
}

void RunAgents(const std::vector<Agent*>& agents, bool stop_at_end_of_stdin,
               const std::function<void(size_t, int)>& done) {
  // A driver or terminal that goes away must not kill the agent mid-write;
  // the program gets the default disposition back.
  ::signal(SIGPIPE, SIG_IGN);
  for (size_t i = 0; i < agents.size(); ++i) g_agents[i] = agents[i];
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(signal, &action, nullptr);
  if (stop_at_end_of_stdin) StopAtEndOfStdin();
  if (agents.size() == 1) {
    done(0, agents[0]->Run());
  } else {
    // Each node's program's parent-death signal follows the thread that
    // started it: each thread lives until its node has ended.
    std::vector<std::thread> threads;
    for (size_t i = 0; i < agents.size(); ++i) {
      threads.emplace_back([&agents, &done, i] { done(i, agents[i]->Run()); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(signal, &default_action, nullptr);
  for (size_t i = 0; i < agents.size(); ++i) g_agents[i] = nullptr;
}

// One node of a host's agent, from ID:OUTPUT_FD:GPUS[:TOKEN_FILE] (the
// token file last: a path may hold colons). OUTPUT_FD "-": relayed on
// stdout; TOKEN_FILE "-": the next line of stdin.
struct HostNode {
  std::string executor_id;
  int output_fd = -1;  // kRelayed: a pipe of the agent's output relay
  static constexpr int kRelayed = -1;
  std::string gpus;
  std::string token_file;  // "" : the host's connection (--token-file)
};

Result<HostNode> ParseHostNode(const std::string& text) {
  const Status bad =
      Status::InvalidArgument("--node takes ID:OUTPUT_FD:GPUS[:TOKEN_FILE]; got '" + text + "'");
  HostNode node;
  size_t first = text.find(':');
  size_t second = first == std::string::npos ? first : text.find(':', first + 1);
  if (second == std::string::npos) return bad;
  size_t third = text.find(':', second + 1);
  node.executor_id = text.substr(0, first);
  const std::string fd = text.substr(first + 1, second - first - 1);
  node.gpus = text.substr(second + 1, third == std::string::npos ? third : third - second - 1);
  if (third != std::string::npos) node.token_file = text.substr(third + 1);
  if (node.executor_id.empty()) return bad;
  if (fd == "-") return node;
  size_t used = 0;
  try {
    node.output_fd = std::stoi(fd, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != fd.size() || node.output_fd < 1) return bad;
  return node;
}

// A host's agent's nodes, checked: --node's fields agree with each other and
// with --token-file and --status-fd.
Result<std::vector<HostNode>> ParseHostNodes(const AgentFlags& flags) {
  if (!flags.executor_id.empty() || !flags.gpus.empty()) {
    return Status::InvalidArgument(
        "--node gives each node its id and GPUs: not --executor-id or --gpus");
  }
  if (flags.rendezvous.rfind("etcd://", 0) == 0 || flags.elastic) {
    return Status::InvalidArgument(
        "--node is for a driver's HOST:PORT rendezvous in a run that is not elastic");
  }
  if (flags.host_nodes.size() > kMaxHostNodes) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxHostNodes) + " nodes an agent");
  }
  std::vector<HostNode> nodes;
  const bool shared = !flags.token_file.empty();
  for (const std::string& text : flags.host_nodes) {
    DROVER_ASSIGN_OR_RETURN(HostNode node, ParseHostNode(text));
    if (shared != node.token_file.empty()) {
      return Status::InvalidArgument(
          shared ? "with --token-file the nodes share the host's connection: --node " + text +
                       " takes no TOKEN_FILE"
                 : "--node " + text +
                       " needs its TOKEN_FILE, or give the cluster token with --token-file");
    }
    if (!nodes.empty() &&
        (node.output_fd == HostNode::kRelayed) != (nodes.front().output_fd == HostNode::kRelayed)) {
      return Status::InvalidArgument("--node " + text +
                                     ": every node's OUTPUT_FD is '-' (relayed), or none is");
    }
    nodes.push_back(std::move(node));
  }
  const bool relayed = nodes.front().output_fd == HostNode::kRelayed;
  if (relayed && flags.status_fd >= 0) {
    return Status::InvalidArgument(
        "relayed nodes (OUTPUT_FD '-') send their exit codes on stdout: no --status-fd");
  }
  if (!relayed && flags.status_fd < 3) {
    return Status::InvalidArgument("--node needs --status-fd FD");
  }
  return nodes;
}

// Relayed nodes (OUTPUT_FD '-', the ssh engine's host agent): each node's
// output, the agent's own lines and the exit codes go as frames on what was
// stdout (os/output_relay.h); the agent's own lines go with node 0's.
Result<std::unique_ptr<os::OutputRelay>> RelayOutput(std::vector<HostNode>& nodes, int* status_fd) {
  os::UniqueFd out(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
  if (!out.valid()) return Status::IoError(std::string("dup stdout: ") + std::strerror(errno));
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<os::OutputRelay> relay,
                          os::OutputRelay::Start(nodes.size(), std::move(out)));
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].output_fd = relay->TakeChannelWriter(i).Release();
  }
  *status_fd = relay->TakeStatusWriter().Release();
  std::cout.flush();
  ::dup2(nodes[0].output_fd, STDOUT_FILENO);
  ::dup2(nodes[0].output_fd, STDERR_FILENO);
  return relay;
}

// Ends the relay when the host's agent returns, every node ended (or none
// started): the relay sends what is left, then the stream ends.
struct RelayGuard {
  std::unique_ptr<os::OutputRelay> relay;
  int status_fd = -1;
  std::vector<HostNode>* nodes = nullptr;  // their channels, unless a node closed its own
  ~RelayGuard() {
    if (!relay) return;
    ::close(status_fd);
    for (HostNode& node : *nodes) {
      if (node.output_fd > 2) ::close(node.output_fd);
    }
    std::cout.flush();
    std::cerr.flush();
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::close(null);
    relay->Finish(std::chrono::seconds(10));
  }
};

// A host's agent: every node it was given, each in a thread of its own
// with its own output and exit code ("ID CODE" on --status-fd, or relayed),
// from one exec (torchrun's shape: one agent, a host's workers), on one
// rendezvous connection. It opens with --token-file (the cluster token),
// or else with the first node's TOKEN_FILE, its credential, and proves each
// other node's ("-": one line each on stdin, in order, which then stops
// every node when it ends, as `--token-file -` does).
int RunHostAgent(const AgentFlags& flags) {
  auto fail = [](const Status& status) {
    PrintErrorLine("drover agent: " + status.message());
    return kExitBadInput;
  };
  Result<std::vector<HostNode>> parsed = ParseHostNodes(flags);
  if (!parsed.ok()) return fail(parsed.status());
  std::vector<HostNode> nodes = std::move(parsed).value();
  RelayGuard relay{nullptr, flags.status_fd, &nodes};
  if (nodes.front().output_fd == HostNode::kRelayed) {
    Result<std::unique_ptr<os::OutputRelay>> started = RelayOutput(nodes, &relay.status_fd);
    if (!started.ok()) return fail(started.status());
    relay.relay = std::move(started).value();
  }
  const int status_fd = relay.status_fd;
  bool stdin_credentials = false;
  for (const HostNode& node : nodes) stdin_credentials |= node.token_file == "-";
  // Each node's credential, or the cluster token for them all.
  std::vector<Credential> credentials;
  RendezvousClientOptions options;
  if (!flags.token_file.empty()) {
    Result<Credential> token = Credential::ReadFile(flags.token_file);
    if (!token.ok()) return fail(token.status());
    credentials.assign(nodes.size(), *token);
    options.credential = std::move(token).value();
  } else {
    for (const HostNode& node : nodes) {
      Result<Credential> credential = node.token_file == "-"
                                          ? ReadCredentialFromStdin(Seconds(60))
                                          : Credential::ReadFile(node.token_file);
      if (!credential.ok()) {
        return fail(credential.status().WithContext("executor " + node.executor_id));
      }
      credentials.push_back(std::move(credential).value());
    }
    options.credential = credentials.front();
    options.host_credentials.assign(credentials.begin() + 1, credentials.end());
  }
  options.address = flags.rendezvous;
  options.name = "host of executors " + nodes.front().executor_id + "-" + nodes.back().executor_id;
  options.node_list = flags.node_list;
  std::vector<std::string> ids;
  for (const HostNode& node : nodes) ids.push_back(node.executor_id);
  Result<std::shared_ptr<HostConnection>> connection =
      HostConnection::Create(std::move(options), std::move(ids));
  if (!connection.ok()) return fail(connection.status());
  std::vector<std::unique_ptr<Agent>> agents;
  for (const HostNode& node : nodes) {
    AgentFlags one = flags;
    one.host_nodes.clear();
    one.token_file.clear();
    one.executor_id = node.executor_id;
    one.gpus = node.gpus;
    Result<AgentOptions> options = NodeOptions(one);
    if (!options.ok()) return fail(options.status().WithContext("executor " + node.executor_id));
    options->credential = credentials[agents.size()];
    options->host_connection = *connection;
    options->stdout_fd = options->stderr_fd = node.output_fd;
    agents.push_back(std::make_unique<Agent>(std::move(options).value(), ProcessEnvironment()));
  }
  std::vector<Agent*> running;
  for (const auto& agent : agents) running.push_back(agent.get());
  std::atomic<int> first_failure{0};
  RunAgents(running, stdin_credentials, [&](size_t i, int code) {
    // One write of a short line: whole, whatever the other threads write.
    const std::string line = nodes[i].executor_id + " " + std::to_string(code) + "\n";
    ssize_t ignored = ::write(status_fd, line.data(), line.size());
    (void)ignored;
    // The node's end of output for the driver; stdout stays for the others.
    if (nodes[i].output_fd > 2) ::close(nodes[i].output_fd);
    nodes[i].output_fd = -1;  // read by the relay's end, after the threads
    int none = 0;
    if (code != 0) first_failure.compare_exchange_strong(none, code);
  });
  // Each node's feeder is reaped by its own FeedService, as in a node's own
  // agent: the sweep below reaps any child, so it must come after them all.
  agents.clear();
  connection->reset();  // the nodes that did not leave are dead to the server now
  os::KillOwnDescendants(std::chrono::seconds(5));
  return first_failure.load();
}

}  // namespace

void AddAgentCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<AgentFlags>();
  CLI::App* agent = app.add_subcommand(
      "agent",
      "Run one node of a cluster, or a host's nodes (--node): register, then start COMMAND\n"
      "(used by drover run)");
  agent
      ->add_option("--rendezvous", flags->rendezvous,
                   "The rendezvous server, HOST:PORT; or etcd://HOST:PORT[,HOST:PORT...]/RUN:\n"
                   "the nodes form among themselves through etcd, with no drover run")
      ->required();
  agent->add_option("--token-file", flags->token_file,
                    "This node's credential, or the cluster token, from which the agent derives\n"
                    "it (a file of mode 0600); '-': the first line of stdin, and the node stops\n"
                    "when stdin ends (the ssh and slurm engines). Required with HOST:PORT.\n"
                    "With --node: the cluster token, for all the host's nodes");
  agent->add_option("--executor-id", flags->executor_id,
                    "This node's stable id (required with HOST:PORT; etcd: HOSTNAME-PID)");
  agent->add_option("--nodes", flags->nodes, "etcd: how many nodes, N or MIN:MAX")
      ->type_name("N|MIN:MAX");
  agent->add_flag("--chief", flags->chief, "etcd: one of the nodes is the chief");
  agent->add_flag("--evaluator", flags->evaluator, "etcd: one of the nodes is an evaluator");
  agent->add_option("--ps", flags->ps, "etcd: parameter servers among the nodes")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  agent
      ->add_option("--max-restarts", flags->max_restarts,
                   "etcd: program failures the run survives, each restarting the round")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  agent
      ->add_option("--join-wait", flags->join_wait,
                   "etcd: seconds a round with MIN but not MAX nodes waits for more")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  agent
      ->add_option("--lease-ttl", flags->lease_ttl,
                   "etcd: seconds after its agent's end that a node counts as lost")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  agent
      ->add_option("--etcd-timeout", flags->etcd_timeout,
                   "etcd: seconds without an etcd quorum before the node gives up")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  flags->etcd.AddTo(agent, "etcd: ");
  agent->add_option("--host", flags->host,
                    "This node's address in the cluster (default: the host name)");
  agent->add_option("--ports", flags->ports, "Ports to reserve; the first is the node's address")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  agent->add_option("--gpus", flags->gpus,
                    "CUDA_VISIBLE_DEVICES for the program: 0,1 or none (default: inherited)");
  agent->add_option("--log-dir", flags->log_dir, "Log directory (DROVER_LOG_DIR)");
  agent->add_option("--working-dir", flags->working_dir,
                    "The program's working directory (default: the agent's)");
  agent->add_option("--grace", flags->grace, "Seconds between SIGTERM and SIGKILL when stopping")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddNodeListOption(*agent, &flags->node_list);
  agent
      ->add_option("--reservation-timeout", flags->reservation_timeout,
                   "Seconds to wait for the cluster to form")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  agent
      ->add_option("--restart-count", flags->restart_count,
                   "How many times the group was re-formed (DROVER_RESTART_COUNT)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  agent->add_option("--restart-reason", flags->restart_reason,
                    "Why the group was re-formed (DROVER_RESTART_REASON)");
  agent->add_flag("--elastic", flags->elastic,
                  "Stay up across rounds: the driver's REFORM restarts the program in a new "
                  "round (drover run --nodes MIN:MAX); a failed program waits for it");
  agent->add_option("--feed-plan", flags->feed_plan,
                    "The feed plan of drover run --input (chief/master/worker nodes are fed); "
                    "with an etcd rendezvous, a dynamic plan stored in etcd for the whole run");
  agent
      ->add_option("--feed-plan-json", flags->feed_plan_json,
                   "The feed plan inline, as JSON (drover.Cluster.train's external feeding)")
      ->type_name("JSON");
  agent
      ->add_option("--exit-with-parent", flags->exit_with_parent,
                   "Stop the program and exit when process PID (the agent's parent) dies")
      ->type_name("PID")
      ->check(CLI::PositiveNumber);
  agent->add_option("command", flags->command, "The program and its arguments, after --")
      ->required();
  agent->footer(
      "Exit codes: the program's (128+signal when killed by one), 0 when the driver stopped it,\n"
      "1 when the node could not start (registration failed or timed out), 2 bad input,\n"
      "128+signal when the agent was interrupted. With --node, each node's code goes to\n"
      "--status-fd and the agent exits with the first non-zero one (0 when none).");
  agent
      ->add_option("--node", flags->host_nodes,
                   "A host's agent (drover run's local, ssh and slurm engines): a node it\n"
                   "as ID:OUTPUT_FD:GPUS[:TOKEN_FILE] (GPUS empty: inherited); repeated, one\n"
                   "thread a node, one exec and one rendezvous connection for them all,\n"
                   "opened with --token-file (the cluster token) or else with each node's\n"
                   "TOKEN_FILE, its own credential. OUTPUT_FD '-':\n"
                   "every node's output and exit code go framed on stdout (through ssh);\n"
                   "TOKEN_FILE '-': the next line of stdin, whose end then stops the nodes")
      ->type_name("ID:FD:GPUS[:FILE]")
      ->allow_extra_args(false);
  agent->add_option("--status-fd", flags->status_fd,
                    "With --node (OUTPUT_FD not '-'): where each node's exit code goes, as\n"
                    "a line 'ID CODE'");
  agent->callback([flags, exit_code] {
    *exit_code = flags->host_nodes.empty() ? RunAgent(*flags) : RunHostAgent(*flags);
  });
}

}  // namespace drover::cli

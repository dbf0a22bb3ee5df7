#include "cli/run_command.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/cluster_flags.h"
#include "cli/etcd_flags.h"
#include "cli/resolve_command.h"
#include "driver/driver.h"
#include "driver/etcd_run.h"
#include "driver/gpus.h"
#include "driver/live_runs.h"
#include "drover/environment.h"
#include "engine/local_engine.h"
#include "feed/feed_plan.h"
#include "feed/feed_request.h"
#include "feed/record_io.h"
#include "os/find_program.h"
#include "os/unique_fd.h"
#include "slurm/slurm_engine.h"
#include "ssh/ssh_engine.h"

namespace drover::cli {
namespace {

struct RunFlags {
  std::optional<int> nodes;    // --nodes N or MIN:MAX: the MAX
  std::optional<int> workers;  // --workers W or MIN:MAX: the MAX
  // MIN of --nodes MIN:MAX / --workers MIN:MAX: an elastic run.
  std::optional<int> min_nodes;
  std::optional<int> min_workers;
  double join_wait = 30;
  int ps = 0;
  bool chief = false;
  bool evaluator = false;
  std::string engine = "local";
  // The ssh engine (docs/ssh.md).
  std::string hosts;
  std::string ssh_config;
  std::vector<std::string> ssh_options;
  bool no_host_key_check = false;
  std::string driver_address;
  std::vector<std::string> env;
  bool no_preflight = false;
  // The slurm engine (docs/slurm.md).
  std::vector<std::string> srun_options;
  std::string log_dir;
  bool tee = false;
  int max_restarts = 0;
  double reservation_timeout = 300;
  std::optional<double> heartbeat;        // seconds; unset: the driver's default
  std::optional<double> quiet_heartbeat;  // seconds; unset: the driver's default
  double shutdown_timeout = 0;
  double grace = 5;
  NodeList node_list = NodeList::kAuto;
  std::string agents = "host";
  std::optional<int> gpus_per_node;
  bool dry_run = false;
  bool tensorboard = false;
  // Feeding (docs/feed.md).
  feed::FeedRequest feed;  // --input and the flags that go with it
  // Seeing the run (docs/status.md).
  int status_port = 0;
  std::string status_address = "127.0.0.1";
  std::vector<std::string> status_hosts;
  bool no_status = false;
  double status_linger = 0;
  std::string token_file;
  std::string progress = "auto";
  double progress_interval = 10;
  double straggler_after = 30;
  // The etcd rendezvous (docs/run.md, "A driver that can die").
  std::string rendezvous;  // etcd://HOST:PORT[,...]/RUN
  std::string attach;      // etcd://HOST:PORT[,...]/RUN: watch a run going on
  double lease_ttl = 10;
  double etcd_timeout = 30;
  std::optional<double> driver_timeout;
  EtcdFlags etcd;
  std::vector<std::string> command;
};

Milliseconds ToMs(double seconds) {
  return Milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Fills the options for the status server, the progress line and the
// summary; false (after saying why) for bad input.
bool SetStatusOptions(const RunFlags& flags, DriverOptions* options, std::ostream& err) {
  if (!flags.token_file.empty()) {
    bool created = false;
    auto token = ClusterToken::ReadOrCreateFile(flags.token_file, &created);
    if (created) err << "drover run: wrote a new cluster token to " << flags.token_file << "\n";
    if (!token.ok()) {
      err << "drover run: --token-file: " << token.status().message() << "\n";
      return false;
    }
    options->token = std::move(token).value();
  }
  options->status_port = flags.no_status ? -1 : flags.status_port;
  options->status_address = flags.status_address;
  // This host's own name is how others on the network reach it.
  options->status_hosts = flags.status_hosts;
  options->status_hosts.push_back(ProcessEnvironment().HostName());
  options->status_linger = ToMs(flags.status_linger);
  options->live_runs_dir = LiveRunsDir(ProcessEnvironment());
  const bool terminal = ::isatty(STDERR_FILENO) != 0;
  options->progress.mode = flags.progress == "off"        ? ProgressMode::kOff
                           : flags.progress == "plain"    ? ProgressMode::kPlain
                           : flags.progress == "terminal" ? ProgressMode::kTerminal
                           : terminal                     ? ProgressMode::kTerminal
                                                          : ProgressMode::kPlain;
  options->progress.plain_interval = ToMs(flags.progress_interval);
  options->straggler_after = ToMs(flags.straggler_after);
  options->summary = true;
  return true;
}

// `name` on this process's PATH.
std::optional<std::string> OnPath(const std::string& name) {
  return os::FindProgram(name, ProcessEnvironment().Get("PATH"));
}

// A free TCP port: bind port 0, read it, release it (tensorboard cannot be given 0).
int FreePort() {
  os::UniqueFd socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(socket.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(socket.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  return ntohs(addr.sin_port);
}

Result<std::unique_ptr<ssh::SshEngine>> MakeSshEngine(const RunFlags& flags) {
  if (flags.hosts.empty()) {
    return Status::InvalidArgument(
        "--engine ssh needs --hosts: a resource spec (.yml), a hostfile, or h1:2,h2:2");
  }
  ssh::SshEngineOptions options;
  DROVER_ASSIGN_OR_RETURN(options.hosts, ssh::LoadHosts(flags.hosts, ProcessEnvironment()));
  options.ssh.config_file = flags.ssh_config;
  options.ssh.extra_options = flags.ssh_options;
  options.ssh.check_host_keys = !flags.no_host_key_check;
  options.driver_address = flags.driver_address;
  DROVER_ASSIGN_OR_RETURN(options.env, ssh::ForwardedVariables(flags.env, ProcessEnvironment()));
  return ssh::SshEngine::Create(std::move(options));
}

Result<std::unique_ptr<slurm::SlurmEngine>> MakeSlurmEngine(const RunFlags& flags) {
  slurm::SlurmEngineOptions options;
  DROVER_ASSIGN_OR_RETURN(options.allocation,
                          slurm::AllocationFromEnvironment(ProcessEnvironment()));
  options.driver_address = flags.driver_address;
  options.srun_options = flags.srun_options;
  return slurm::SlurmEngine::Create(std::move(options));
}

// Stops an etcd run: the driver's loop reads it.
std::atomic<int> g_etcd_stop{0};

void OnEtcdStop(int signal) {
  int expected = 0;
  g_etcd_stop.compare_exchange_strong(expected, signal);
}

// `drover run --rendezvous etcd://...` and `drover run --attach etcd://...`.
int RunEtcd(const RunFlags& flags, const ClusterTemplate& cluster, int min_nodes,
            Milliseconds join_wait, std::ostream& err) {
  const std::string& address = flags.attach.empty() ? flags.rendezvous : flags.attach;
  if (address.rfind("etcd://", 0) != 0) {
    err << "drover run: --rendezvous and --attach take etcd://HOST:PORT[,HOST:PORT...]/RUN; "
           "got '"
        << address << "'\n";
    return kExitBadInput;
  }
  if (flags.engine != "local") {
    err << "drover run: with an etcd rendezvous drover run starts local agents only; on other "
           "hosts start `drover agent --rendezvous "
        << address << " --nodes ...` on each (docs/run.md)\n";
    return kExitBadInput;
  }
  if (flags.node_list != NodeList::kAuto) {
    err << "drover run: --node-list is for the built-in rendezvous; through etcd every node "
           "reads the whole cluster\n";
    return kExitBadInput;
  }
  if (flags.heartbeat || flags.quiet_heartbeat) {
    err << "drover run: " << (flags.heartbeat ? "--heartbeat" : "--quiet-heartbeat")
        << " is for the built-in rendezvous; through etcd a node is alive while its lease is "
           "(--lease-ttl)\n";
    return kExitBadInput;
  }
  EtcdDriverOptions options;
  if (!flags.feed.inputs.empty()) {
    // The nodes claim partitions as they go, whatever their number, and a
    // round picks up after the last one's commits (feed/etcd_feed_ledger.h).
    feed::FeedRequest feeding = flags.feed;
    if (feeding.balance == "equal") {
      err << "drover run: a run through etcd feeds with --balance dynamic (its membership may "
             "change); --balance equal needs the built-in rendezvous\n";
      return kExitBadInput;
    }
    feeding.balance = "dynamic";
    feeding.fed_nodes = cluster.FedNodes();
    Result<std::optional<feed::FeedPlan>> plan = feed::PlanFeed(feeding);
    if (!plan.ok()) {
      err << "drover run: " << plan.status().message() << "\n";
      return kExitBadInput;
    }
    options.feed = std::move(plan).value();
  }
  options.address = address;
  options.attach = !flags.attach.empty();
  options.etcd.cluster = cluster;
  options.etcd.min_nodes = min_nodes;
  options.etcd.join_wait = join_wait;
  options.etcd.max_restarts = flags.max_restarts;
  options.etcd.lease_ttl = ToMs(flags.lease_ttl);
  options.etcd.unavailable_timeout = ToMs(flags.etcd_timeout);
  flags.etcd.ApplyTo(&options.etcd);
  options.command = flags.command;
  options.log_dir = flags.log_dir;
  options.grace = ToMs(flags.grace);
  if (flags.driver_timeout) options.driver_timeout = ToMs(*flags.driver_timeout);
  options.status_port = flags.no_status ? -1 : flags.status_port;
  options.status_address = flags.status_address;
  options.status_hosts = flags.status_hosts;
  options.status_hosts.push_back(ProcessEnvironment().HostName());
  options.live_runs_dir = LiveRunsDir(ProcessEnvironment());
  auto self = SelfExecutable();
  if (!self.ok()) {
    err << "drover run: " << self.status().message() << "\n";
    return kExitFailure;
  }
  options.drover_binary = *self;
  options.stop_signal = &g_etcd_stop;
  struct sigaction action {};
  action.sa_handler = OnEtcdStop;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return RunThroughEtcd(options, std::cout, err);
}

int Run(RunFlags flags) {
  std::ostream& err = std::cerr;
  if (!flags.attach.empty()) {
    if (!flags.rendezvous.empty() || !flags.command.empty()) {
      err << "drover run: --attach takes over watching a run: give no --rendezvous and no "
             "command\n";
      return kExitBadInput;
    }
    return RunEtcd(flags, ClusterTemplate{}, 0, Milliseconds(0), err);
  }
  if (flags.driver_timeout && flags.rendezvous.empty()) {
    err << "drover run: --driver-timeout goes with --rendezvous etcd://... (a driver of the "
           "built-in rendezvous takes its run with it)\n";
    return kExitBadInput;
  }
  if (flags.engine != "local" && flags.engine != "ssh" && flags.engine != "slurm") {
    err << "drover run: unknown engine '" << flags.engine << "' (local, ssh or slurm)\n";
    return kExitBadInput;
  }
  const bool remote = flags.engine == "ssh";
  if (!remote && (!flags.hosts.empty() || !flags.ssh_config.empty() || !flags.ssh_options.empty() ||
                  !flags.env.empty())) {
    err << "drover run: --hosts, --ssh-config, --ssh-option and --env go with --engine ssh\n";
    return kExitBadInput;
  }
  if (flags.engine == "local" && !flags.driver_address.empty()) {
    err << "drover run: --driver-address goes with --engine ssh or slurm\n";
    return kExitBadInput;
  }
  if (flags.engine != "slurm" && !flags.srun_options.empty()) {
    err << "drover run: --srun-option goes with --engine slurm\n";
    return kExitBadInput;
  }
  std::unique_ptr<slurm::SlurmEngine> slurm_engine;
  if (flags.engine == "slurm") {
    Result<std::unique_ptr<slurm::SlurmEngine>> made = MakeSlurmEngine(flags);
    if (!made.ok()) {
      err << "drover run: " << made.status().message() << "\n";
      return made.status().code() == Status::Code::kUnavailable ? kExitFailure : kExitBadInput;
    }
    slurm_engine = std::move(made).value();
    // One node per task of the allocation unless told otherwise, as srun does.
    if (!flags.nodes && !flags.workers) flags.nodes = slurm_engine->total_tasks();
  }
  std::unique_ptr<ssh::SshEngine> ssh_engine;
  if (remote) {
    Result<std::unique_ptr<ssh::SshEngine>> made = MakeSshEngine(flags);
    if (!made.ok()) {
      err << "drover run: " << made.status().message() << "\n";
      return made.status().code() == Status::Code::kInvalidArgument ? kExitBadInput : kExitFailure;
    }
    ssh_engine = std::move(made).value();
    // One node per slot unless told otherwise, as horovodrun -H does.
    if (!flags.nodes && !flags.workers) flags.nodes = ssh_engine->total_slots();
  }
  if (flags.command.empty()) {
    err << "drover run: no command; give it after --, e.g. drover run --nodes 2 -- python3 "
           "train.py\n";
    return kExitBadInput;
  }
  DriverOptions options;
  if (flags.nodes && flags.workers) {
    err << "drover run: give --nodes N or --workers W (with --ps/--chief/--evaluator), not both\n";
    return kExitBadInput;
  }
  if (flags.workers) {
    options.cluster.num_nodes =
        *flags.workers + flags.ps + (flags.chief ? 1 : 0) + (flags.evaluator ? 1 : 0);
    if (*flags.workers == 0 && !flags.chief) {
      err << "drover run: the cluster needs a chief or at least one worker\n";
      return kExitBadInput;
    }
  } else if (flags.nodes) {
    options.cluster.num_nodes = *flags.nodes;
    if (flags.ps != 0 || flags.chief || flags.evaluator) {
      err << "drover run: --ps, --chief and --evaluator go with --workers W, not --nodes N "
             "(--nodes N means N workers)\n";
      return kExitBadInput;
    }
  } else {
    err << "drover run: give --nodes N or --workers W\n";
    return kExitBadInput;
  }
  options.cluster.num_ps = flags.ps;
  if (flags.chief) options.cluster.master_node = "chief";
  options.cluster.eval_node = flags.evaluator;
  if (Status valid = options.cluster.Validate(); !valid.ok()) {
    err << "drover run: " << valid.message() << "\n";
    return kExitBadInput;
  }
  if (flags.min_nodes) options.min_nodes = *flags.min_nodes;
  if (flags.min_workers) {
    options.min_nodes = options.cluster.num_nodes - *flags.workers + *flags.min_workers;
    if (*flags.min_workers == 0 && !flags.chief) {
      err << "drover run: an elastic cluster needs a chief or at least one worker: give "
             "--workers MIN:MAX with MIN >= 1\n";
      return kExitBadInput;
    }
  }
  options.join_wait = ToMs(flags.join_wait);
  if (!flags.rendezvous.empty()) {
    return RunEtcd(flags, options.cluster, options.min_nodes, options.join_wait, err);
  }
  if (options.min_nodes > 0 && !flags.feed.inputs.empty()) {
    // Equal shares are laid out for one node count; a changing membership
    // takes its partitions from the driver's queue.
    if (flags.feed.balance == "equal") {
      err << "drover run: --balance equal needs a fixed membership; an elastic run "
             "(MIN:MAX) feeds with --balance dynamic\n";
      return kExitBadInput;
    }
    flags.feed.balance = "dynamic";
  }
  if (slurm_engine && options.cluster.num_nodes > slurm_engine->total_tasks()) {
    err << "drover run: " << options.cluster.num_nodes << " nodes asked, but the allocation has "
        << slurm_engine->total_tasks() << " tasks (salloc/sbatch --ntasks or --ntasks-per-node)\n";
    return kExitBadInput;
  }
  if (ssh_engine && options.cluster.num_nodes > ssh_engine->total_slots()) {
    err << "drover run: " << options.cluster.num_nodes << " nodes asked, but the "
        << ssh_engine->hosts().size() << " hosts have " << ssh_engine->total_slots()
        << " slots (give more with host:N or slots=N)\n";
    return kExitBadInput;
  }
  flags.feed.fed_nodes = options.cluster.FedNodes();
  Result<std::optional<feed::FeedPlan>> plan = feed::PlanFeed(flags.feed);
  if (!plan.ok()) {
    err << "drover run: " << plan.status().message() << "\n";
    return kExitBadInput;
  }
  options.feed = std::move(plan).value();
  options.command = flags.command;
  options.log_dir = flags.log_dir;
  options.tee = flags.tee;
  options.max_restarts = flags.max_restarts;
  options.reservation_timeout = ToMs(flags.reservation_timeout);
  if (flags.heartbeat) options.heartbeat_interval = ToMs(*flags.heartbeat);
  if (flags.quiet_heartbeat) options.quiet_heartbeat_interval = ToMs(*flags.quiet_heartbeat);
  options.shutdown_timeout = ToMs(flags.shutdown_timeout);
  options.grace = ToMs(flags.grace);
  options.node_list = flags.node_list;
  options.host_agent = flags.agents == "host";
  if (!flags.dry_run && !SetStatusOptions(flags, &options, err)) return kExitBadInput;
  if (flags.gpus_per_node) {
    std::vector<int> gpus =
        *flags.gpus_per_node > 0 ? DetectGpus(ProcessEnvironment()) : std::vector<int>{};
    auto assigned = AssignGpus(*flags.gpus_per_node, options.cluster.num_nodes, gpus);
    if (!assigned.ok()) {
      err << "drover run: --gpus-per-node " << *flags.gpus_per_node << ": "
          << assigned.status().message() << "\n";
      return kExitBadInput;
    }
    options.gpus = std::move(assigned).value();
  } else if (ssh_engine) {
    // The resource spec's gpus, dealt over each host's slots.
    std::vector<std::string> gpus = ssh_engine->SlotGpus();
    gpus.resize(static_cast<size_t>(options.cluster.num_nodes));
    if (std::any_of(gpus.begin(), gpus.end(), [](const std::string& g) { return !g.empty(); })) {
      for (std::string& g : gpus) g = g.empty() ? "none" : g;
      options.gpus = std::move(gpus);
    }
  }

  LocalEngineOptions engine_options;
  // TEST ONLY (docs/run.md): an executor id the local engine never starts.
  if (auto skip = ProcessEnvironment().Get("DROVER_TEST_SKIP_AGENT"); skip && !skip->empty()) {
    engine_options.skip_executors.insert(*skip);
  }
  LocalEngine local_engine(engine_options);
  Engine& engine = ssh_engine     ? static_cast<Engine&>(*ssh_engine)
                   : slurm_engine ? static_cast<Engine&>(*slurm_engine)
                                  : local_engine;

  if (flags.dry_run) {
    Driver(options, engine, std::cout, err).PrintPlan(std::cout);
    return kExitOk;
  }
  auto self = SelfExecutable();
  if (!self.ok()) {
    err << "drover run: " << self.status().message() << "\n";
    return kExitFailure;
  }
  options.agent_binary = *self;
  if (ssh_engine && !flags.no_preflight) {
    // Before anything starts: every host reachable, the program and drover
    // there, the driver reachable from it.
    if (Status checked = ssh_engine->Preflight(flags.command.front(), options.agent_binary, err);
        !checked.ok()) {
      err << "drover run: " << checked.message() << "\n";
      return kExitFailure;
    }
  }

  const std::optional<std::string> tensorboard_binary =
      flags.tensorboard ? OnPath("tensorboard") : std::nullopt;
  if (flags.tensorboard && !tensorboard_binary) {
    err << "drover run: --tensorboard: no 'tensorboard' executable on PATH (pip install "
           "tensorboard, or drop --tensorboard)\n";
    return kExitBadInput;
  }

  // Block SIGINT/SIGTERM before any thread starts; the driver reads them
  // from a signalfd, the children unblock them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const os::UniqueFd signal_fd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) {
    err << "drover run: signalfd: " << std::strerror(errno) << "\n";
    return kExitFailure;
  }
  options.signal_fd = signal_fd.get();

  std::unique_ptr<AgentProcess> tensorboard;
  if (flags.tensorboard) {
    if (options.log_dir.empty()) {
      // The driver would pick it; tensorboard needs it now.
      options.log_dir = (std::filesystem::current_path() / "drover-logs" /
                         ("tensorboard-" + std::to_string(::getpid())))
                            .string();
    }
    std::filesystem::create_directories(options.log_dir);
    int port = FreePort();
    auto started = SpawnProcessGroup("tensorboard",
                                     {*tensorboard_binary, "--logdir", options.log_dir, "--host",
                                      "127.0.0.1", "--port", std::to_string(port)},
                                     /*capture_output=*/false, SIGKILL);
    if (!started.ok()) {
      err << "drover run: --tensorboard: " << started.status().message() << "\n";
      return kExitFailure;
    }
    tensorboard = std::move(started).value();
    err << "drover run: tensorboard at http://127.0.0.1:" << port << "/ (log dir "
        << options.log_dir << ")\n";
  }

  int code = Driver(options, engine, std::cout, err).Run();
  if (tensorboard) tensorboard->Signal(SIGTERM);
  tensorboard.reset();  // SIGKILLs and reaps whatever is left
  return code;
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand(
      "run",
      "Start a cluster (local processes, SSH hosts, or a Slurm allocation) and run COMMAND on\n"
      "every node: a rendezvous, one agent per node, output tagged [job:index], per-node log\n"
      "files, supervision (docs/run.md, docs/ssh.md, docs/slurm.md).");
  auto* nodes = run->add_option_function<std::string>(
      "--nodes",
      [flags](const std::string& text) {
        std::tie(flags->min_nodes, flags->nodes) = ParseNodeRange(text, "--nodes", 1);
      },
      "N nodes, all workers; MIN:MAX for an elastic run (docs/run.md, \"Elastic runs\")");
  auto* workers = run->add_option_function<std::string>(
      "--workers",
      [flags](const std::string& text) {
        std::tie(flags->min_workers, flags->workers) = ParseNodeRange(text, "--workers", 0);
      },
      "W worker nodes; MIN:MAX for an elastic run");
  run->add_option("--join-wait", flags->join_wait,
                  "Elastic runs: seconds to wait for MAX nodes once MIN registered")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  nodes->excludes(workers);
  run->add_option("--ps", flags->ps, "K parameter-server nodes (with --workers)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--chief", flags->chief, "One chief node (with --workers)");
  run->add_flag("--evaluator", flags->evaluator, "One evaluator node (with --workers)");
  run->add_option("--engine", flags->engine,
                  "Where the nodes run: local, ssh (--hosts) or slurm (inside salloc/sbatch)")
      ->capture_default_str();
  auto* ssh = run->add_option_group("SSH engine", "Nodes on SSH hosts (--engine ssh; docs/ssh.md)");
  ssh->add_option("--hosts,-H", flags->hosts,
                  "An AutoDist resource spec (.yml/.yaml), a hostfile (host slots=N per line),\n"
                  "or a list h1:2,h2:2 (default: one node per slot)");
  ssh->add_option("--ssh-config", flags->ssh_config, "ssh -F FILE (default: ~/.ssh/config)");
  ssh->add_option("--ssh-option", flags->ssh_options, "ssh -o OPTION (repeatable)")
      ->allow_extra_args(false);
  ssh->add_flag(
      "--no-host-key-check", flags->no_host_key_check,
      "Do not check the hosts' keys (StrictHostKeyChecking=no); only on trusted networks");
  ssh->add_option("--driver-address", flags->driver_address,
                  "The address the hosts reach the driver at (default: the local address\n"
                  "routed to the first host; also for --engine slurm)");
  ssh->add_option("--env,-x", flags->env,
                  "NAME or NAME=VALUE to set on every host (repeatable; PYTHONPATH and DROVER_*\n"
                  "are always forwarded)")
      ->allow_extra_args(false);
  ssh->add_flag("--no-preflight", flags->no_preflight,
                "Skip the pre-flight check of ssh, the program and the driver address");
  auto* slurm = run->add_option_group(
      "Slurm engine", "Nodes as tasks of the Slurm allocation drover runs in (docs/slurm.md)");
  slurm->add_option("--srun-option", flags->srun_options, "An extra srun flag (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--log-dir", flags->log_dir,
                  "Per-node logs <job>-<index>.log (default ./drover-logs/<cluster-id>)");
  run->add_flag("--tee", flags->tee, "Also write every tagged line to <log-dir>/drover.log");
  run->add_option("--max-restarts", flags->max_restarts,
                  "Re-form the whole group up to R times after a failure (elastic runs: "
                  "restart the programs in place; a lost node does not count)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->add_option("--reservation-timeout", flags->reservation_timeout,
                  "Seconds to wait for every node to register")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--heartbeat", flags->heartbeat,
                  "Seconds between the agents' heartbeats (default 1): their sign of life and\n"
                  "the status page's progress; 5 missed ones declare a node lost (an agent\n"
                  "that exits is seen at once). Longer: less traffic and CPU on a large or idle\n"
                  "run, a hung host found later")
      ->check(CLI::Range(0.01, 3600.0));
  run->add_option("--quiet-heartbeat", flags->quiet_heartbeat,
                  "Seconds an agent whose nodes have nothing new to report (no feed, no new\n"
                  "drover.report) waits between heartbeats instead (default 5; 0: every\n"
                  "--heartbeat). TCP keepalive still finds a host that stops answering within\n"
                  "5 heartbeat intervals; a hung agent is found this much later")
      ->check(CLI::Range(0.0, 3600.0));
  run->add_option("--shutdown-timeout", flags->shutdown_timeout,
                  "Seconds the chief and workers may run before the run is stopped (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddNodeListOption(*run, &flags->node_list);
  run->add_option("--agents", flags->agents,
                  "host: one agent for a host's nodes (torchrun's shape): every node of the\n"
                  "local engine, each ssh host's through one ssh, each Slurm node's in one\n"
                  "step; each node keeps its output and exit code. node: an agent process a\n"
                  "node. Elastic runs and slurm with --gpus-per-task start one a node anyway")
      ->check(CLI::IsMember({"host", "node"}))
      ->capture_default_str();
  run->add_option("--grace", flags->grace, "Seconds between SIGTERM and SIGKILL when stopping")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->add_option("--gpus-per-node", flags->gpus_per_node,
                  "K GPUs per node, disjoint, from nvidia-smi (0: none)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--dry-run", flags->dry_run, "Print the plan and start nothing");
  run->add_flag("--tensorboard", flags->tensorboard,
                "Start tensorboard on the log dir and print its URL");
  auto* feeding = run->add_option_group(
      "Feeding", "Feed records to the chief/worker nodes (DataFeed; docs/feed.md)");
  // One value per --input, so `--input x -- prog` ends the input at `--`.
  feeding
      ->add_option("--input", flags->feed.inputs,
                   "Files to feed: a path, a glob or a directory (repeatable)")
      ->allow_extra_args(false);
  feeding->add_option(
      "--format", flags->feed.format,
      "csv | jsonl (a record per line) | tfrecord | raw (default: from the extension)");
  feeding->add_option("--record-bytes", flags->feed.record_bytes,
                      "raw: fixed-length records of N bytes (default: one record per file)");
  feeding->add_option("--epochs", flags->feed.epochs, "Times to feed the input")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  feeding
      ->add_option("--feed-timeout", flags->feed.feed_timeout_seconds,
                   "Seconds a node may take no record before the run fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  feeding->add_option("--mode", flags->feed.mode, "train, or inference (results to --output)")
      ->capture_default_str();
  feeding->add_option("--output", flags->feed.output,
                      "inference: results, one line per record, in DIR/part-NNNNN per partition");
  feeding
      ->add_option("--queue-bytes", flags->feed.queue_bytes,
                   "Shared-memory queue size per node (default: 4 MiB for --format raw records of "
                   "up to 256 KiB, else 64 MiB)")
      ->check(CLI::Range(uint64_t{64 << 10}, uint64_t{16ull << 30}));
  feeding->add_option("--remainder", flags->feed.remainder,
                      "Training: every fed node gets the same number of records each epoch; the "
                      "records left over are fed again from the start (pad, the default) or to "
                      "no node (drop)");
  feeding->add_option("--balance", flags->feed.balance,
                      "equal: shares laid out before the run, the same number of records for "
                      "every fed node each epoch (the default); dynamic: each partition goes to "
                      "the first node with room for it (a node holds the partition its program "
                      "reads and the next; uneven node speeds, asynchronous training, inference)");
  feeding->add_option("--feed-ingest", flags->feed.ingest,
                      "raw fixed-size records: how they reach the program: measure (the "
                      "default: probes of each way, then the fastest), map (the feeder copies "
                      "them into the queue from a mapping of the file), read (read(2) straight "
                      "into the queue), extent (the queue says where they are in the file; the "
                      "program reads them in place from its own mapping) or extent-read (the "
                      "same, but the program read(2)s them into memory it reuses). CSV, JSONL, "
                      "TFRecord, whole-file raw: how the feeder takes the files in: measure (the "
                      "default: windows of each way by turns, then the one that cost its CPU "
                      "less), map (it parses mapped windows of the file, or whole files) or read "
                      "(read(2) into a buffer it reuses: cheaper where page faults are dear, and "
                      "for small files)");
  feeding
      ->add_option("--split-bytes", flags->feed.split_bytes,
                   "Files larger than this are split into partitions of about this size")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1ull << 40}))
      ->capture_default_str();
  auto* seeing = run->add_option_group(
      "Status", "Seeing the run: status page, metrics, progress (docs/status.md)");
  seeing
      ->add_option("--status-port", flags->status_port,
                   "Serve the status page, /api/cluster and /metrics on this port (0: a free "
                   "port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  seeing
      ->add_option("--status-address", flags->status_address,
                   "Address to serve them on; beyond loopback they want the run's status key "
                   "(<log-dir>/status.token)")
      ->capture_default_str();
  seeing->add_option("--status-host", flags->status_hosts,
                     "Also answer requests that reach the status server by this name (a DNS name "
                     "or alias of this host; loopback names, IP addresses and this host's name "
                     "are always accepted); repeatable");
  seeing->add_flag("--no-status", flags->no_status, "Serve no status page");
  seeing
      ->add_option("--status-linger", flags->status_linger,
                   "Seconds to keep serving the final state after the run ends")
      ->check(CLI::NonNegativeNumber);
  seeing->add_option("--token-file", flags->token_file,
                     "The cluster token (64 hex characters, mode 0600); created when absent");
  seeing
      ->add_option("--progress", flags->progress,
                   "auto: a live line on a terminal, plain lines otherwise; terminal; plain; off")
      ->check(CLI::IsMember({"auto", "terminal", "plain", "off"}))
      ->capture_default_str();
  seeing
      ->add_option("--progress-interval", flags->progress_interval,
                   "Seconds between plain progress lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  seeing
      ->add_option("--straggler-after", flags->straggler_after,
                   "Name a node a straggler once it has run below 70% of the median step rate "
                   "(from drover.report's steps, else the feed rate) for this many seconds; 0: "
                   "never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI::Option_group* etcd =
      run->add_option_group("etcd rendezvous", "A driver that can die (docs/run.md)");
  etcd->add_option("--rendezvous", flags->rendezvous,
                   "etcd://HOST:PORT[,HOST:PORT...]/RUN: the nodes form through etcd; the\n"
                   "agents outlive this driver (killed, the run goes on: --attach)");
  etcd->add_option("--attach", flags->attach,
                   "etcd://.../RUN: watch a run going on (its output, rounds and result)");
  etcd->add_option("--lease-ttl", flags->lease_ttl,
                   "Seconds after its agent's end that a node counts as lost")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  etcd->add_option("--etcd-timeout", flags->etcd_timeout,
                   "Seconds without an etcd quorum before a node gives up")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  etcd->add_option("--driver-timeout", flags->driver_timeout,
                   "Seconds the run goes on with no driver watching it (this one killed, none "
                   "attached); then its nodes stop it. Default: to its end")
      ->check(CLI::PositiveNumber);
  flags->etcd.AddTo(etcd, "");
  run->add_option("command", flags->command, "The program and its arguments, after --");
  run->footer(
      "Examples:\n"
      "  drover run --nodes 3 -- sh -c 'echo rank=$RANK'\n"
      "  drover run --workers 2 --ps 1 -- python3 train.py\n"
      "  drover run --nodes 2:4 --max-restarts 3 -- python3 train.py   (elastic)\n"
      "  drover run --nodes 2 --input 'data/*.csv' --epochs 3 -- python3 train.py\n"
      "  drover run --nodes 2 --input data/ --format jsonl --mode inference --output out -- "
      "python3 predict.py\n"
      "  drover run --engine ssh -H h1:2,h2:2 -- python3 train.py\n"
      "  drover run --engine ssh --hosts resource_spec.yml --input 'data/*.csv' -- python3 "
      "train.py\n"
      "  salloc -N 2 --ntasks-per-node 2 drover run --engine slurm -- python3 train.py\n"
      "Exit codes: 0 every node succeeded, 1 a node failed or the cluster did not form,\n"
      "2 bad input, 128+signal when interrupted.");
  run->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace drover::cli

// drover: command-line entry point. Flags and wiring only.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/agent_command.h"
#include "cli/feeder_command.h"
#include "cli/guard_command.h"
#include "cli/logs_command.h"
#include "cli/rendezvous_command.h"
#include "cli/resolve_command.h"
#include "cli/run_command.h"
#include "cli/submit_command.h"
#include "drover/auto_resolver.h"
#include "drover/environment.h"
#include "drover/version.h"

namespace {

std::string ResolverHelp() {
  std::string help =
      "Where the cluster comes from: auto, tfconfig, slurm, mpi, torch, k8s,\n"
      "resource-spec=FILE (AutoDist YAML), static=JSON (a cluster dict or a\n"
      "TF_CONFIG-shaped object). auto takes the first source present:\n";
  int step = 1;
  for (const auto& [kind, looks_for] : drover::AutoResolverOrder()) {
    help += "  " + std::to_string(step++) + ". " + kind + ": " + looks_for + "\n";
  }
  return help;
}

void AddResolveCommand(CLI::App& app, drover::cli::ResolveFlags& flags, int& exit_code) {
  CLI::App* resolve = app.add_subcommand(
      "resolve",
      "Resolve the cluster this process runs in (TF_CONFIG, Slurm, MPI, torchrun, a Kubernetes\n"
      "Indexed Job, an AutoDist resource spec) and print it.");
  resolve->add_option("--resolver", flags.resolver, ResolverHelp())->capture_default_str();
  resolve
      ->add_option("--format", flags.format,
                   "json: cluster, task_type, task_id, rpc_layer, master, num_accelerators\n"
                   "tf-config: the TF_CONFIG for this task\n"
                   "cluster-def: TensorFlow's serialized ClusterDef protobuf (binary)\n"
                   "env: shell exports for this task (TF_CONFIG, torch, JAX, drover)")
      ->check(CLI::IsMember({"json", "tf-config", "cluster-def", "env"}))
      ->capture_default_str();
  resolve->add_option("--task-type", flags.task_type, "Override the task's job name");
  resolve->add_option("--task-index", flags.task_index, "Override the task's index")
      ->check(CLI::NonNegativeNumber);
  resolve->add_option("--rpc-layer", flags.rpc_layer, "Override the RPC layer (e.g. grpc)");
  resolve->footer(
      "Examples:\n"
      "  TF_CONFIG='{\"cluster\":{\"worker\":[\"h1:2222\",\"h2:2222\"]},"
      "\"task\":{\"type\":\"worker\",\"index\":1}}' drover resolve\n"
      "  srun -N2 drover resolve --resolver slurm --format env\n"
      "  mpirun -np 3 drover resolve --resolver mpi\n"
      "Exit codes: 0 ok, 1 failure, 2 bad input (one line on stderr names what was wrong).");
  resolve->callback([&flags, &exit_code] {
    exit_code = drover::cli::RunResolve(flags, drover::ProcessEnvironment(), std::cout, std::cerr,
                                        ::isatty(STDOUT_FILENO) != 0);
  });
}

void AddRendezvousCommand(CLI::App& app, drover::cli::RendezvousFlags& flags, int& exit_code) {
  CLI::App* rendezvous = app.add_subcommand(
      "rendezvous",
      "Run a standalone reservation server for a cluster started by hand: wait for --nodes\n"
      "nodes to register, print the cluster as JSON, then watch the nodes until they leave.");
  rendezvous->add_option("--nodes", flags.nodes, "Number of nodes to wait for")
      ->required()
      ->check(CLI::PositiveNumber);
  rendezvous->add_option("--ps", flags.ps, "How many nodes become parameter servers (ps)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  rendezvous->add_flag("--chief", flags.chief, "Make one node the chief");
  rendezvous->add_flag("--evaluator", flags.evaluator, "Make one node the evaluator");
  rendezvous->add_option("--port", flags.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  rendezvous->add_option("--bind", flags.bind, "Address to listen on")->capture_default_str();
  rendezvous
      ->add_option("--token-file", flags.token_file,
                   "Cluster token (64 hex characters, mode 0600); created when absent")
      ->required();
  rendezvous
      ->add_option("--timeout", flags.timeout_seconds,
                   "Seconds to wait for every node before failing with the list of missing ones")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  rendezvous
      ->add_option("--heartbeat", flags.heartbeat_seconds,
                   "Seconds between node heartbeats; 5 missed ones declare a node dead")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  rendezvous
      ->add_option("--quiet-heartbeat", flags.quiet_heartbeat_seconds,
                   "Seconds an agent with nothing new to report may go between heartbeats (a\n"
                   "quiet node is declared dead this much later; TCP keepalive still finds a\n"
                   "host that stops answering); 0: every --heartbeat")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  rendezvous->footer(
      "Roles follow TensorFlowOnSpark: ps first, then the chief, the evaluator, then workers,\n"
      "assigned by executor id. Exit codes: 0 ok, 1 reservation failed or interrupted, 2 bad "
      "input.");
  rendezvous->callback([&flags, &exit_code] {
    exit_code = drover::cli::RunRendezvous(flags, std::cout, std::cerr);
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "drover: turn the machines you have (this host, SSH hosts, a Slurm allocation) into a\n"
      "distributed training cluster, for any framework."};
  // The commit is fixed when the build runs (cmake/write_version.cmake).
  app.set_version_flag("--version", std::string("drover ") + drover::Version() + " (commit " +
                                        drover::GitCommit() + ")");
  app.require_subcommand(1);
  // One line per error, as every drover command reports bad input.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("drover: ") + e.what() + " (see drover --help)\n";
  });
  int exit_code = drover::cli::kExitOk;
  drover::cli::ResolveFlags resolve_flags;
  AddResolveCommand(app, resolve_flags, exit_code);
  drover::cli::RendezvousFlags rendezvous_flags;
  AddRendezvousCommand(app, rendezvous_flags, exit_code);
  drover::cli::AddRunCommand(app, &exit_code);
  drover::cli::AddAgentCommand(app, &exit_code);
  drover::cli::AddFeederCommand(app, &exit_code);
  drover::cli::AddGuardCommand(app, &exit_code);
  drover::cli::AddJanitorCommand(app, &exit_code);
  drover::cli::AddSubmitCommands(app, &exit_code);
  drover::cli::AddLogsCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return drover::cli::kExitBadInput;
  }
  return exit_code;
}

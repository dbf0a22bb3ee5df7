// drover-agent: `drover agent` in a binary of its own. Every local node
// starts as an exec of its agent, so this binary leaves out what only the
// driver and the other commands load (the engines, the status server, MPI):
// bench/RESULTS.md, "Start-up". Invoked as `drover-agent agent [flags] --
// COMMAND...`, the same argv as `drover agent`, so a driver can use either.
#include <CLI/CLI.hpp>

#include "cli/agent_command.h"

int main(int argc, char** argv) {
  CLI::App app{"drover-agent: run one node of a cluster (see drover agent --help)"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("drover-agent: ") + e.what() + " (see drover-agent agent --help)\n";
  });
  int exit_code = 0;
  drover::cli::AddAgentCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // bad input, as for drover agent
  }
  return exit_code;
}

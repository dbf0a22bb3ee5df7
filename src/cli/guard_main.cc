// drover-guard: `drover guard` in a binary of its own. The agent starts
// every node's program behind a guard, so each node pays one exec of it on
// the way to its program: this one loads a handful of libraries where
// drover loads twenty (bench/RESULTS.md, "Start-up below mpirun").
// Invoked as `drover-guard guard [flags] -- COMMAND...` (or `drover-guard
// janitor`, which the driver starts), the same argv as `drover guard`, so
// the agent and the driver can use either.
#include <CLI/CLI.hpp>

#include "cli/guard_command.h"

int main(int argc, char** argv) {
  CLI::App app{"drover-guard: run a command so that nothing it starts outlives it"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("drover-guard: ") + e.what() + " (see drover-guard guard --help)\n";
  });
  int exit_code = 0;
  drover::cli::AddGuardCommand(app, &exit_code);
  drover::cli::AddJanitorCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // bad input, as for drover guard
  }
  return exit_code;
}

// drover-guard: `drover guard` in a binary of its own. The agent starts
// every node's program behind a guard, so each node pays one exec of it on
// the way to its program: this one loads a handful of libraries where
// drover loads twenty (bench/RESULTS.md, "Start-up below mpirun").
// Invoked as `drover-guard guard [flags] -- COMMAND...` (or `drover-guard
// janitor`, which the driver starts), the same argv as `drover guard`, so
// the agent and the driver can use either.
#include "cli/guard_command.h"
#include "cli/small_main.h"

int main(int argc, char** argv) {
  return drover::cli::RunSmallBinary(
      argc, argv, "drover-guard",
      "drover-guard: run a command so that nothing it starts outlives it",
      "drover-guard guard --help", [](CLI::App& app, int* exit_code) {
        drover::cli::AddGuardCommand(app, exit_code);
        drover::cli::AddJanitorCommand(app, exit_code);
      });
}

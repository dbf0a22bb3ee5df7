// The commands that keep drover from leaving anything behind:
// `drover guard [--grace S] [--exit-with-stdin] -- COMMAND...` runs COMMAND
// so that nothing it starts outlives it (agent/process_guard.h); the agent
// runs every node's program under one, and it is usable by hand as well.
// `drover janitor` removes a driver's temporary files (os/janitor.h).

#ifndef DROVER_CLI_GUARD_COMMAND_H_
#define DROVER_CLI_GUARD_COMMAND_H_

#include <CLI/CLI.hpp>

namespace drover::cli {

// Adds the subcommand; its callback stores the exit code in *exit_code.
void AddGuardCommand(CLI::App& app, int* exit_code);

// `drover janitor` (internal): os::RunJanitor on stdin, started by a driver
// to remove its temporary files whenever it ends.
void AddJanitorCommand(CLI::App& app, int* exit_code);

}  // namespace drover::cli

#endif  // DROVER_CLI_GUARD_COMMAND_H_

// `drover run`: the driver and the local engine (docs/run.md). Registered on
// the CLI app by AddRunCommand; the work is in src/driver and src/engine.

#ifndef DROVER_CLI_RUN_COMMAND_H_
#define DROVER_CLI_RUN_COMMAND_H_

#include <CLI/CLI.hpp>

namespace drover::cli {

// Adds the subcommand; its callback stores the exit code in *exit_code.
void AddRunCommand(CLI::App& app, int* exit_code);

}  // namespace drover::cli

#endif  // DROVER_CLI_RUN_COMMAND_H_

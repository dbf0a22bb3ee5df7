// `drover feeder`: fills one node's input queue (docs/feed.md). The agent
// starts it, and starts it again when it is killed; not meant to be typed.

#ifndef DROVER_CLI_FEEDER_COMMAND_H_
#define DROVER_CLI_FEEDER_COMMAND_H_

#include <CLI/CLI.hpp>

namespace drover::cli {

// Adds the subcommand; its callback stores the exit code in *exit_code.
void AddFeederCommand(CLI::App& app, int* exit_code);

}  // namespace drover::cli

#endif  // DROVER_CLI_FEEDER_COMMAND_H_

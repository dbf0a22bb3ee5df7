// `drover run`: the driver and the local engine (docs/run.md). Registered on
// the CLI app by AddRunCommand; the work is in src/driver and src/engine.

#ifndef DROVER_CLI_RUN_COMMAND_H_
#define DROVER_CLI_RUN_COMMAND_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>

namespace drover::cli {

// "N" -> (nullopt, N); "MIN:MAX" -> (MIN, MAX), each at least `smallest`;
// throws CLI::ValidationError naming `flag` (CLI11 reports it).
std::pair<std::optional<int>, std::optional<int>> ParseNodeRange(const std::string& text,
                                                                 const std::string& flag,
                                                                 int smallest);

// Adds the subcommand; its callback stores the exit code in *exit_code.
void AddRunCommand(CLI::App& app, int* exit_code);

}  // namespace drover::cli

#endif  // DROVER_CLI_RUN_COMMAND_H_

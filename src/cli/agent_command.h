// `drover agent`: one node's agent (docs/run.md). Registered on the CLI app
// by AddAgentCommand; the work is in src/agent.

#ifndef DROVER_CLI_AGENT_COMMAND_H_
#define DROVER_CLI_AGENT_COMMAND_H_

#include <CLI/CLI.hpp>

namespace drover::cli {

// Adds the subcommand; its callback stores the exit code in *exit_code.
void AddAgentCommand(CLI::App& app, int* exit_code);

}  // namespace drover::cli

#endif  // DROVER_CLI_AGENT_COMMAND_H_

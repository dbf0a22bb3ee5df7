// drover-agent: `drover agent` in a binary of its own. Every local node
// starts as an exec of its agent, so this binary leaves out what only the
// driver and the other commands load (the engines, the status server, MPI):
// bench/RESULTS.md, "Start-up with drover-agent". Invoked as `drover-agent
// agent [flags] -- COMMAND...`, the same argv as `drover agent`, so a driver
// can use either.
#include "cli/agent_command.h"
#include "cli/small_main.h"

int main(int argc, char** argv) {
  return drover::cli::RunSmallBinary(argc, argv, "drover-agent",
                                     "drover-agent: run one node of a cluster (see drover agent)",
                                     "drover-agent agent --help", drover::cli::AddAgentCommand);
}

// `drover logs [RUN] [TASK] [-f] [--tail N]`: a run's per-node logs, each
// line tagged as `drover run` tags it, like `kubectl logs` (docs/status.md,
// "Logs"). A finished run's, or a running one's so far, come from its log
// directory (driver/node_logs.h); a live run's from its status server, whose
// log endpoint hands a follower the lines after those it saw.

#ifndef DROVER_CLI_LOGS_COMMAND_H_
#define DROVER_CLI_LOGS_COMMAND_H_

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

namespace drover::cli {

struct LogsFlags {
  // A log directory, a run id under ./drover-logs, a status server's
  // address; "": the run with a status server going on here.
  std::string run;
  std::string task;  // "worker:1", "worker-1", "executor:3"; "": every node
  bool follow = false;
  int tail = -1;           // >= 0: only the last this many lines of each node
  std::string token_file;  // for a status server beyond loopback
};

// Returns the exit code: 0 shown (with follow: to the run's end), 1 nothing
// to show or the run's end not seen (no run, unreachable, refused, the
// driver gone), 2 bad input.
int ShowLogs(const LogsFlags& flags, std::ostream& out, std::ostream& err);

// Adds the subcommand; its callback stores the exit code in *exit_code.
void AddLogsCommand(CLI::App& app, int* exit_code);

}  // namespace drover::cli

#endif  // DROVER_CLI_LOGS_COMMAND_H_

// `drover status` for runs: the state of a running driver, read from its
// status server (docs/status.md), or of a finished run, read from the
// run.json in its log directory; the finished runs of a directory, one row
// each (--list); two runs side by side. (`drover status JOB` for Slurm jobs
// is in submit_command.h, which dispatches here.)

#ifndef DROVER_CLI_STATUS_COMMAND_H_
#define DROVER_CLI_STATUS_COMMAND_H_

#include <ostream>
#include <string>

#include "cli/etcd_flags.h"

namespace drover::cli {

struct RunStatusFlags {
  // "" : the run this user has running on this host; an address
  // (HOST:PORT or http://HOST:PORT/); a run's log directory, or its run id
  // under ./drover-logs. With `list`: the directory of runs ("" :
  // ./drover-logs).
  std::string target;
  std::string other;       // a second run: compare it with `target`
  bool list = false;       // list the finished runs in `target`
  std::string token_file;  // for a status server beyond loopback
  bool json = false;       // print /api/cluster as it came
  double watch = 0;        // > 0: redraw every this many seconds until the run ends
  // An etcd:// target: etcd's TLS and user (the agent's --etcd-* flags).
  EtcdFlags etcd;
};

// Returns the exit code: 0 shown, 1 nothing to show (no run, unreachable,
// refused), 2 bad input.
int ShowRunStatus(const RunStatusFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace drover::cli

#endif  // DROVER_CLI_STATUS_COMMAND_H_

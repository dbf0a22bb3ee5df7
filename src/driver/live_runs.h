// Live runs: how `drover status` with no address finds the drivers running
// on this host. Each driver with a status server writes
// <LiveRunsDir()>/<pid>.json while it runs and removes it at its end; a file
// whose process is gone (a SIGKILLed driver) is skipped and removed by the
// next listing. The directory is the user's own (0700): under
// $XDG_RUNTIME_DIR/drover, else /tmp/drover-<uid>.
// Thread-safe (files only).

#ifndef DROVER_DRIVER_LIVE_RUNS_H_
#define DROVER_DRIVER_LIVE_RUNS_H_

#include <string>
#include <vector>

#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

struct LiveRun {
  int pid = 0;
  std::string url;  // the status server's
  std::string cluster_id;
  std::string log_dir;
  std::string token_file;  // "" : the server needs no token
  double started_at = 0;   // Unix seconds
};

// The user's live-runs directory, from `env`'s XDG_RUNTIME_DIR (see above).
std::string LiveRunsDir(const Environment& env);
// The record, in live-runs directory `dir`, of the driver with process id `pid`.
std::string LiveRunFile(const std::string& dir, int pid);
Status RegisterLiveRun(const std::string& dir, const LiveRun& run);
void UnregisterLiveRun(const std::string& dir, int pid);
// The live runs in `dir`, oldest first.
std::vector<LiveRun> ListLiveRuns(const std::string& dir);

}  // namespace drover

#endif  // DROVER_DRIVER_LIVE_RUNS_H_

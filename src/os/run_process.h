// RunProcess: runs a local program (ssh, scontrol, sbatch, tar) to its end,
// feeding it its input and collecting its output, with a deadline. Built on
// Subprocess, so the program runs in its own process group and dies with the
// calling thread (PDEATHSIG; see subprocess.h). Thread-safe: each call owns
// its child; SIGPIPE is blocked on the calling thread only while it runs.

#ifndef DROVER_OS_RUN_PROCESS_H_
#define DROVER_OS_RUN_PROCESS_H_

#include <string>
#include <vector>

#include "drover/status.h"

namespace drover::os {

// The outcome of a command run to its end.
struct CommandResult {
  int exit_code = -1;  // the shell's convention: 128 + the signal when killed by one
  std::string output;  // stdout
  std::string error;   // stderr
};

// Runs `argv` (argv[0] looked up in PATH) to its end, feeding `input` on
// stdin while it reads stdout and stderr, so a program that answers before
// it has read everything never deadlocks with us. kDeadlineExceeded naming
// the program after `timeout_s`; kIoError naming it when it cannot be
// started.
Result<CommandResult> RunProcess(const std::vector<std::string>& argv, const std::string& input,
                                 int timeout_s);

}  // namespace drover::os

#endif  // DROVER_OS_RUN_PROCESS_H_

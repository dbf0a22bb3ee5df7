// ProcessGuard: `drover guard`, the small process between an agent and its
// program that makes sure nothing the program starts outlives it.
//
// The guard is a child subreaper (PR_SET_CHILD_SUBREAPER): every orphan of
// the program's tree is reparented to it, including a descendant that
// called setsid() or moved to another process group, which a signal to the
// program's group would miss. It runs the program in a process group of its
// own and then:
// - forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the program's group and
//   to every other descendant, and SIGKILLs what is left `grace` later;
// - when the program ends, stops what it left behind the same way (SIGTERM,
//   `grace`, SIGKILL);
// - when its own parent dies (the agent was SIGKILLed: the agent starts it
//   with PR_SET_PDEATHSIG = SIGTERM), or its stdin ends (with
//   exit_with_stdin, for a guard started from Python), stops everything as
//   for SIGTERM;
// - removes the paths in remove_at_exit;
// - exits as the program did: its exit code, or the same signal (raised on
//   itself, without a core dump).
// If the guard itself is SIGKILLed, the program dies with it
// (PR_SET_PDEATHSIG) and its orphans go up to the next subreaper: the agent,
// which kills what it holds when it ends (os::KillOwnDescendants).
//
// RunGuard blocks the signals it handles and waits on a signalfd; call it
// from a single-threaded process (the `drover guard` command).

#ifndef DROVER_AGENT_PROCESS_GUARD_H_
#define DROVER_AGENT_PROCESS_GUARD_H_

#include <chrono>
#include <string>
#include <vector>

#include "drover/status.h"

namespace drover {

struct GuardOptions {
  std::vector<std::string> command;  // argv; argv[0] is looked up in PATH
  std::chrono::milliseconds grace{10'000};
  // Stop everything when stdin reaches its end (the starter's lifeline).
  bool exit_with_stdin = false;
  // Removed (directories with their contents) when the guard exits: what
  // the agent made for the program (the feed socket's directory, a
  // temporary context file), which a SIGKILLed agent cannot remove.
  std::vector<std::string> remove_at_exit;
  // When >= 0: once the program is started (or could not be), one line is
  // written here and the descriptor closed: "pid <pid>" or
  // "error <code> <message>" (a Status::Code number).
  int report_fd = -1;
};

// Runs the guard to its end. Returns an exit code when the program exited
// (its code) or when raising the program's signal did not end the guard;
// 127 (with a line on stderr) when the program could not be started.
int RunGuard(const GuardOptions& options);

// The starter's side of report_fd: reads the guard's line from `fd` until
// `deadline`. The program's pid, or the status the guard reported (or
// kUnavailable when the guard ended without a line, kDeadlineExceeded).
Result<int> ReadGuardReport(int fd, std::chrono::steady_clock::time_point deadline);

}  // namespace drover

#endif  // DROVER_AGENT_PROCESS_GUARD_H_

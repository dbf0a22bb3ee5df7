// Subprocess: one child program in its own process group, supervised through
// a pidfd (Ninja's Subprocess, with Linux's process-group and pidfd tools).
//
// Spawn() vforks and execs with: a new process group (pgid == pid), stdin from
// /dev/null, stdout/stderr inherited or each into a pipe the parent reads,
// every other fd closed on exec, the signal mask and dispositions reset, and
// PR_SET_PDEATHSIG (SIGKILL by default) so the child dies with its parent. It uses vfork()
// rather than posix_spawn() because posix_spawn cannot set PDEATHSIG in the
// child, and vfork rather than fork so that the cost of a start does not grow
// with the caller's size (fork copies its page tables). HAZARD: PDEATHSIG fires when the *thread*
// that called Spawn() exits, so call it from a thread that outlives the child (the agent's main
// thread).
//
// Signals go to the whole process group, so grandchildren the program starts
// are stopped with it. The leader is reaped through a pidfd (pidfd_open);
// where the kernel lacks it, Wait() polls waitpid. Members the leader leaves
// behind are reparented to init, whose reaping may lag (a container's init
// may take seconds); a process that is a child subreaper
// (PR_SET_CHILD_SUBREAPER, as `drover agent` is) adopts them instead, and
// Poll() and GroupAlive() reap them with waitpid(-pgid).
//
// Move-only; the destructor SIGKILLs a group still running and reaps the
// leader. Not thread-safe.

#ifndef DROVER_OS_SUBPROCESS_H_
#define DROVER_OS_SUBPROCESS_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"
#include "os/unique_fd.h"

namespace drover::os {

// How a process ended: exited with a code, or killed by a signal.
class ExitStatus {
 public:
  static ExitStatus Exited(int code) { return ExitStatus(false, code); }
  static ExitStatus Signaled(int signal) { return ExitStatus(true, signal); }
  // A child that someone else reaped (a waitpid(-1) elsewhere in the
  // process, or SIGCHLD ignored): it ended, how is lost. Not a success.
  static ExitStatus Unknown() { return ExitStatus(true, 0); }
  // From a waitpid() status word.
  static ExitStatus FromWaitStatus(int status);

  bool signaled() const { return signaled_; }
  bool unknown() const { return signaled_ && value_ == 0; }
  int exit_code() const { return signaled_ ? -1 : value_; }  // -1 when signaled
  int signal() const { return signaled_ ? value_ : 0; }      // 0 when exited
  bool success() const { return !signaled_ && value_ == 0; }
  // The shell's convention: the code, or 128 + the signal.
  int ShellCode() const { return signaled_ ? 128 + value_ : value_; }
  // "exit code 3", "killed by SIGKILL".
  std::string ToString() const;

  friend bool operator==(const ExitStatus& a, const ExitStatus& b) {
    return a.signaled_ == b.signaled_ && a.value_ == b.value_;
  }

 private:
  ExitStatus(bool signaled, int value) : signaled_(signaled), value_(value) {}
  bool signaled_;
  int value_;
};

// "SIGTERM" for SIGTERM, "signal 77" for a number without a name.
std::string SignalName(int signal);

struct SubprocessOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  // "NAME=value" entries; nullopt inherits the parent's environment.
  std::optional<std::vector<std::string>> env;
  std::string working_dir;  // "" : the parent's
  // Pipe stdout and stderr to the parent (stdout_fd(), stderr_fd()) instead
  // of inheriting the parent's.
  bool pipe_output = false;
  // With pipe_output: stderr goes into the stdout pipe (one fd, stdout_fd()).
  bool merge_stderr = false;
  // Without pipe_output: stdout and stderr both go to this descriptor of the
  // parent's instead of being inherited; -1: inherited.
  int output_fd = -1;
  // PR_SET_PDEATHSIG: the signal the child gets when its parent dies; 0 for none.
  int parent_death_signal = SIGKILL;
  // stdin from a pipe whose write end the parent holds (stdin_fd()), instead
  // of /dev/null: ssh forwards its end-of-file to the remote command, which
  // is how a remote agent learns that its driver is gone.
  bool pipe_stdin = false;
  // Descriptors the child keeps under the same numbers (all others are
  // closed on exec); each must be above 2.
  std::vector<int> keep_fds;
};

class Subprocess {
 public:
  using Clock = std::chrono::steady_clock;

  // kInvalidArgument for an empty argv; kNotFound / kPermissionDenied /
  // kIoError (naming the program and the OS's reason) when it cannot be
  // started. On error no process is left.
  static Result<Subprocess> Spawn(const SubprocessOptions& options);

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }  // also the process group id
  // Read ends of the output pipes (non-blocking, close-on-exec); -1 when
  // inherited or closed. The Subprocess owns them.
  int stdout_fd() const { return stdout_fd_.get(); }
  int stderr_fd() const { return stderr_fd_.get(); }
  void CloseStdout();
  void CloseStderr();
  // Write end of the stdin pipe (blocking, close-on-exec); -1 without
  // pipe_stdin or once closed.
  int stdin_fd() const { return stdin_fd_.get(); }
  void CloseStdin();
  // Readable once the leader has exited; -1 without pidfd support.
  int exit_fd() const { return pidfd_.get(); }

  // The leader's status if it has exited (reaping it), without blocking.
  std::optional<ExitStatus> Poll();
  // Waits until the leader exits or `deadline`; nullopt on timeout.
  std::optional<ExitStatus> Wait(Clock::time_point deadline);
  // Waits without a deadline.
  ExitStatus Wait();

  // Sends `signal` to the process group. False when no process is left in it.
  bool SignalGroup(int signal);
  // Whether any process of the group is left (zombies we cannot reap
  // included), after reaping the ones we can.
  bool GroupAlive();

  // Forgets the process without signalling or waiting for it: the last
  // resort for a leader that outlives SIGKILL (stuck in uninterruptible
  // sleep, e.g. on a hung network filesystem), which would otherwise hold
  // the destructor's wait. Whoever reaps our children (a subreaper's sweep,
  // init once we exit) reaps it when it ends. Returns its pid.
  pid_t Release();

  // SIGTERM to the group; waits up to `grace` for the leader and the rest of
  // the group to go; then SIGKILL to the group. Returns the leader's status
  // (its earlier one when it had already exited).
  ExitStatus Terminate(std::chrono::milliseconds grace);

 private:
  void Reset();
  // Reaps exited members of the group that are our children (the leader,
  // and orphans adopted as a subreaper).
  void ReapGroup();
  // After SIGKILL to the group: waits briefly until it is empty.
  void AwaitGroupReaped();

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd stdin_fd_;
  UniqueFd stdout_fd_;
  UniqueFd stderr_fd_;
  std::optional<ExitStatus> status_;
  // Set once the leader is reaped and the group is seen empty: its id may be
  // reused by then, so it is never signalled again.
  bool group_gone_ = false;
};

}  // namespace drover::os

#endif  // DROVER_OS_SUBPROCESS_H_

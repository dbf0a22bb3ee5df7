#include "os/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "os/fd_io.h"
#include "os/find_program.h"

extern char** environ;

namespace drover::os {
namespace {

// What the child reports through the error pipe when it cannot exec.
struct ChildError {
  int stage;  // index into kStages
  int error;  // errno
};
constexpr const char* kStages[] = {
    "setpgid", "prctl(PR_SET_PDEATHSIG)", "open /dev/null", "dup2", "chdir", "execve"};

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// Resolves argv[0] against PATH (the child's, else ours) in the parent, so
// the child only calls async-signal-safe functions between fork and exec.
// A name with a '/' goes to execve as it is, which says why it cannot run.
Result<std::string> ResolveProgram(const std::string& name,
                                   const std::optional<std::vector<std::string>>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::optional<std::string> path_var;
  if (env) {
    for (const std::string& entry : *env) {
      if (entry.rfind("PATH=", 0) == 0) path_var = entry.substr(5);
    }
  }
  if (!path_var) {
    // This process's own, as execvp(3) reads it.
    const char* ours = std::getenv("PATH");
    path_var = ours ? ours : "/usr/local/bin:/usr/bin:/bin";
  }
  if (std::optional<std::string> found = FindProgram(name, path_var)) return *found;
  return Status::NotFound("cannot run '" + name + "': not found in PATH (" + *path_var + ")");
}

// In the child: makes `fd` the descriptor `target`, without close-on-exec.
bool MoveFd(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

[[noreturn]] void ChildFail(int error_fd, int stage) {
  ChildError error{stage, errno};
  ssize_t ignored = ::write(error_fd, &error, sizeof(error));
  (void)ignored;
  ::_exit(127);
}

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int status) {
  if (WIFSIGNALED(status)) return Signaled(WTERMSIG(status));
  return Exited(WEXITSTATUS(status));
}

std::string ExitStatus::ToString() const {
  if (unknown()) return "ended (its status was reaped elsewhere)";
  if (signaled_) return "killed by " + SignalName(value_);
  return "exit code " + std::to_string(value_);
}

std::string SignalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  if (abbrev == nullptr) return "signal " + std::to_string(signal);
  return std::string("SIG") + abbrev;
}

Result<Subprocess> Subprocess::Spawn(const SubprocessOptions& options) {
  if (options.argv.empty()) return Status::InvalidArgument("no program to run: argv is empty");
  DROVER_ASSIGN_OR_RETURN(std::string program, ResolveProgram(options.argv[0], options.env));

  // Everything the child needs is built before fork().
  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (options.env) {
    for (const std::string& entry : *options.env) envp.push_back(const_cast<char*>(entry.c_str()));
    envp.push_back(nullptr);
  }

  // Every pipe end is owned here, so a failure before the fork closes them all.
  auto open_pipe = [](Pipe* pipe) -> Status {
    Result<Pipe> made = MakePipe();
    if (!made.ok()) return made.status().WithContext("cannot start a program");
    *pipe = std::move(made).value();
    return Status::Ok();
  };
  Pipe error_pipe, out_pipe, err_pipe, in_pipe;
  DROVER_RETURN_IF_ERROR(open_pipe(&error_pipe));
  if (options.pipe_output) {
    DROVER_RETURN_IF_ERROR(open_pipe(&out_pipe));
    if (!options.merge_stderr) DROVER_RETURN_IF_ERROR(open_pipe(&err_pipe));
  }
  if (options.pipe_stdin) DROVER_RETURN_IF_ERROR(open_pipe(&in_pipe));
  const pid_t parent = ::getpid();

  // vfork, not fork: the child borrows this process's memory until it execs,
  // so starting a program costs the same however large and threaded this
  // process is (fork copies every page table: the driver starts N agents one
  // after another, and each agent its guard). The parent is suspended until
  // the child execs or exits. Every signal stays blocked across it, so no
  // handler of ours runs in the child on the borrowed memory; the child puts
  // every handler back to its default before unblocking (signal dispositions
  // are the child's own: vfork does not share them).
  sigset_t all_signals, caller_mask;
  sigfillset(&all_signals);
  ::pthread_sigmask(SIG_SETMASK, &all_signals, &caller_mask);
  pid_t pid = ::vfork();
  if (pid == 0) {
    // The child: async-signal-safe calls only (get() is one; no destructor
    // runs here, since the child execs or _exits), and no writes to memory
    // the parent reads after vfork returns.
    const int efd = error_pipe.write.get();
    char* const* child_env = options.env ? envp.data() : environ;
    const char* working_dir = options.working_dir.empty() ? nullptr : options.working_dir.c_str();
    if (::setpgid(0, 0) != 0) ChildFail(efd, 0);
    if (options.parent_death_signal != 0) {
      if (::prctl(PR_SET_PDEATHSIG, options.parent_death_signal) != 0) ChildFail(efd, 1);
      // The parent may have died before prctl took effect.
      if (::getppid() != parent) ::_exit(127);
    }
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &default_action, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int in_fd =
        in_pipe.read.valid() ? in_pipe.read.get() : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) ChildFail(efd, 2);
    if (!MoveFd(in_fd, STDIN_FILENO)) ChildFail(efd, 3);
    if (out_pipe.write.valid()) {
      int err_target = err_pipe.write.valid() ? err_pipe.write.get() : STDOUT_FILENO;
      if (!MoveFd(out_pipe.write.get(), STDOUT_FILENO) || !MoveFd(err_target, STDERR_FILENO)) {
        ChildFail(efd, 3);
      }
    } else if (options.output_fd >= 0) {
      if (::dup2(options.output_fd, STDOUT_FILENO) < 0 ||
          ::dup2(options.output_fd, STDERR_FILENO) < 0) {
        ChildFail(efd, 3);
      }
    }
    if (working_dir != nullptr && ::chdir(working_dir) != 0) ChildFail(efd, 4);
      // Close-on-exec for every inherited fd above stderr, whoever opened it.
#ifdef SYS_close_range
    ::syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
#endif
    for (int fd : options.keep_fds) {
      if (::fcntl(fd, F_SETFD, 0) != 0) ChildFail(efd, 3);
    }
    ::execve(program.c_str(), argv.data(), child_env);
    ChildFail(efd, 5);
  }
  const int vfork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &caller_mask, nullptr);
  if (pid < 0) {
    return Status::IoError("cannot start '" + options.argv[0] +
                           "': vfork: " + std::strerror(vfork_errno));
  }

  // The child's ends: its exec closes the error pipe's, so the read below
  // sees end of file once the program runs.
  error_pipe.write.Reset();
  out_pipe.write.Reset();
  err_pipe.write.Reset();
  in_pipe.read.Reset();
  ChildError error{};
  ssize_t got;
  do {
    got = ::read(error_pipe.read.get(), &error, sizeof(error));
  } while (got < 0 && errno == EINTR);

  Subprocess child;
  child.pid_ = pid;
  child.stdin_fd_ = std::move(in_pipe.write);
  child.stdout_fd_ = std::move(out_pipe.read);
  child.stderr_fd_ = std::move(err_pipe.read);
  if (got == static_cast<ssize_t>(sizeof(error))) {
    child.Wait();
    child.group_gone_ = true;
    std::string message = "cannot run '" + options.argv[0] + "': " + kStages[error.stage] + ": " +
                          std::strerror(error.error);
    if (error.error == ENOENT) return Status::NotFound(message);
    if (error.error == EACCES) return Status::PermissionDenied(message);
    return Status::IoError(message);
  }
  for (int fd : {child.stdout_fd_.get(), child.stderr_fd_.get()}) {
    if (fd >= 0) SetNonBlocking(fd);
  }
  child.pidfd_.Reset(PidfdOpen(pid));  // -1 on old kernels: Wait() polls instead
  return child;
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      stdin_fd_(std::move(other.stdin_fd_)),
      stdout_fd_(std::move(other.stdout_fd_)),
      stderr_fd_(std::move(other.stderr_fd_)),
      status_(std::exchange(other.status_, std::nullopt)),
      group_gone_(std::exchange(other.group_gone_, false)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Reset();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    stdin_fd_ = std::move(other.stdin_fd_);
    stdout_fd_ = std::move(other.stdout_fd_);
    stderr_fd_ = std::move(other.stderr_fd_);
    status_ = std::exchange(other.status_, std::nullopt);
    group_gone_ = std::exchange(other.group_gone_, false);
  }
  return *this;
}

Subprocess::~Subprocess() {
  Reset();
}

void Subprocess::Reset() {
  if (pid_ > 0) {
    if (!group_gone_) SignalGroup(SIGKILL);
    if (!status_) Wait();
    AwaitGroupReaped();
  }
  pid_ = -1;
  status_.reset();
  group_gone_ = false;
  pidfd_.Reset();
  stdin_fd_.Reset();
  stdout_fd_.Reset();
  stderr_fd_.Reset();
}

pid_t Subprocess::Release() {
  const pid_t pid = pid_;
  pid_ = -1;
  Reset();
  return pid;
}

void Subprocess::CloseStdin() {
  stdin_fd_.Reset();
}

void Subprocess::CloseStdout() {
  stdout_fd_.Reset();
}

void Subprocess::CloseStderr() {
  stderr_fd_.Reset();
}

std::optional<ExitStatus> Subprocess::Poll() {
  if (pid_ > 0) ReapGroup();
  return status_;
}

void Subprocess::ReapGroup() {
  for (;;) {
    int status = 0;
    pid_t got;
    if (!status_) {
      // By pid first: a leader that moved to another group is still ours.
      got = ::waitpid(pid_, &status, WNOHANG);
      if (got < 0 && errno == EINTR) continue;
      if (got == pid_) {
        status_ = ExitStatus::FromWaitStatus(status);
        continue;
      }
      // Not our child any more: reaped by someone else, so no wait can
      // ever succeed (and a pidfd stays readable: Wait would spin).
      if (got < 0 && errno == ECHILD) status_ = ExitStatus::Unknown();
    }
    got = ::waitpid(-pid_, &status, WNOHANG);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    if (got == pid_) status_ = ExitStatus::FromWaitStatus(status);
  }
}

std::optional<ExitStatus> Subprocess::Wait(Clock::time_point deadline) {
  for (;;) {
    if (Poll()) return status_;
    auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    if (pidfd_.valid()) {
      pollfd fd{pidfd_.get(), POLLIN, 0};
      ::poll(&fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    } else {
      std::this_thread::sleep_for(
          std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(5)));
    }
  }
}

ExitStatus Subprocess::Wait() {
  while (!Wait(Clock::now() + std::chrono::hours(1))) {
  }
  return *status_;
}

bool Subprocess::SignalGroup(int signal) {
  if (pid_ <= 0 || group_gone_) return false;
  if (::kill(-pid_, signal) == 0) return true;
  if (errno == ESRCH && status_) group_gone_ = true;
  return false;
}

void Subprocess::AwaitGroupReaped() {
  // Killed members die at once; this only waits for their reaping (ours as
  // a subreaper, else init's), and not for long.
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (GroupAlive() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  SignalGroup(0);  // notes an empty group
}

bool Subprocess::GroupAlive() {
  if (pid_ <= 0 || group_gone_) return false;
  ReapGroup();
  return ::kill(-pid_, 0) == 0 || errno == EPERM;
}

ExitStatus Subprocess::Terminate(std::chrono::milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  SignalGroup(SIGTERM);
  Wait(deadline);
  while (GroupAlive() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  SignalGroup(SIGKILL);
  ExitStatus status = Wait();
  AwaitGroupReaped();
  return status;
}

}  // namespace drover::os

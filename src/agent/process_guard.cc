#include "agent/process_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "os/process_tree.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"

namespace drover {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a stopping guard looks for descendants left (they may not be
// its children, so no SIGCHLD tells it).
constexpr milliseconds kStopPoll{20};
// How long the SIGKILL of what is left may take.
constexpr milliseconds kKillLimit{5'000};

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
constexpr int kForwardedSignals[] = {SIGUSR1, SIGUSR2};

void Say(const std::string& message) {
  std::string line = "drover guard: " + message + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

bool IsStopSignal(int signal) {
  return std::find(std::begin(kStopSignals), std::end(kStopSignals), signal) !=
         std::end(kStopSignals);
}

// Ends this process as `status` says: the same exit code, or the same
// signal (without a core file of the guard's own).
[[noreturn]] void ExitAs(const os::ExitStatus& status) {
  if (status.signaled()) {
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);
    ::signal(status.signal(), SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, status.signal());
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::raise(status.signal());
  }
  ::_exit(status.ShellCode());
}

class Guard {
 public:
  explicit Guard(const GuardOptions& options) : options_(options), report_(options.report_fd) {}
  int Run();

 private:
  // Sends the one line the starter waits for; closing is its end of file.
  void Report(const std::string& line);
  // Sends `signal` to the program's group and to every descendant outside
  // it (each once), and starts the grace time if it is a stop.
  void Stop(int signal);
  void SignalTree(int signal);
  // Whether the program has ended and nothing is left below the guard.
  bool Done();
  void KillWhatIsLeft();

  const GuardOptions& options_;
  os::UniqueFd report_;  // inherited from the starter, taken over
  os::Subprocess program_;
  std::optional<os::ExitStatus> status_;
  std::optional<Clock::time_point> kill_at_;
  bool stdin_open_ = true;
};

void Guard::Report(const std::string& line) {
  if (!report_.valid()) return;
  std::string text = line + "\n";
  (void)!::write(report_.get(), text.data(), text.size());
  report_.Reset();
}

void Guard::SignalTree(int signal) {
  program_.SignalGroup(signal);
  // No child, no descendant: an orphan of the tree is reparented to this
  // subreaper. Skipping the scan of /proc matters when many nodes end at
  // once on one host.
  if (!os::HasChildren()) return;
  const pid_t group = program_.pid();
  for (pid_t pid : os::Descendants(::getpid())) {
    if (::getpgid(pid) != group) ::kill(pid, signal);  // the group's members have it
  }
}

void Guard::Stop(int signal) {
  if (kill_at_) return;
  kill_at_ = Clock::now() + options_.grace;
  SignalTree(signal);
}

bool Guard::Done() {
  if (!status_) status_ = program_.Poll();
  if (!status_) return false;
  if (!os::HasChildren()) return true;  // nothing below the guard (SignalTree)
  os::ReapZombieChildren();
  // A child that died after the reaping is a zombie still to reap: leaving it
  // would hand it to the next subreaper unreaped.
  return os::Descendants(::getpid()).empty() && !os::HasChildren();
}

void Guard::KillWhatIsLeft() {
  const size_t left = os::Descendants(::getpid()).size();
  if (!status_) {
    program_.SignalGroup(SIGKILL);
    status_ = program_.Wait();
  }
  if (left > 0) {
    Say(std::to_string(left) + " process(es) of " + options_.command.front() +
        " did not stop within the grace time; killed");
  }
  os::KillOwnDescendants(kKillLimit);
}

int Guard::Run() {
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t handled;
  sigemptyset(&handled);
  for (int signal : kStopSignals) sigaddset(&handled, signal);
  for (int signal : kForwardedSignals) sigaddset(&handled, signal);
  sigaddset(&handled, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &handled, nullptr);
  const os::UniqueFd signals(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals.valid()) {
    Report("error " + std::to_string(static_cast<int>(Status::Code::kIoError)) +
           " signalfd: " + std::strerror(errno));
    return 127;
  }

  os::SubprocessOptions spawn;
  spawn.argv = options_.command;
  Result<os::Subprocess> started = os::Subprocess::Spawn(spawn);
  if (!started.ok()) {
    Report("error " + std::to_string(static_cast<int>(started.status().code())) + " " +
           started.status().message());
    if (options_.report_fd < 0) Say(started.status().message());
    return 127;
  }
  program_ = std::move(started).value();
  Report("pid " + std::to_string(program_.pid()));
  // A parent that died before the program started sent its signal already.
  if (::getppid() != parent) Stop(SIGTERM);

  for (;;) {
    pollfd fds[3];
    int count = 0;
    fds[count++] = {signals.get(), POLLIN, 0};
    const int exit_slot = !status_ && program_.exit_fd() >= 0 ? count : -1;
    if (exit_slot >= 0) fds[count++] = {program_.exit_fd(), POLLIN, 0};
    const int stdin_slot = options_.exit_with_stdin && stdin_open_ ? count : -1;
    if (stdin_slot >= 0) fds[count++] = {STDIN_FILENO, POLLIN, 0};
    int timeout = -1;
    if (kill_at_ || program_.exit_fd() < 0) timeout = static_cast<int>(kStopPoll.count());
    ::poll(fds, static_cast<nfds_t>(count), timeout);

    signalfd_siginfo info;
    while (::read(signals.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      const int signal = static_cast<int>(info.ssi_signo);
      if (IsStopSignal(signal)) {
        Stop(signal);
      } else if (signal != SIGCHLD && !status_) {
        program_.SignalGroup(signal);
      }
    }
    if (stdin_slot >= 0 && fds[stdin_slot].revents != 0) {
      char buffer[256];
      const ssize_t got = ::read(STDIN_FILENO, buffer, sizeof(buffer));
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        stdin_open_ = false;
        Stop(SIGTERM);
      }
    }
    if (!status_ && (status_ = program_.Poll())) {
      Stop(SIGTERM);  // whatever the program left behind
    }
    if (Done()) break;
    if (kill_at_ && Clock::now() >= *kill_at_) {
      KillWhatIsLeft();
      break;
    }
  }
  for (const std::string& path : options_.remove_at_exit) {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ExitAs(*status_);
}

}  // namespace

int RunGuard(const GuardOptions& options) {
  if (options.command.empty()) {
    Say("no command to run after `--`");
    return 2;
  }
  Guard guard(options);
  return guard.Run();
}

Result<int> ReadGuardReport(int fd, Clock::time_point deadline) {
  std::string line;
  for (;;) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    pollfd in{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&in, 1, static_cast<int>(left.count())) == 0) {
      return Status::DeadlineExceeded("the process guard did not start the program in time");
    }
    char buffer[512];
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    line.append(buffer, static_cast<size_t>(got));
    if (line.find('\n') != std::string::npos || line.size() > 64 * 1024) break;
  }
  line = line.substr(0, line.find('\n'));
  if (line.rfind("pid ", 0) == 0) {
    const int pid = std::atoi(line.c_str() + 4);
    if (pid > 0) return pid;
  }
  if (line.rfind("error ", 0) == 0) {
    char* end = nullptr;
    const long code = std::strtol(line.c_str() + 6, &end, 10);
    std::string message = *end == ' ' ? std::string(end + 1) : line;
    if (code > 0 && code <= static_cast<long>(Status::Code::kCancelled)) {
      return Status(static_cast<Status::Code>(code), message);
    }
    return Status::IoError(message);
  }
  return Status::Unavailable("the process guard ended before it started the program" +
                             (line.empty() ? std::string() : ": " + line));
}

}  // namespace drover

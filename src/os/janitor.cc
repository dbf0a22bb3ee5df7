#include "os/janitor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "os/find_program.h"
#include "os/process_tree.h"

namespace drover::os {
namespace {

namespace fs = std::filesystem;

// How long the destructor waits for the janitor to finish its cleanup.
constexpr auto kFinishLimit = std::chrono::seconds(10);

// The processes (other than this one) whose command line names `path`.
std::vector<pid_t> ProcessesNaming(const std::string& path) {
  std::vector<pid_t> found;
  for (const ProcessEntry& process : ListProcesses()) {
    if (process.pid == ::getpid() || process.state == 'Z') continue;
    std::ifstream in("/proc/" + std::to_string(process.pid) + "/cmdline", std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find(path) != std::string::npos) found.push_back(process.pid);
  }
  return found;
}

}  // namespace

Result<std::unique_ptr<Janitor>> Janitor::Start(const std::string& drover) {
  const std::string drover_binary = GuardBinaryBeside(drover);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return Status::IoError(std::string("cannot start the janitor: pipe2: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int saved = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return Status::IoError(std::string("cannot start the janitor: fork: ") + std::strerror(saved));
  }
  if (pid == 0) {
    // Async-signal-safe calls only: the parent may have threads. A group of
    // its own, so a terminal's ^C reaches the driver, not its janitor.
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::dup2(pipe_fds[0], STDIN_FILENO) < 0) ::_exit(127);
    // Nothing else of the parent's: a pipe the janitor held open would keep
    // its reader from seeing the end.
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (null_fd < 0 || ::dup2(null_fd, STDOUT_FILENO) < 0 || ::dup2(null_fd, STDERR_FILENO) < 0) {
      ::_exit(127);
    }
#ifdef SYS_close_range
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
#endif
    const char* argv[] = {drover_binary.c_str(), "janitor", nullptr};
    ::execv(drover_binary.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  ::close(pipe_fds[0]);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  return std::unique_ptr<Janitor>(new Janitor(pid, pidfd, pipe_fds[1]));
}

Janitor::~Janitor() {
  {
    MutexLock lock(mu_);
    ::close(pipe_fd_);
    pipe_fd_ = -1;
  }
  const auto until = std::chrono::steady_clock::now() + kFinishLimit;
  for (;;) {
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_ || (got < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      ::poll(&p, 1, 100);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (pidfd_ >= 0) ::close(pidfd_);
}

void Janitor::Send(char op, const std::string& path) {
  MutexLock lock(mu_);
  if (pipe_fd_ < 0 || path.empty() || path.find('\n') != std::string::npos) return;
  const std::string line = op + path + "\n";
  // Short lines to a reader that only waits for them: a write below
  // PIPE_BUF is atomic and does not block for long.
  (void)!::write(pipe_fd_, line.data(), line.size());
}

void Janitor::Watch(const std::string& path) {
  Send('+', path);
}

void Janitor::Forget(const std::string& path) {
  Send('-', path);
}

int RunJanitor(int fd) {
  // Only the end of the pipe ends it: a terminal's or a group's signal is
  // for the process it watches.
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(signal, SIG_IGN);
  std::set<std::string> paths;
  std::string buffer;
  char chunk[4096];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    buffer.append(chunk, static_cast<size_t>(got));
    size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      if (line.size() < 2 || line[1] != '/') continue;  // absolute paths only
      if (line[0] == '+') paths.insert(line.substr(1));
      if (line[0] == '-') paths.erase(line.substr(1));
    }
  }
  for (const std::string& path : paths) {
    std::error_code ignored;
    if (!fs::is_directory(path, ignored)) continue;
    for (pid_t pid : ProcessesNaming(path)) ::kill(pid, SIGTERM);
  }
  for (const std::string& path : paths) {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  return 0;
}

}  // namespace drover::os

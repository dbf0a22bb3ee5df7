#include "engine/local_engine.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

extern char** environ;

namespace drover {

namespace {

class ChildProcess : public AgentProcess {
 public:
  ChildProcess(std::string id, pid_t pid, int output_fd)
      : id_(std::move(id)), pid_(pid), output_fd_(output_fd) {}
  ~ChildProcess() override {
    CloseOutput();
    // The last line of defence against orphans: whatever is left of the group dies.
    if (pid_ > 0) ::killpg(pid_, SIGKILL);
    if (!exit_) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  const std::string& executor_id() const override { return id_; }
  int pid() const override { return pid_; }
  int output_fd() const override { return output_fd_; }
  void CloseOutput() override {
    if (output_fd_ >= 0) ::close(output_fd_);
    output_fd_ = -1;
  }
  std::optional<ExitStatus> Poll() override {
    if (exit_) return exit_;
    int status = 0;
    pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_) exit_ = ExitStatus::FromWaitStatus(status);
    return exit_;
  }
  void Signal(int signal) override {
    if (pid_ > 0) ::killpg(pid_, signal);
  }

 private:
  std::string id_;
  pid_t pid_;
  int output_fd_;
  std::optional<ExitStatus> exit_;
};

// TEST ONLY: stands for an agent the engine never started.
class NotStarted : public AgentProcess {
 public:
  explicit NotStarted(std::string id) : id_(std::move(id)) {}
  const std::string& executor_id() const override { return id_; }
  int pid() const override { return 0; }
  int output_fd() const override { return -1; }
  void CloseOutput() override {}
  std::optional<ExitStatus> Poll() override { return std::nullopt; }
  void Signal(int) override {}

 private:
  std::string id_;
};

Status Errno(const std::string& what) {
  return Status::IoError(what + ": " + std::strerror(errno));
}

}  // namespace

Result<std::string> SelfExecutable() {
  char buffer[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return Errno("cannot read /proc/self/exe to find the drover binary");
  return std::string(buffer, static_cast<size_t>(n));
}

Result<std::unique_ptr<AgentProcess>> SpawnProcessGroup(const std::string& id,
                                                        const std::vector<std::string>& argv,
                                                        bool capture_output, int death_signal) {
  if (argv.empty()) return Status::InvalidArgument("cannot start " + id + ": empty command");
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls (the driver has other threads).
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  int out[2] = {-1, -1};
  if (capture_output && ::pipe2(out, O_CLOEXEC) != 0) return Errno("pipe for " + id);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    int saved = errno;
    if (capture_output) ::close(out[0]), ::close(out[1]);
    errno = saved;
    return Errno("pipe for " + id);
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int saved = errno;
    if (capture_output) ::close(out[0]), ::close(out[1]);
    ::close(report[0]), ::close(report[1]);
    errno = saved;
    return Errno("fork for " + id);
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, death_signal);
    if (::getppid() != parent) ::_exit(127);  // the driver died before prctl
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the driver blocks SIGINT/SIGTERM
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    if (capture_output) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(out[1], STDERR_FILENO);
    }
    ::execve(args[0], args.data(), environ);
    int error = errno;
    ssize_t ignored = ::write(report[1], &error, sizeof(error));
    (void)ignored;
    ::_exit(127);
  }
  // Also from the parent, so the group exists before anyone signals it.
  ::setpgid(pid, pid);
  ::close(report[1]);
  if (capture_output) ::close(out[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == sizeof(child_errno)) {
    int status;
    ::waitpid(pid, &status, 0);
    if (capture_output) ::close(out[0]);
    return Status::IoError("cannot start " + id + " (" + argv[0] +
                           "): " + std::strerror(child_errno));
  }
  if (capture_output) ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<AgentProcess>(
      std::make_unique<ChildProcess>(id, pid, capture_output ? out[0] : -1));
}

LocalEngine::LocalEngine(LocalEngineOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<AgentProcess>> LocalEngine::Launch(const AgentLaunch& launch) {
  if (options_.skip_executors.count(launch.executor_id) != 0) {
    return std::unique_ptr<AgentProcess>(std::make_unique<NotStarted>(launch.executor_id));
  }
  // SIGTERM, not SIGKILL: an agent told its driver is gone stops its program's
  // whole process group, which SIGKILL would leave behind.
  return SpawnProcessGroup("executor " + launch.executor_id, launch.argv,
                           /*capture_output=*/true, SIGTERM);
}

}  // namespace drover

#include "ssh/ssh_command.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "os/subprocess.h"

namespace drover::ssh {
namespace {

using Clock = std::chrono::steady_clock;

bool IsShellSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("@%_-+=:,./", c) != nullptr;
}

std::vector<std::string> CommonOptions(const SshHost& host, const SshOptions& options) {
  std::vector<std::string> argv = {options.ssh_binary};
  if (!options.config_file.empty()) argv.insert(argv.end(), {"-F", options.config_file});
  auto option = [&argv](const std::string& value) { argv.insert(argv.end(), {"-o", value}); };
  option("BatchMode=yes");  // a prompt would hang a run with no terminal
  option("ConnectTimeout=" + std::to_string(options.connect_timeout_s));
  option("ServerAliveInterval=15");  // a host that vanished ends the session
  option("ServerAliveCountMax=3");
  if (!options.control_dir.empty()) {
    option("ControlMaster=auto");
    option("ControlPath=" + options.control_dir + "/%C");
    option("ControlPersist=" + std::to_string(options.control_persist_s));
  }
  if (!options.check_host_keys) {
    option("StrictHostKeyChecking=no");
    option("UserKnownHostsFile=/dev/null");
    option("LogLevel=ERROR");  // no "Permanently added" line per command
  }
  for (const std::string& extra : options.extra_options) option(extra);
  if (!host.username.empty()) argv.insert(argv.end(), {"-l", host.username});
  if (host.port != 0) argv.insert(argv.end(), {"-p", std::to_string(host.port)});
  if (!host.key_file.empty()) {
    argv.insert(argv.end(), {"-i", host.key_file});
    option("IdentitiesOnly=yes");
  }
  return argv;
}

// Blocks SIGPIPE on this thread while it lives (the remote side may exit
// without reading its input), and drops one left pending.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_set_);
    sigaddset(&pipe_set_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_set_);
  }
  ~NoSigpipe() {
    struct timespec zero {};
    ::sigtimedwait(&pipe_set_, nullptr, &zero);
    ::pthread_sigmask(SIG_SETMASK, &old_set_, nullptr);
  }

 private:
  sigset_t pipe_set_, old_set_;
};

// Writes what the pipe takes of `data` from `*done` on, without blocking;
// false when the reader is gone.
bool WriteSome(int fd, const std::string& data, size_t* done) {
  while (*done < data.size()) {
    const ssize_t wrote = ::write(fd, data.data() + *done, data.size() - *done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    *done += static_cast<size_t>(wrote);
  }
  return true;
}

// Reads what is there from `*fd` into `out`; closes it at end of file.
void Drain(os::Subprocess& process, bool is_stdout, std::string* out) {
  const int fd = is_stdout ? process.stdout_fd() : process.stderr_fd();
  char buffer[16384];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got > 0) {
      out->append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && (errno == EINTR)) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (is_stdout) {
      process.CloseStdout();
    } else {
      process.CloseStderr();
    }
    return;
  }
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  if (!word.empty()) {
    bool safe = true;
    for (char c : word) safe = safe && IsShellSafe(c);
    if (safe) return word;
  }
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string ShellJoin(const std::vector<std::string>& words) {
  std::string joined;
  for (const std::string& word : words) {
    if (!joined.empty()) joined += ' ';
    joined += ShellQuote(word);
  }
  return joined;
}

std::vector<std::string> SshArgv(const SshHost& host, const SshOptions& options,
                                 const std::string& remote_command) {
  std::vector<std::string> argv = CommonOptions(host, options);
  argv.insert(argv.end(), {"-T", "--", host.address, remote_command});
  return argv;
}

std::string RemoteCommand(const SshHost& host, const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, const std::string& cwd) {
  std::string command;
  if (!cwd.empty()) command += "cd " + ShellQuote(cwd) + " 2>/dev/null || cd; ";
  if (!host.python_venv.empty()) command += host.python_venv + " && ";
  command += "exec";
  std::map<std::string, std::string> all = host.env;
  for (const auto& [name, value] : env) all[name] = value;
  if (!all.empty()) {
    command += " env";
    for (const auto& [name, value] : all) command += " " + ShellQuote(name + "=" + value);
  }
  return command + " " + ShellJoin(argv);
}

Result<CommandResult> RunProcess(const std::vector<std::string>& argv, const std::string& input,
                                 int timeout_s) {
  os::SubprocessOptions spawn;
  spawn.argv = argv;
  spawn.pipe_output = true;
  spawn.pipe_stdin = true;
  Result<os::Subprocess> started = os::Subprocess::Spawn(spawn);
  if (!started.ok()) {
    return Status::IoError("cannot run " + argv.front() + ": " + started.status().message());
  }
  os::Subprocess process = std::move(started).value();
  const std::string timed_out =
      argv.front() + " gave no answer in " + std::to_string(timeout_s) + " s";
  // Input and output move together, so a command that answers before it has
  // read everything (or floods its output) never blocks the other side.
  NoSigpipe no_sigpipe;
  ::fcntl(process.stdin_fd(), F_SETFL, ::fcntl(process.stdin_fd(), F_GETFL) | O_NONBLOCK);
  size_t written = 0;
  if (input.empty()) process.CloseStdin();
  CommandResult result;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (process.stdout_fd() >= 0 || process.stderr_fd() >= 0) {
    pollfd fds[3] = {{process.stdout_fd(), POLLIN, 0},
                     {process.stderr_fd(), POLLIN, 0},
                     {process.stdin_fd(), POLLOUT, 0}};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status::DeadlineExceeded(timed_out);
    if (::poll(fds, 3, static_cast<int>(left)) < 0 && errno != EINTR) {
      return Status::IoError(std::string("poll: ") + std::strerror(errno));
    }
    if (process.stdin_fd() >= 0 && fds[2].revents != 0) {
      // A reader that is gone (EPIPE, POLLERR) takes no more: stop writing.
      if (!WriteSome(process.stdin_fd(), input, &written) || written == input.size()) {
        process.CloseStdin();
      }
    }
    if (process.stdout_fd() >= 0) Drain(process, true, &result.output);
    if (process.stderr_fd() >= 0) Drain(process, false, &result.error);
  }
  process.CloseStdin();
  std::optional<os::ExitStatus> status = process.Wait(deadline);
  if (!status) return Status::DeadlineExceeded(timed_out);
  result.exit_code = status->ShellCode();
  return result;
}

Result<CommandResult> RunSsh(const SshHost& host, const SshOptions& options,
                             const std::string& remote_command, const std::string& input,
                             int timeout_s) {
  Result<CommandResult> result =
      RunProcess(SshArgv(host, options, remote_command), input, timeout_s);
  if (!result.ok()) return result.status().WithContext("ssh " + host.address);
  return result;
}

std::string ResolveAddress(const SshHost& host, const SshOptions& options) {
  std::vector<std::string> argv = CommonOptions(host, options);
  argv.insert(argv.end(), {"-G", "--", host.address});
  Result<CommandResult> result = RunProcess(argv, "", 10);
  if (!result.ok() || result->exit_code != 0) return host.address;
  std::istringstream lines(result->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("hostname ", 0) == 0) return line.substr(9);
  }
  return host.address;
}

void StopMasters(const std::vector<SshHost>& hosts, const SshOptions& options) {
  if (options.control_dir.empty()) return;
  for (const SshHost& host : hosts) {
    os::SubprocessOptions spawn;
    spawn.argv = CommonOptions(host, options);
    spawn.argv.insert(spawn.argv.end(), {"-O", "exit", "--", host.address});
    spawn.pipe_output = true;  // "Exit request sent." or "No ControlPath": not the user's business
    Result<os::Subprocess> process = os::Subprocess::Spawn(spawn);
    if (process.ok()) process->Wait(Clock::now() + std::chrono::seconds(5));
  }
}

}  // namespace drover::ssh

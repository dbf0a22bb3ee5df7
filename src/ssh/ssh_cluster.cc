#include "ssh/ssh_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/local_engine.h"
#include "os/fd_io.h"
#include "os/read_file.h"
#include "os/shell_quote.h"
#include "os/sigpipe_block.h"

namespace drover::ssh {
namespace {

using Clock = std::chrono::steady_clock;

// RemoteExec's wrapper, run as `bash -c SCRIPT drover-remote-exec COMMAND`.
// Job control (set -m) puts the command and the watchdog in process groups
// of their own; bash's job notices go to the saved-away stderr, the
// command's stderr to the real one (fd 3).
constexpr char kWatchdog[] =
    "exec 3>&2 2>/dev/null; set -m; "
    "bash -c \"$1\" </dev/null 2>&3 3>&- & c=$!; "
    "{ cat >/dev/null; kill -TERM -- -$c; sleep 10; kill -KILL -- -$c; } 2>&3 3>&- & "
    "w=$!; wait $c; s=$?; kill -- -$w; exit $s";

std::string LastLine(const std::string& text) {
  std::istringstream lines(text);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) last = line;
  }
  return last;
}

// The directory part of a remote path ("" when it has none worth making).
std::string RemoteParent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "";
  std::string parent = path.substr(0, slash);
  while (!parent.empty() && parent.back() == '/') parent.pop_back();
  if (parent.empty() || parent == "~") return "";
  return parent;
}

}  // namespace

std::string RemotePathWord(const std::string& path) {
  if (path == "~") return "~";
  if (path.rfind("~/", 0) == 0) {
    std::string rest = path.substr(2);
    return rest.empty() ? "~/" : "~/" + os::ShellQuote(rest);
  }
  return os::ShellQuote(path);
}

Status RemoteFailure(const SshHost& host, std::string_view what, const os::CommandResult& result) {
  std::string line = LastLine(result.error);
  if (line.empty()) line = "exit code " + std::to_string(result.exit_code) + ", no message";
  const bool denied = result.error.find("Permission denied") != std::string::npos;
  if (result.exit_code == 255) {
    std::string message = "ssh to " + host.address + " failed (" + std::string(what) + "): " + line;
    return denied ? Status::PermissionDenied(message) : Status::Unavailable(message);
  }
  std::string message = std::string(what) + " on " + host.address + ": " + line;
  return denied ? Status::PermissionDenied(message) : Status::IoError(message);
}

Result<std::unique_ptr<SshCluster>> SshCluster::Create(const std::string& path, Options options,
                                                       Environment& env) {
  DROVER_ASSIGN_OR_RETURN(std::string text,
                          os::ReadFileCapped(path, kMaxResourceSpecBytes, "resource spec"));
  return FromText(text, path, std::move(options), env);
}

Result<std::unique_ptr<SshCluster>> SshCluster::FromText(std::string_view yaml,
                                                         std::string_view source, Options options,
                                                         Environment& env) {
  DROVER_ASSIGN_OR_RETURN(ResourceSpec spec, ParseResourceSpec(yaml, source));
  DROVER_ASSIGN_OR_RETURN(std::vector<SshHost> hosts, HostsFromResourceSpec(yaml, source, env));
  DROVER_ASSIGN_OR_RETURN(
      std::unique_ptr<ResourceSpecClusterResolver> resolver,
      ResourceSpecClusterResolver::Create(std::move(spec), options.resolver, env));
  // Under /tmp rather than $TMPDIR: a socket path must stay short (108 bytes).
  char dir[] = "/tmp/drover-ssh-XXXXXX";
  if (::mkdtemp(dir) == nullptr) {
    return Status::IoError(std::string("cannot make the ssh ControlMaster directory: mkdtemp: ") +
                           std::strerror(errno));
  }
  options.ssh.control_dir = dir;
  std::unique_ptr<SshCluster> cluster(
      new SshCluster(std::move(hosts), std::move(resolver), std::move(options)));
  cluster->spec_text_ = std::string(yaml);
  return cluster;
}

SshCluster::SshCluster(std::vector<SshHost> hosts,
                       std::unique_ptr<ResourceSpecClusterResolver> resolver, Options options)
    : hosts_(std::move(hosts)), resolver_(std::move(resolver)), options_(std::move(options)) {}

SshCluster::~SshCluster() {
  Terminate();
  StopMasters(hosts_, options_.ssh);
  std::error_code ignored;
  std::filesystem::remove_all(options_.ssh.control_dir, ignored);
}

bool SshCluster::is_chief(const std::optional<std::string>& address) const {
  return resolver_->is_chief(address);
}

Result<std::string> SshCluster::get_address_from_task(std::string_view job_name,
                                                      int task_index) const {
  return resolver_->get_address_from_task(job_name, task_index);
}

std::string SshCluster::get_local_address() const {
  return resolver_->get_local_address();
}

Result<int> SshCluster::get_local_worker_task_index() const {
  return resolver_->get_local_worker_task_index();
}

Result<std::string> SshCluster::get_local_session_target() const {
  return resolver_->get_local_session_target();
}

std::vector<std::string> SshCluster::addresses() const {
  std::vector<std::string> out;
  for (const SshHost& host : hosts_) out.push_back(host.address);
  return out;
}

Result<const SshHost*> SshCluster::FindHost(std::string_view hostname) const {
  std::string known;
  for (const SshHost& host : hosts_) {
    if (host.address == hostname) return &host;
    known += (known.empty() ? "" : ", ") + host.address;
  }
  return Status::NotFound("host '" + std::string(hostname) +
                          "' is not a node of the resource spec (nodes: " + known + ")");
}

Result<std::vector<std::string>> SshCluster::SshArgvFor(std::string_view hostname,
                                                        const std::string& remote_command) const {
  DROVER_ASSIGN_OR_RETURN(const SshHost* host, FindHost(hostname));
  return SshArgv(*host, options_.ssh, remote_command);
}

Result<std::string> SshCluster::RemoteExecCommand(const std::vector<std::string>& args,
                                                  std::string_view hostname) const {
  DROVER_ASSIGN_OR_RETURN(const SshHost* host, FindHost(hostname));
  if (args.empty()) {
    return Status::InvalidArgument("remote_exec on " + host->address + ": no command given");
  }
  std::string joined;
  for (const std::string& arg : args) joined += (joined.empty() ? "" : " ") + arg;
  return RemoteCommand(*host, {"bash", "-c", kWatchdog, "drover-remote-exec", joined}, {}, "");
}

Result<os::Subprocess> SshCluster::RemoteExec(const std::vector<std::string>& args,
                                              std::string_view hostname) const {
  DROVER_ASSIGN_OR_RETURN(std::string command, RemoteExecCommand(args, hostname));
  DROVER_ASSIGN_OR_RETURN(std::vector<std::string> argv, SshArgvFor(hostname, command));
  os::SubprocessOptions spawn;
  spawn.argv = std::move(argv);
  spawn.pipe_output = true;
  spawn.pipe_stdin = true;
  Result<os::Subprocess> process = os::Subprocess::Spawn(spawn);
  if (!process.ok()) {
    return process.status().WithContext("remote_exec on " + std::string(hostname));
  }
  return process;
}

Status SshCluster::RemoteFileWrite(const std::string& remote_path, const std::string& data,
                                   std::string_view hostname) const {
  DROVER_ASSIGN_OR_RETURN(const SshHost* host, FindHost(hostname));
  const std::string what = "remote_file_write of '" + remote_path + "'";
  if (remote_path.empty() || remote_path.back() == '/') {
    return Status::InvalidArgument(what + " on " + host->address + ": not a file path");
  }
  const std::string target = RemotePathWord(remote_path);
  std::string command;
  const std::string parent = RemoteParent(remote_path);
  if (!parent.empty()) command += "mkdir -p -- " + RemotePathWord(parent) + " && ";
  command += "cat > " + target + " && wc -c < " + target;
  DROVER_ASSIGN_OR_RETURN(os::CommandResult result,
                          RunSsh(*host, options_.ssh, command, data, options_.timeout_s));
  if (result.exit_code != 0) return RemoteFailure(*host, what, result);
  std::string count = LastLine(result.output);
  while (!count.empty() && count.front() == ' ') count.erase(0, 1);
  if (count != std::to_string(data.size())) {
    return Status::IoError(what + " on " + host->address + ": wrote " +
                           std::to_string(data.size()) + " bytes but the file holds " +
                           (count.empty() ? "an unknown number" : count));
  }
  return Status::Ok();
}

Status SshCluster::RemoteCopy(const std::string& local_path, const std::string& remote_dir,
                              std::string_view hostname) const {
  DROVER_ASSIGN_OR_RETURN(const SshHost* host, FindHost(hostname));
  const std::string what =
      "remote_copy of '" + local_path + "' into '" + remote_dir + "' on " + host->address;
  if (remote_dir.empty()) return Status::InvalidArgument(what + ": no remote directory given");
  std::string trimmed = local_path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  struct stat info;
  if (::stat(trimmed.c_str(), &info) != 0) {
    const int error = errno;
    std::string message = what + ": local path: " + std::strerror(error);
    if (error == ENOENT || error == ENOTDIR) return Status::NotFound(message);
    if (error == EACCES) return Status::PermissionDenied(message);
    return Status::IoError(message);
  }
  if (::access(trimmed.c_str(), R_OK) != 0) {
    return Status::PermissionDenied(what + ": local path is not readable");
  }
  std::filesystem::path path(trimmed);
  std::string name = path.filename().string();
  std::string parent = path.parent_path().string();
  if (name.empty() || name == "." || name == ".." || name == "/") {
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::canonical(path, ec);
    if (ec || absolute == absolute.root_path()) {
      return Status::InvalidArgument(what + ": cannot copy a file system root");
    }
    name = absolute.filename().string();
    parent = absolute.parent_path().string();
  }
  if (parent.empty()) parent = ".";

  // A symbolic link given as local_path is followed, as scp and sftp do:
  // "-h" for a file; "name/." for a directory (whose entries tar then
  // names "name/./x", extracted as "name/x").
  // Links inside a directory stay links.
  struct stat link_info;
  std::vector<std::string> tar_argv = {"tar", "-C", parent, "-cf", "-"};
  std::string member = name;
  if (::lstat(trimmed.c_str(), &link_info) == 0 && S_ISLNK(link_info.st_mode)) {
    if (S_ISDIR(info.st_mode)) {
      member += "/.";
    } else {
      tar_argv.push_back("-h");
    }
  }
  tar_argv.insert(tar_argv.end(), {"--", member});
  os::SubprocessOptions tar_spawn;
  tar_spawn.argv = std::move(tar_argv);
  tar_spawn.pipe_output = true;
  Result<os::Subprocess> tar_started = os::Subprocess::Spawn(tar_spawn);
  if (!tar_started.ok()) return tar_started.status().WithContext(what + ": local tar");
  os::Subprocess tar = std::move(tar_started).value();

  const std::string dir = RemotePathWord(remote_dir);
  const std::string command =
      "mkdir -p -- " + dir + " && exec tar -C " + dir + " --no-same-owner -xpf -";
  os::SubprocessOptions ssh_spawn;
  ssh_spawn.argv = SshArgv(*host, options_.ssh, command);
  ssh_spawn.pipe_output = true;
  ssh_spawn.pipe_stdin = true;
  Result<os::Subprocess> ssh_started = os::Subprocess::Spawn(ssh_spawn);
  if (!ssh_started.ok()) return ssh_started.status().WithContext(what + ": ssh");
  os::Subprocess ssh = std::move(ssh_started).value();
  os::SetNonBlocking(ssh.stdin_fd());

  // Pumps tar's archive into ssh's stdin while collecting both stderrs.
  os::SigpipeBlock no_sigpipe;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(options_.timeout_s);
  std::string pending;  // read from tar, not yet written to ssh
  size_t pending_at = 0;
  std::string tar_error, ssh_output, ssh_error;
  bool remote_gone = false;  // ssh's stdin refused more (the remote side exited)
  for (;;) {
    const bool tar_open = tar.stdout_fd() >= 0;
    if (!tar_open && pending_at == pending.size() && ssh.stdin_fd() >= 0) ssh.CloseStdin();
    if (tar.stdout_fd() < 0 && tar.stderr_fd() < 0 && ssh.stdout_fd() < 0 && ssh.stderr_fd() < 0) {
      break;
    }
    pollfd fds[5];
    int count = 0;
    auto watch = [&](int fd, short events) { fds[count++] = {fd, events, 0}; };
    // Reads more from tar only once what it gave is sent: memory stays bounded.
    if (pending_at == pending.size()) watch(tar.stdout_fd(), POLLIN);
    watch(tar.stderr_fd(), POLLIN);
    watch(ssh.stdout_fd(), POLLIN);
    watch(ssh.stderr_fd(), POLLIN);
    if (pending_at < pending.size() && ssh.stdin_fd() >= 0) watch(ssh.stdin_fd(), POLLOUT);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      return Status::DeadlineExceeded(what + ": not done after " +
                                      std::to_string(options_.timeout_s) + " s");
    }
    if (::poll(fds, count, static_cast<int>(left)) < 0 && errno != EINTR) {
      return Status::IoError(what + ": poll: " + std::strerror(errno));
    }
    if (pending_at == pending.size() && tar.stdout_fd() >= 0) {
      pending.clear();
      pending_at = 0;
      if (!os::ReadAvailable(tar.stdout_fd(), &pending)) tar.CloseStdout();
      if (remote_gone) pending.clear();
    }
    if (tar.stderr_fd() >= 0 && !os::ReadAvailable(tar.stderr_fd(), &tar_error)) tar.CloseStderr();
    if (ssh.stdout_fd() >= 0 && !os::ReadAvailable(ssh.stdout_fd(), &ssh_output)) ssh.CloseStdout();
    if (ssh.stderr_fd() >= 0 && !os::ReadAvailable(ssh.stderr_fd(), &ssh_error)) ssh.CloseStderr();
    if (pending_at < pending.size() && ssh.stdin_fd() >= 0 &&
        !os::WriteAvailable(ssh.stdin_fd(), pending, &pending_at)) {
      // EPIPE: the remote side stopped reading; its stderr says why. Stop tar.
      remote_gone = true;
      ssh.CloseStdin();
      tar.SignalGroup(SIGTERM);
    }
    if (remote_gone) {
      pending.clear();
      pending_at = 0;
    }
  }
  std::optional<os::ExitStatus> tar_status = tar.Wait(deadline);
  std::optional<os::ExitStatus> ssh_status = ssh.Wait(deadline);
  if (!tar_status || !ssh_status) {
    return Status::DeadlineExceeded(what + ": not done after " +
                                    std::to_string(options_.timeout_s) + " s");
  }
  os::CommandResult remote{ssh_status->ShellCode(), ssh_output, ssh_error};
  if (!ssh_status->success()) return RemoteFailure(*host, what, remote);
  if (!tar_status->success()) {
    std::string line = LastLine(tar_error);
    std::string message = what + ": local tar failed (" + tar_status->ToString() + ")" +
                          (line.empty() ? "" : ": " + line);
    if (tar_error.find("Permission denied") != std::string::npos) {
      return Status::PermissionDenied(message);
    }
    return Status::IoError(message);
  }
  return Status::Ok();
}

}  // namespace drover::ssh

namespace drover::ssh {

Status SshCluster::Start(const std::vector<std::string>& command,
                         const std::vector<std::string>& run_args,
                         std::chrono::milliseconds timeout) {
  if (command.empty()) return Status::InvalidArgument("start: no command given");
  if (run_ && !run_->Poll()) {
    return Status::FailedPrecondition("start: a run is already going (pid " +
                                      std::to_string(run_->pid()) + "); terminate() it first");
  }
  std::string binary = options_.drover_binary;
  if (binary.empty()) {
    DROVER_ASSIGN_OR_RETURN(binary, SelfExecutable());
  }
  // The spec goes to the run as a file in the private directory, so a
  // cluster made from text starts the same way.
  const std::string spec_path = options_.ssh.control_dir + "/resource_spec.yml";
  {
    std::ofstream spec(spec_path, std::ios::binary | std::ios::trunc);
    spec << spec_text_;
    if (!spec) return Status::IoError("cannot write " + spec_path);
  }
  os::SubprocessOptions spawn;
  spawn.argv = {binary, "run", "--engine", "ssh", "--hosts", spec_path};
  if (!options_.ssh.config_file.empty()) {
    spawn.argv.insert(spawn.argv.end(), {"--ssh-config", options_.ssh.config_file});
  }
  for (const std::string& option : options_.ssh.extra_options) {
    spawn.argv.insert(spawn.argv.end(), {"--ssh-option", option});
  }
  if (!options_.ssh.check_host_keys) spawn.argv.push_back("--no-host-key-check");
  spawn.argv.insert(spawn.argv.end(), run_args.begin(), run_args.end());
  spawn.argv.push_back("--");
  spawn.argv.insert(spawn.argv.end(), command.begin(), command.end());
  spawn.pipe_output = true;  // stderr read here for "formed", then passed on
  spawn.parent_death_signal = SIGTERM;
  DROVER_ASSIGN_OR_RETURN(os::Subprocess process, os::Subprocess::Spawn(spawn));
  run_ = std::move(process);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string partial, last_line;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      Terminate(std::chrono::seconds(5));
      return Status::DeadlineExceeded("start: the cluster did not form within " +
                                      std::to_string(timeout.count() / 1000) +
                                      " s (last line: " + last_line + ")");
    }
    pollfd fds[2] = {{run_->stdout_fd(), POLLIN, 0}, {run_->stderr_fd(), POLLIN, 0}};
    ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 200)));
    bool ended = false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buffer[4096];
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (got <= 0) {
        ended = ended || got == 0;
        continue;
      }
      std::fwrite(buffer, 1, static_cast<size_t>(got), i == 0 ? stdout : stderr);
      if (i == 0) continue;
      partial.append(buffer, static_cast<size_t>(got));
      for (size_t end; (end = partial.find('\n')) != std::string::npos; partial.erase(0, end + 1)) {
        std::string line = partial.substr(0, end);
        if (!line.empty()) last_line = line;
        if (line.rfind("drover run: cluster ", 0) == 0 &&
            line.find(" formed: ") != std::string::npos) {
          // Formed: the run's output goes on to this process's from here.
          run_->CloseStdout();
          run_->CloseStderr();
          return Status::Ok();
        }
      }
    }
    if (ended) {
      std::optional<int> code = Terminate(std::chrono::seconds(5));
      return Status::Unavailable("start: drover run ended (exit code " +
                                 std::to_string(code.value_or(-1)) +
                                 ") before the cluster formed: " + last_line);
    }
  }
}

std::optional<int> SshCluster::Terminate(std::chrono::milliseconds grace) {
  if (!run_) return std::nullopt;
  const os::ExitStatus status = run_->Terminate(grace);
  run_.reset();
  return status.ShellCode();
}

}  // namespace drover::ssh

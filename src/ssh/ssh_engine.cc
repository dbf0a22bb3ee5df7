#include "ssh/ssh_engine.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "engine/launcher_agent.h"
#include "os/shell_quote.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"

namespace drover::ssh {
namespace {

namespace fs = std::filesystem;

std::string Trim(std::string text) {
  const char* space = " \t\r\n";
  text.erase(0, text.find_first_not_of(space));
  text.erase(text.find_last_not_of(space) + 1);
  return text;
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// A listening socket on `address`:0 for the pre-flight's connection test;
// the kernel completes connections into the backlog, nobody needs to accept.
struct Listener {
  os::UniqueFd fd;
  int port = 0;
};

Status Listen(const std::string& address, Listener* listener) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(address.c_str(), "0", &hints, &found); rc != 0) {
    return Status::InvalidArgument("the driver address '" + address +
                                   "' is not an IP address: " + ::gai_strerror(rc));
  }
  listener->fd.Reset(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int fd = listener->fd.get();
  bool ok = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
  ::freeaddrinfo(found);
  if (!ok) {
    return Status::IoError("cannot listen on the driver address " + address + ": " +
                           std::strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  listener->port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return Status::Ok();
}

std::string LastLine(const std::string& text) {
  std::string trimmed = Trim(text);
  size_t newline = trimmed.rfind('\n');
  return newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
}

// One host's pre-flight: one ssh command answering three questions.
HostCheck CheckHost(const SshHost& host, const std::string& address, const SshOptions& options,
                    const std::string& working_dir, const std::string& program,
                    const std::string& agent_binary, const std::string& driver_address,
                    int driver_port) {
  HostCheck check;
  check.host = host.address;
  check.address = address;
  const std::string tcp = "/dev/tcp/" + driver_address + "/" + std::to_string(driver_port);
  std::string script = "cd " + os::ShellQuote(working_dir) + " 2>/dev/null || cd; ";
  if (!host.python_venv.empty()) script += host.python_venv + "; ";
  script += "p=$(command -v " + os::ShellQuote(program) +
            ") && echo \"drover-preflight program $p\"; "
            "[ -x " +
            os::ShellQuote(agent_binary) +
            " ] && echo 'drover-preflight agent'; "
            "timeout 5 bash -c " +
            os::ShellQuote("exec 3<>" + tcp) +
            " 2>/dev/null && echo 'drover-preflight driver'; "
            "echo drover-preflight-done";
  Result<os::CommandResult> result =
      RunSsh(host, options, "bash -c " + os::ShellQuote(script), "", 30);
  if (!result.ok()) {
    check.ssh_error = result.status().message();
    return check;
  }
  if (result->exit_code == 255 ||
      result->output.find("drover-preflight-done") == std::string::npos) {
    check.ssh_error = LastLine(result->error);
    if (check.ssh_error.empty()) check.ssh_error = "exit code " + std::to_string(result->exit_code);
    return check;
  }
  check.ssh_ok = true;
  std::istringstream lines(result->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("drover-preflight program ", 0) == 0) {
      check.program_found = true;
      check.program_path = line.substr(25);
    } else if (line == "drover-preflight agent") {
      check.agent_found = true;
    } else if (line == "drover-preflight driver") {
      check.driver_reachable = true;
    }
  }
  return check;
}

}  // namespace

std::string HostCheck::ToString(const std::string& program, const std::string& driver) const {
  std::string text = host + (address == host ? "" : " (" + address + ")") + ": ";
  if (!ssh_ok) return text + "ssh FAILED: " + ssh_error;
  text += "ssh ok; ";
  text += program_found ? program + " at " + program_path : program + " NOT FOUND";
  text += agent_found ? "; drover ok" : "; drover agent binary NOT FOUND";
  text += driver_reachable ? "; driver " + driver + " reachable"
                           : "; driver " + driver + " NOT REACHABLE";
  return text;
}

Result<std::string> LocalAddressTowards(const std::string& remote) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(remote.c_str(), "9", &hints, &found); rc != 0) {
    return Status::Unavailable("cannot resolve " + remote + ": " + ::gai_strerror(rc));
  }
  os::UniqueFd fd(::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  bool connected = fd.valid() && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (!connected || ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    return Status::Unavailable("no route from this machine to " + remote + ": " +
                               std::strerror(errno));
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  ::inet_ntop(local.ss_family, raw, text, sizeof(text));
  return std::string(text);
}

SshEngine::SshEngine(SshEngineOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<SshEngine>> SshEngine::Create(SshEngineOptions options) {
  if (options.hosts.empty()) return Status::InvalidArgument("the ssh engine needs hosts (--hosts)");
  std::unique_ptr<SshEngine> engine(new SshEngine(std::move(options)));
  SshEngineOptions& o = engine->options_;
  if (o.ssh.control_dir.empty()) {
    // Short, so that <dir>/<40 hex> fits a socket path.
    std::string pattern = "/tmp/drover-ssh-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Status::IoError("cannot make a directory for ssh connections: " +
                             std::string(std::strerror(errno)));
    }
    engine->private_dir_ = pattern;
    o.ssh.control_dir = pattern;
  }
  if (o.working_dir.empty()) {
    std::error_code error;
    o.working_dir = fs::current_path(error).string();
  }
  for (size_t h = 0; h < o.hosts.size(); ++h) {
    engine->addresses_.push_back(ResolveAddress(o.hosts[h], o.ssh));
    for (int slot = 0; slot < o.hosts[h].slots; ++slot) engine->slots_.push_back(h);
  }
  engine->driver_address_ = o.driver_address;
  if (engine->driver_address_.empty()) {
    const std::string& first = engine->addresses_.front();
    if (IsLoopback(first)) {
      engine->driver_address_ = "127.0.0.1";
    } else {
      Result<std::string> local = LocalAddressTowards(first);
      if (!local.ok()) {
        return Status::Unavailable("cannot pick the driver address the hosts reach (" +
                                   local.status().message() + "); give --driver-address");
      }
      engine->driver_address_ = *local;
    }
  }
  return engine;
}

SshEngine::~SshEngine() {
  StopMasters(options_.hosts, options_.ssh);
  if (!private_dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(private_dir_, ignored);
  }
}

std::vector<std::string> SshEngine::TemporaryPaths() const {
  if (private_dir_.empty()) return {};
  return {private_dir_};
}

std::string SshEngine::agent_host(int executor_index) const {
  if (executor_index < 0 || static_cast<size_t>(executor_index) >= slots_.size()) return "";
  return addresses_[slots_[static_cast<size_t>(executor_index)]];
}

std::vector<std::string> SshEngine::SlotGpus() const {
  std::vector<std::string> gpus;
  std::vector<int> used(options_.hosts.size(), 0);
  for (size_t host_index : slots_) {
    const SshHost& host = options_.hosts[host_index];
    const int slot = used[host_index]++;
    if (host.gpus.empty()) {
      gpus.emplace_back();
      continue;
    }
    // The host's GPUs dealt out evenly over its slots.
    const size_t per_slot = std::max<size_t>(1, host.gpus.size() / static_cast<size_t>(host.slots));
    std::string list;
    for (size_t k = slot * per_slot; k < (slot + 1) * per_slot && k < host.gpus.size(); ++k) {
      list += (list.empty() ? "" : ",") + std::to_string(host.gpus[k]);
    }
    gpus.push_back(list.empty() ? "none" : list);
  }
  return gpus;
}

Result<size_t> SshEngine::HostOfExecutor(const std::string& executor_id) const {
  int index = -1;
  try {
    index = std::stoi(executor_id);
  } catch (...) {
  }
  if (index < 0 || static_cast<size_t>(index) >= slots_.size()) {
    return Status::InvalidArgument("cannot start executor " + executor_id + ": the hosts have " +
                                   std::to_string(slots_.size()) + " slots");
  }
  return slots_[static_cast<size_t>(index)];
}

std::function<std::string(const os::ExitStatus&)> SshEngine::DescribeSshExit(
    size_t host_index) const {
  const std::string name = options_.hosts[host_index].address;
  return [name](const os::ExitStatus& status) {
    // ssh's own failures and a remote command killed by a signal both
    // end the client with 255.
    if (!status.signaled() && status.exit_code() == 255) {
      return "its ssh session to " + name +
             " ended with exit code 255 (the connection failed or dropped, or the agent "
             "was killed)";
    }
    if (status.signaled()) return "its ssh client to " + name + " was " + status.ToString();
    return DescribeAgentExit(status);
  };
}

Result<std::unique_ptr<AgentProcess>> SshEngine::Launch(const AgentLaunch& launch) {
  DROVER_ASSIGN_OR_RETURN(size_t host_index, HostOfExecutor(launch.executor_id));
  const SshHost& host = options_.hosts[host_index];
  std::vector<std::string> argv = launch.argv;
  DROVER_ASSIGN_OR_RETURN(std::string token, TokenToStdin(&argv));
  return StartThroughLauncher(
      launch.executor_id,
      SshArgv(host, options_.ssh, RemoteCommand(host, argv, options_.env, options_.working_dir)),
      token, DescribeSshExit(host_index));
}

std::vector<std::vector<int>> SshEngine::NodesByHost(int count) const {
  return GroupByHost(std::min(count, total_slots()),
                     [this](int i) { return std::to_string(slots_[static_cast<size_t>(i)]); });
}

Result<std::vector<std::unique_ptr<AgentProcess>>> SshEngine::LaunchHost(const HostLaunch& launch) {
  DROVER_ASSIGN_OR_RETURN(RelayedHostAgent agent, RelayedHostAgentArgv(launch));
  DROVER_ASSIGN_OR_RETURN(size_t host_index, HostOfExecutor(agent.ids.front()));
  for (const std::string& id : agent.ids) {
    DROVER_ASSIGN_OR_RETURN(size_t node_host, HostOfExecutor(id));
    if (node_host != host_index) {
      return Status::InvalidArgument("executors " + agent.ids.front() + " and " + id +
                                     " are not on one host");
    }
  }
  const SshHost& host = options_.hosts[host_index];
  return StartHostThroughLauncher(
      agent.ids,
      SshArgv(host, options_.ssh,
              RemoteCommand(host, agent.agent_argv, options_.env, options_.working_dir)),
      agent.credentials, DescribeSshExit(host_index));
}

Status SshEngine::Preflight(const std::string& program, const std::string& agent_binary,
                            std::ostream& out) {
  Listener listener;
  DROVER_RETURN_IF_ERROR(Listen(driver_address_, &listener));
  std::vector<HostCheck> checks(options_.hosts.size());
  std::vector<std::thread> threads;
  for (size_t h = 0; h < options_.hosts.size(); ++h) {
    threads.emplace_back([&, h] {
      checks[h] = CheckHost(options_.hosts[h], addresses_[h], options_.ssh, options_.working_dir,
                            program, agent_binary, driver_address_, listener.port);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string driver = driver_address_ + ":" + std::to_string(listener.port);
  std::vector<std::string> failed;
  out << "drover run: pre-flight check of " << checks.size() << " host"
      << (checks.size() == 1 ? "" : "s") << "\n";
  for (const HostCheck& check : checks) {
    out << "  " << check.ToString(program, driver) << "\n";
    if (!check.ok()) failed.push_back(check.host);
  }
  if (failed.empty()) return Status::Ok();
  std::string names;
  for (const std::string& name : failed) names += (names.empty() ? "" : ", ") + name;
  return Status::FailedPrecondition("pre-flight check failed on " + names +
                                    "; nothing was started");
}

Result<std::map<std::string, std::string>> ForwardedVariables(
    const std::vector<std::string>& env_flags, const Environment& here) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : here.Variables()) {
    if (name == "PYTHONPATH" || name.rfind("DROVER_", 0) == 0) env[name] = value;
  }
  for (const std::string& flag : env_flags) {
    const size_t equals = flag.find('=');
    std::string name = flag.substr(0, equals);
    if (name.empty())
      return Status::InvalidArgument("--env takes NAME or NAME=VALUE, not '" + flag + "'");
    if (equals != std::string::npos) {
      env[name] = flag.substr(equals + 1);
    } else if (std::optional<std::string> value = here.Get(name)) {
      env[name] = *value;
    } else {
      return Status::InvalidArgument("--env " + name + ": it is not set here; give " + name +
                                     "=VALUE");
    }
  }
  return env;
}

}  // namespace drover::ssh

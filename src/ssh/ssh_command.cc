#include "ssh/ssh_command.h"

#include <chrono>
#include <sstream>

#include "os/shell_quote.h"
#include "os/subprocess.h"

namespace drover::ssh {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

std::vector<std::string> SshArgv(const SshHost& host, const SshOptions& options,
                                 const std::string& remote_command) {
  std::vector<std::string> argv = CommonOptions(host, options);
  argv.insert(argv.end(), {"-T", "--", host.address, remote_command});
  return argv;
}

std::string RemoteCommand(const SshHost& host, const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, const std::string& cwd) {
  std::string command;
  if (!cwd.empty()) command += "cd " + os::ShellQuote(cwd) + " 2>/dev/null || cd; ";
  if (!host.python_venv.empty()) command += host.python_venv + " && ";
  command += "exec";
  std::map<std::string, std::string> all = host.env;
  for (const auto& [name, value] : env) all[name] = value;
  if (!all.empty()) {
    command += " env";
    for (const auto& [name, value] : all) command += " " + os::ShellQuote(name + "=" + value);
  }
  return command + " " + os::ShellJoin(argv);
}

Result<os::CommandResult> RunSsh(const SshHost& host, const SshOptions& options,
                                 const std::string& remote_command, const std::string& input,
                                 int timeout_s) {
  Result<os::CommandResult> result =
      os::RunProcess(SshArgv(host, options, remote_command), input, timeout_s);
  if (!result.ok()) return result.status().WithContext("ssh " + host.address);
  return result;
}

std::string ResolveAddress(const SshHost& host, const SshOptions& options) {
  std::vector<std::string> argv = CommonOptions(host, options);
  argv.insert(argv.end(), {"-G", "--", host.address});
  Result<os::CommandResult> result = os::RunProcess(argv, "", 10);
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

// How drover talks to a host: the system's OpenSSH client, so the user's
// ~/.ssh/config, agent and ProxyJump apply. Every call shares one
// ControlMaster connection per host (ControlPath in a private directory the
// caller owns), so only the first command pays the handshake; StopMasters
// ends them. Host keys are checked unless check_host_keys is false.

#ifndef DROVER_SSH_SSH_COMMAND_H_
#define DROVER_SSH_SSH_COMMAND_H_

#include <map>
#include <string>
#include <vector>

#include "drover/status.h"
#include "os/run_process.h"
#include "ssh/ssh_hosts.h"

namespace drover::ssh {

struct SshOptions {
  std::string ssh_binary = "ssh";
  std::string config_file;                 // -F FILE; "": ~/.ssh/config
  std::vector<std::string> extra_options;  // each passed as -o OPTION
  // Where the ControlMaster sockets live (a private directory, mode 0700);
  // "": no multiplexing.
  std::string control_dir;
  int control_persist_s = 60;
  int connect_timeout_s = 10;
  bool check_host_keys = true;  // false: StrictHostKeyChecking=no, no known_hosts written
};

// argv of `ssh [options] HOST -- REMOTE_COMMAND` (BatchMode: never prompts).
std::vector<std::string> SshArgv(const SshHost& host, const SshOptions& options,
                                 const std::string& remote_command);

// The shell command that runs `argv` on a host in `cwd` (when it exists
// there; else the login directory) with `env` set, after the host's
// python_venv.
std::string RemoteCommand(const SshHost& host, const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, const std::string& cwd);

// Runs `ssh HOST -- remote_command` to its end (os::RunProcess), feeding
// `input` on stdin; exit code 255 when ssh itself failed (connection, auth,
// host key). kDeadlineExceeded naming the host after `timeout_s`; kIoError
// when ssh cannot be started.
Result<os::CommandResult> RunSsh(const SshHost& host, const SshOptions& options,
                                 const std::string& remote_command, const std::string& input,
                                 int timeout_s);

// The address ssh connects to for `host` (`ssh -G`'s hostname: aliases of
// ~/.ssh/config resolved); the host's own address when ssh cannot say.
std::string ResolveAddress(const SshHost& host, const SshOptions& options);

// `ssh -O exit` for every host's ControlMaster; quiet when none runs.
void StopMasters(const std::vector<SshHost>& hosts, const SshOptions& options);

}  // namespace drover::ssh

#endif  // DROVER_SSH_SSH_COMMAND_H_

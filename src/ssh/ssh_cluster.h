// SshCluster: AutoDist's SSHCluster over the system's OpenSSH client. The
// nodes of an AutoDist resource spec are the hosts; the cluster answers
// AutoDist's questions about them (is_chief, get_address_from_task, ...,
// delegated to ResourceSpecClusterResolver) and runs commands, writes files
// and copies files or directories onto them.
//
// A hostname argument is a node address exactly as the spec writes it; the
// node's ssh group (username, port, key_file, python_venv, shared_envs)
// applies. Every ssh call of one SshCluster shares a ControlMaster per host
// whose sockets live in a private directory (/tmp/drover-ssh-XXXXXX, mode
// 0700) that the cluster creates and owns; the destructor stops the masters
// and removes it.
//
// Errors name the host and the path: kNotFound for a hostname that is not a
// node of the spec or a local path that does not exist; kUnavailable when
// ssh itself fails (its own stderr line is in the message); kPermissionDenied
// when the remote side (or ssh's authentication) says "Permission denied";
// kIoError for any other remote failure; kDeadlineExceeded after
// Options::timeout_s.
//
// Const methods may be called from several threads at once. Subprocesses
// are started with PR_SET_PDEATHSIG tied to the calling thread (see
// os/subprocess.h): call RemoteExec from a thread that outlives the child.

#ifndef DROVER_SSH_SSH_CLUSTER_H_
#define DROVER_SSH_SSH_CLUSTER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/environment.h"
#include "drover/resource_spec_cluster_resolver.h"
#include "drover/status.h"
#include "os/subprocess.h"
#include "ssh/ssh_command.h"
#include "ssh/ssh_hosts.h"

namespace drover::ssh {

class SshCluster {
 public:
  struct Options {
    // How ssh is called; control_dir is ignored (the cluster makes its own).
    SshOptions ssh;
    // Deadline of each RemoteFileWrite / RemoteCopy.
    int timeout_s = 300;
    ResourceSpecClusterResolver::Options resolver;
    // The `drover` executable Start() runs; "": this process's own.
    std::string drover_binary;
  };

  // Reads the resource spec at `path`; kIoError when it cannot be read,
  // kInvalidArgument for a bad spec, kIoError when the ControlMaster
  // directory cannot be made.
  static Result<std::unique_ptr<SshCluster>> Create(const std::string& path, Options options,
                                                    Environment& env);
  // The same from the spec's text; `source` names it in errors.
  static Result<std::unique_ptr<SshCluster>> FromText(std::string_view yaml,
                                                      std::string_view source, Options options,
                                                      Environment& env);

  SshCluster(const SshCluster&) = delete;
  SshCluster& operator=(const SshCluster&) = delete;
  ~SshCluster();

  // AutoDist's Cluster questions (see ResourceSpecClusterResolver).
  bool is_chief(const std::optional<std::string>& address = std::nullopt) const;
  Result<std::string> get_address_from_task(std::string_view job_name, int task_index) const;
  std::string get_local_address() const;
  Result<int> get_local_worker_task_index() const;
  Result<std::string> get_local_session_target() const;

  // The node `hostname`; kNotFound naming it and the spec's nodes.
  Result<const SshHost*> FindHost(std::string_view hostname) const;

  // argv of `ssh ... HOST -- remote_command` with this cluster's options and
  // ControlMaster.
  Result<std::vector<std::string>> SshArgvFor(std::string_view hostname,
                                              const std::string& remote_command) const;

  // The remote shell command of RemoteExec: AutoDist's `args` (bash words,
  // joined with spaces and run by `bash -c`, so `;`, `&&` and redirections
  // work) after the host's python_venv, with its shared_envs set, stdin
  // from /dev/null. It runs in its own process group under a watchdog that
  // sends SIGTERM to that group (SIGKILL 10 s later) when the ssh session's
  // stdin ends: the remote command lives as long as its ssh process (what
  // AutoDist gets from `ssh -tt`, without a terminal mangling the output).
  // The exit code is the command's (128 + N when killed by signal N).
  Result<std::string> RemoteExecCommand(const std::vector<std::string>& args,
                                        std::string_view hostname) const;
  // Starts RemoteExecCommand through ssh: stdout and stderr piped to the
  // caller, stdin a pipe the handle holds (CloseStdin() or ending the
  // process stops the remote command). ssh's exit code 255 means ssh failed.
  Result<os::Subprocess> RemoteExec(const std::vector<std::string>& args,
                                    std::string_view hostname) const;

  // Writes `data` (any bytes) to `remote_path` on the host, creating missing
  // parent directories. A relative path, or one starting with "~/", is in
  // the remote user's home directory. Checks that every byte arrived.
  Status RemoteFileWrite(const std::string& remote_path, const std::string& data,
                         std::string_view hostname) const;

  // Copies the file or directory (recursively) `local_path` INTO the
  // directory `remote_dir` on the host (created when missing), keeping the
  // name, the mode bits and the modification times; owners are not kept. A
  // tar archive streams through ssh, so the size is not bounded by memory.
  Status RemoteCopy(const std::string& local_path, const std::string& remote_dir,
                    std::string_view hostname) const;

  // AutoDist's start(): agents on every node of the spec, running `command`
  // under `drover run --engine ssh` (one node per slot, `run_args` added to
  // its flags) as a child in its own process group, whose stderr goes to
  // this process's. Returns once the cluster formed; kDeadlineExceeded
  // after `timeout`, kUnavailable when the run ended first (its last line),
  // kFailedPrecondition while a run is going.
  Status Start(const std::vector<std::string>& command,
               const std::vector<std::string>& run_args = {},
               std::chrono::milliseconds timeout = std::chrono::minutes(2));
  // AutoDist's terminate(): SIGTERM to the run (every agent stops its
  // program, every remote process group goes), SIGKILL after `grace`;
  // the run's exit code, or nullopt when none was started. Idempotent.
  std::optional<int> Terminate(std::chrono::milliseconds grace = std::chrono::seconds(30));

  const std::vector<SshHost>& hosts() const { return hosts_; }
  // Node addresses in the spec's order.
  std::vector<std::string> addresses() const;
  // The ssh options every call uses (control_dir set).
  const SshOptions& ssh_options() const { return options_.ssh; }
  const ResourceSpecClusterResolver& resolver() const { return *resolver_; }

 private:
  SshCluster(std::vector<SshHost> hosts, std::unique_ptr<ResourceSpecClusterResolver> resolver,
             Options options);

  std::vector<SshHost> hosts_;
  std::unique_ptr<ResourceSpecClusterResolver> resolver_;
  Options options_;  // options_.ssh.control_dir: owned, removed by the destructor
  std::string spec_text_;
  std::optional<os::Subprocess> run_;  // Start()'s drover run
};

// A remote path as one shell word: quoted, except that a leading "~/" stays
// unquoted so the remote shell expands it.
std::string RemotePathWord(const std::string& path);

// The status for a remote command that ended with `result`: kUnavailable for
// ssh's own failure (exit code 255), kPermissionDenied when stderr says so,
// else kIoError; the message is "<what> on <host>: <stderr's last line>".
Status RemoteFailure(const SshHost& host, std::string_view what, const os::CommandResult& result);

}  // namespace drover::ssh

#endif  // DROVER_SSH_SSH_CLUSTER_H_

// SshEngine: starts the agents on their hosts through the system's ssh client
// (docs/ssh.md): an agent a node (Launch), or one for a host's nodes
// (LaunchHost). Node i goes to slot i, hosts in their given order.
//
// The agent gets its node credential as the first line of its stdin (never in
// argv or a file) and keeps that stdin open for as long as the driver's ssh
// lives: its end of file stops the node, so a driver that dies (even by
// SIGKILL) or a dropped connection leaves no remote process behind.
// Signal(SIGTERM) closes that stdin (the agent stops its program with its
// grace, and its last lines still arrive); any other signal kills the local
// ssh, with the same end on the remote side.
//
// Create() asks `ssh -G` for each host's real address (what the other nodes
// and the pre-flight check use) and picks the driver address the hosts can
// reach: the local address the kernel routes to the first host, unless one
// is given. ControlMaster sockets live in a private directory; the destructor
// ends the masters and removes it. Not thread-safe (Preflight excepted: it
// runs its own threads).

#ifndef DROVER_SSH_SSH_ENGINE_H_
#define DROVER_SSH_SSH_ENGINE_H_

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "drover/environment.h"
#include "engine/engine.h"
#include "ssh/ssh_command.h"
#include "ssh/ssh_hosts.h"

namespace drover::ssh {

struct SshEngineOptions {
  std::vector<SshHost> hosts;
  SshOptions ssh;              // control_dir: "" lets the engine make one
  std::string driver_address;  // "": the local address routed to the first host
  std::string working_dir;     // the agents' directory; "": the driver's
  // Set for every agent (the variables the driver forwards: PYTHONPATH,
  // DROVER_*, --env), on top of each host's shared_envs.
  std::map<std::string, std::string> env;
};

// The variables every remote agent gets (SshEngineOptions::env): PYTHONPATH
// and DROVER_* as `here` has them, then each `--env` flag: NAME (its value
// in `here`) or NAME=VALUE. kInvalidArgument for an empty name or a NAME
// that `here` does not set.
Result<std::map<std::string, std::string>> ForwardedVariables(
    const std::vector<std::string>& env_flags, const Environment& here);

// The result of checking one host before a run.
struct HostCheck {
  std::string host;     // as given
  std::string address;  // as ssh -G resolved it
  bool ssh_ok = false;
  std::string ssh_error;  // ssh's last stderr line when !ssh_ok
  bool program_found = false;
  std::string program_path;
  bool agent_found = false;
  bool driver_reachable = false;
  bool ok() const { return ssh_ok && program_found && agent_found && driver_reachable; }
  // "h1 (10.200.0.11): ssh ok; python3 at /usr/bin/python3; drover ok; driver reachable"
  std::string ToString(const std::string& program, const std::string& driver) const;
};

class SshEngine : public Engine {
 public:
  // kInvalidArgument without hosts; kIoError when no private directory can be made.
  static Result<std::unique_ptr<SshEngine>> Create(SshEngineOptions options);
  ~SshEngine() override;

  std::string name() const override { return "ssh"; }
  std::string rendezvous_host() const override { return driver_address_; }
  std::string agent_host(int executor_index) const override;
  Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) override;
  // One agent a host, through one ssh: the nodes' credentials go on its
  // stdin, their output and exit codes come back relayed on its stdout.
  bool StartsHostAgents() const override { return true; }
  std::vector<std::vector<int>> NodesByHost(int count) const override;
  // `launch`'s nodes must share a host; each Node's token_file is its
  // credential (the cluster token never leaves the driver's machine).
  Result<std::vector<std::unique_ptr<AgentProcess>>> LaunchHost(const HostLaunch& launch) override;
  // The ControlMaster directory it made (its masters name it).
  std::vector<std::string> TemporaryPaths() const override;

  // Every host, in parallel: does ssh work, is `program` there (after cd and
  // python_venv), is `agent_binary` executable, can it open a TCP
  // connection to the driver address. Prints one line per host on `out`;
  // kFailedPrecondition naming the failing hosts.
  Status Preflight(const std::string& program, const std::string& agent_binary, std::ostream& out);

  int total_slots() const { return static_cast<int>(slots_.size()); }
  const std::vector<SshHost>& hosts() const { return options_.hosts; }
  const SshOptions& ssh_options() const { return options_.ssh; }
  // The resolved address of a host (ssh -G's hostname).
  const std::string& address_of(size_t host_index) const { return addresses_[host_index]; }
  // The GPUs of each slot ("0" for the first slot of a host with gpus
  // [0, 1] and 2 slots; "" where the spec lists none).
  std::vector<std::string> SlotGpus() const;

 private:
  explicit SshEngine(SshEngineOptions options);
  // The slot's host, or kInvalidArgument naming `executor_id`.
  Result<size_t> HostOfExecutor(const std::string& executor_id) const;
  std::function<std::string(const os::ExitStatus&)> DescribeSshExit(size_t host_index) const;

  SshEngineOptions options_;
  std::vector<std::string> addresses_;  // per host
  std::vector<size_t> slots_;           // slot -> host index
  std::string driver_address_;
  std::string private_dir_;  // made by the engine; removed by the destructor
};

// The address of this machine that the kernel would use to reach `remote`
// (a UDP connect, nothing sent); kUnavailable when there is no route.
Result<std::string> LocalAddressTowards(const std::string& remote);

}  // namespace drover::ssh

#endif  // DROVER_SSH_SSH_ENGINE_H_

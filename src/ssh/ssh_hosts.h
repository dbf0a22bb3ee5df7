// The hosts of an SSH run, from the three forms users bring them in:
//   - `-H h1:2,h2:2` (horovodrun, mpirun --host): comma-separated HOST[:SLOTS];
//   - a hostfile (mpirun, horovodrun --hostfile): one "HOST [slots=N]" per
//     line, `#` comments, blank lines; "max_slots=N" is accepted and ignored;
//   - an AutoDist resource spec (YAML, see drover/resource_spec_cluster_resolver.h):
//     each node is a host with one slot per GPU (one slot when it lists none),
//     its ssh group's user, port, key file, python_venv and shared_envs.
// Every error is kInvalidArgument naming the source and, for files, the line.

#ifndef DROVER_SSH_SSH_HOSTS_H_
#define DROVER_SSH_SSH_HOSTS_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "drover/environment.h"
#include "drover/status.h"

namespace drover::ssh {

struct SshHost {
  std::string address;  // what ssh connects to (a name from ~/.ssh/config, or an IP)
  int slots = 1;        // nodes drover may start there
  std::vector<int> gpus;
  bool chief = false;  // the resource spec's `chief: true`
  // From the resource spec's ssh group; empty/0: the ssh client's defaults
  // (~/.ssh/config, the agent).
  std::string username;
  int port = 0;
  std::string key_file;
  std::string python_venv;  // run before the program, e.g. "source venv/bin/activate"
  std::map<std::string, std::string> env;  // shared_envs
};

// `-H` / `--hosts` value "h1:2,h2,[::1]:3": slots default to 1.
Result<std::vector<SshHost>> ParseHostList(std::string_view list);

// A hostfile's text; `source` (its path) names it in errors.
Result<std::vector<SshHost>> ParseHostfile(std::string_view text, std::string_view source);

// A resource spec's text (YAML); `source` names it in errors. A key_file
// "~/..." is expanded with `env`'s HOME, as ssh would on this machine.
Result<std::vector<SshHost>> HostsFromResourceSpec(std::string_view yaml, std::string_view source,
                                                   const Environment& env);

// What `--hosts VALUE` names: an existing file ending in .yml/.yaml is a
// resource spec, any other existing file a hostfile, anything else a host
// list. kIoError when a file cannot be read.
Result<std::vector<SshHost>> LoadHosts(const std::string& value, const Environment& env);

// Total slots of `hosts`.
int TotalSlots(const std::vector<SshHost>& hosts);

}  // namespace drover::ssh

#endif  // DROVER_SSH_SSH_HOSTS_H_

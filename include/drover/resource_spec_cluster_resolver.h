// ResourceSpec and ResourceSpecClusterResolver: a cluster of SSH hosts from an
// AutoDist-style resource spec (YAML), with AutoDist's Cluster methods.
//
//   nodes:
//     - address: 10.0.0.1
//       gpus: [0, 1]
//       chief: true
//     - address: 10.0.0.2
//       gpus: [0, 1]
//       cpus: [0]              # optional
//       ssh_config: conf       # required on every non-chief node
//       network_bandwidth: 25  # optional, Gbit/s
//   ssh:
//     conf:
//       username: alice
//       key_file: ~/.ssh/id_rsa
//       port: 22
//       python_venv: source /venv/bin/activate
//       shared_envs: {LD_LIBRARY_PATH: /usr/local/cuda/lib64}   # or `env:`
//
// The cluster is {"worker": [<address>:<port_base + i>, ...]} over the node
// addresses sorted as strings (AutoDist's order, so every node computes the
// same map). The local node is DROVER_WORKER, else AUTODIST_WORKER, else the
// chief (AutoDist's rule: the chief runs with neither set); these are re-read
// on every call, the spec itself is read once.
//
// ResourceSpec is a plain value. The resolver owns its ResourceSpec, borrows
// the Environment (which must outlive it), and is not thread-safe.

#ifndef DROVER_RESOURCE_SPEC_CLUSTER_RESOLVER_H_
#define DROVER_RESOURCE_SPEC_CLUSTER_RESOLVER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/cluster_resolver.h"
#include "drover/cluster_spec.h"
#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

struct SshConfig {
  std::string username;  // "": the ssh client's default
  int port = 22;
  std::string python_venv;  // a command run before the program, e.g. "source venv/bin/activate"
  std::string key_file;     // "": the ssh client's default
  std::map<std::string, std::string> env;  // shared_envs and env, merged
};

struct ResourceNode {
  std::string address;
  std::vector<int> gpus;   // sorted, without duplicates (AutoDist keeps a set)
  std::vector<int> cpus;   // sorted, without duplicates
  bool chief = false;      // true on exactly one node after parsing
  std::string ssh_config;  // "" only on the chief
  std::optional<double> network_bandwidth;
};

struct ResourceSpec {
  std::vector<ResourceNode> nodes;  // in file order
  std::string chief;                // the chief's address
  std::map<std::string, SshConfig> ssh_configs;

  // nullptr when no node has exactly this address.
  const ResourceNode* FindNode(std::string_view address) const;
  // Node addresses sorted as strings: the task order of the "worker" job.
  std::vector<std::string> SortedAddresses() const;
};

// Largest resource spec file accepted.
inline constexpr std::size_t kMaxResourceSpecBytes = std::size_t{1} << 20;

// Parses and validates a resource spec. `source` names it in errors (a path).
// Errors, all kInvalidArgument naming the source and the node: bad YAML, no
// nodes, a node without an address, a duplicate address, gpus/cpus not a list
// of non-negative integers, two chiefs, no chief among several nodes (one
// node is the chief by default, as in AutoDist), a loopback address among
// several nodes, a non-chief node without ssh_config, an ssh_config naming no
// entry of `ssh:`, a bad ssh port, a key outside those shown above (at the
// top level, in a node or in an ssh config) or one given twice in a map.
// An error about a place in the text says its 1-based line:
//   resource spec 'c.yml', line 7: nodes[1] (10.0.0.2): unknown key 'gpu'
//   (expected address, gpus, cpus, chief, ssh_config, network_bandwidth)
Result<ResourceSpec> ParseResourceSpec(std::string_view yaml,
                                       std::string_view source = "<resource spec>");
// Reads and parses a file; kIoError when it cannot be read.
Result<ResourceSpec> LoadResourceSpec(const std::string& path);

class ResourceSpecClusterResolver : public ClusterResolver {
 public:
  struct Options {
    // AutoDist's DEFAULT_PORT_RANGE starts at 15000; node i (sorted) gets
    // port_base + i.
    int port_base = 15000;
    std::string rpc_layer = "grpc";
  };

  static Result<std::unique_ptr<ResourceSpecClusterResolver>> Create(const std::string& path,
                                                                     Options options,
                                                                     Environment& env);
  // kInvalidArgument when the ports would pass 65535.
  static Result<std::unique_ptr<ResourceSpecClusterResolver>> Create(ResourceSpec spec,
                                                                     Options options,
                                                                     Environment& env);

  Result<ClusterSpec> cluster_spec() const override;
  using ClusterResolver::master;
  // "" when no task is known.
  Result<std::string> master(const std::optional<std::string>& task_type,
                             std::optional<int> task_id,
                             const std::optional<std::string>& rpc_layer) const override;
  using ClusterResolver::num_accelerators;
  // {"GPU": n} for the node of (task_type, task_id), by default the local
  // node; {} when it has no GPUs.
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>& task_type,
                                          std::optional<int> task_id) const override;
  // The set value, else "worker" / get_local_worker_task_index().
  std::optional<std::string> task_type() const override;
  std::optional<int> task_id() const override;

  // AutoDist's Cluster methods.
  // Whether `address` (default: the local address) is the chief's.
  bool is_chief(const std::optional<std::string>& address = std::nullopt) const;
  // The host address (no port) of a task; kNotFound for an unknown task.
  Result<std::string> get_address_from_task(std::string_view job_name, int task_index) const;
  // DROVER_WORKER, else AUTODIST_WORKER, else the chief's address.
  std::string get_local_address() const;
  // The "worker" index of the node whose address equals the local address
  // exactly; kNotFound when no node has it.
  Result<int> get_local_worker_task_index() const;
  // "<rpc_layer>://localhost:<local port>", "grpc://localhost:15000" by default.
  Result<std::string> get_local_session_target() const;

  const ResourceSpec& resource_spec() const { return spec_; }
  const Options& options() const { return options_; }

 private:
  ResourceSpecClusterResolver(ResourceSpec spec, Options options, Environment& env);
  // The node of the local address; kNotFound when none matches.
  Result<const ResourceNode*> LocalNode() const;

  ResourceSpec spec_;
  Options options_;
  Environment* env_;                 // borrowed
  std::vector<std::string> sorted_;  // addresses in task order
};

}  // namespace drover

#endif  // DROVER_RESOURCE_SPEC_CLUSTER_RESOLVER_H_

#include "drover/resource_spec_cluster_resolver.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "os/read_file.h"
#include "resolver/resolver_env.h"

namespace drover {
namespace {

// Flow collections nest by one bracket per level; yaml-cpp recurses per level,
// so refuse absurd nesting before it sees the text (it guards block nesting).
constexpr int kMaxFlowDepth = 64;

std::string KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "\"" + node.Scalar() + "\"";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "an undefined value";
  }
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1" ||
         address == "[::1]" || address == "0:0:0:0:0:0:0:1";
}

std::string HostPort(const std::string& host, int port) {
  bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Where a node sits in the text; null for nodes the parser did not make (a
// missing key).
YAML::Mark MarkOf(const YAML::Node& node) {
  if (!node) return YAML::Mark::null_mark();
  return node.Mark();
}

// Joins `keys` as "a, b, c" for "expected ..." in errors.
std::string KeyList(std::initializer_list<std::string_view> keys) {
  std::string out;
  for (std::string_view key : keys) {
    if (!out.empty()) out += ", ";
    out += key;
  }
  return out;
}

// Errors of one spec, all prefixed "resource spec '<source>': ", or
// "resource spec '<source>', line N: " when they concern a place in the text.
class SpecParser {
 public:
  explicit SpecParser(std::string_view source) : source_(source) {}

  Status Error(const std::string& what, const YAML::Mark& mark = YAML::Mark::null_mark()) const {
    std::string at = mark.is_null() ? "" : ", line " + std::to_string(mark.line + 1);
    return Status::InvalidArgument("resource spec '" + source_ + "'" + at + ": " + what);
  }

  Result<std::string> Scalar(const YAML::Node& node, const std::string& where) const {
    if (!node.IsScalar()) {
      return Error(where + " must be a string, got " + KindName(node), MarkOf(node));
    }
    return node.Scalar();
  }

  Result<long long> Integer(const YAML::Node& node, const std::string& where) const {
    if (!node.IsScalar()) {
      return Error(where + " must be an integer, got " + KindName(node), MarkOf(node));
    }
    std::optional<long long> value = resolver_internal::ParseInteger(node.Scalar());
    if (!value) {
      return Error(where + " must be an integer, got \"" + node.Scalar() + "\"", MarkOf(node));
    }
    return *value;
  }

  Result<bool> Bool(const YAML::Node& node, const std::string& where) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      return Error(where + " must be true or false, got " + KindName(node), MarkOf(node));
    }
    return value;
  }

  Result<std::vector<int>> IndexList(const YAML::Node& node, const std::string& where) const {
    if (node.IsNull()) return std::vector<int>();
    if (!node.IsSequence()) {
      return Error(where + " must be a list of integers, got " + KindName(node), MarkOf(node));
    }
    std::set<int> indices;  // AutoDist keeps a set: sorted, no duplicates
    for (std::size_t i = 0; i < node.size(); ++i) {
      const YAML::Node item = node[i];
      std::string item_where = where + "[" + std::to_string(i) + "]";
      if (!item.IsScalar()) {
        return Error(
            where + " must be a list of integers, but " + item_where + " is " + KindName(item),
            MarkOf(item));
      }
      std::optional<long long> value = resolver_internal::ParseInteger(item.Scalar());
      if (!value || *value < 0 || *value > 1000000) {
        return Error(where + " must be a list of non-negative integers, but " + item_where +
                         " is \"" + item.Scalar() + "\"",
                     MarkOf(item));
      }
      indices.insert(static_cast<int>(*value));
    }
    return std::vector<int>(indices.begin(), indices.end());
  }

  Result<std::map<std::string, std::string>> StringMap(const YAML::Node& node,
                                                       const std::string& where) const {
    std::map<std::string, std::string> out;
    if (node.IsNull()) return out;
    if (!node.IsMap()) return Error(where + " must be a map, got " + KindName(node), MarkOf(node));
    for (const auto& entry : node) {
      DROVER_ASSIGN_OR_RETURN(std::string key, Scalar(entry.first, where + " key"));
      DROVER_ASSIGN_OR_RETURN(std::string value, Scalar(entry.second, where + "." + key));
      out[key] = value;
    }
    return out;
  }

  // Refuses keys of the map `node` outside `allowed`, and keys given twice
  // (yaml-cpp keeps both; operator[] would silently take the first).
  Status CheckKeys(const YAML::Node& node, const std::string& where,
                   std::initializer_list<std::string_view> allowed) const {
    std::set<std::string> seen;
    for (const auto& entry : node) {
      DROVER_ASSIGN_OR_RETURN(std::string key, Scalar(entry.first, "a key of " + where));
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(where + ": unknown key '" + key + "' (expected " + KeyList(allowed) + ")",
                     MarkOf(entry.first));
      }
      if (!seen.insert(key).second) {
        return Error(where + ": key '" + key + "' appears twice", MarkOf(entry.first));
      }
    }
    return Status::Ok();
  }

  Result<SshConfig> Ssh(const std::string& name, const YAML::Node& node) const {
    std::string where = "ssh." + name;
    if (!node.IsMap()) return Error(where + " must be a map, got " + KindName(node), MarkOf(node));
    DROVER_RETURN_IF_ERROR(CheckKeys(
        node, where, {"username", "port", "key_file", "python_venv", "shared_envs", "env"}));
    SshConfig config;
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();  // CheckKeys made sure it is one
      const YAML::Node& value = entry.second;
      if (key == "username") {
        DROVER_ASSIGN_OR_RETURN(config.username, Scalar(value, where + ".username"));
      } else if (key == "key_file") {
        DROVER_ASSIGN_OR_RETURN(config.key_file, Scalar(value, where + ".key_file"));
      } else if (key == "python_venv") {
        DROVER_ASSIGN_OR_RETURN(config.python_venv, Scalar(value, where + ".python_venv"));
      } else if (key == "port") {
        DROVER_ASSIGN_OR_RETURN(long long port, Integer(value, where + ".port"));
        if (port < 1 || port > 65535) {
          return Error(where + ".port=" + std::to_string(port) + " is not a port in 1..65535",
                       MarkOf(value));
        }
        config.port = static_cast<int>(port);
      } else if (key == "shared_envs" || key == "env") {
        DROVER_ASSIGN_OR_RETURN(auto env, StringMap(value, where + "." + key));
        for (auto& [k, v] : env) config.env[k] = v;
      }
    }
    return config;
  }

  Result<ResourceSpec> Parse(std::string_view text) const {
    if (text.size() > kMaxResourceSpecBytes) {
      return Error("is " + std::to_string(text.size()) + " bytes, more than the " +
                   std::to_string(kMaxResourceSpecBytes) + " accepted");
    }
    int depth = 0;
    int line = 0;
    for (char c : text) {
      if (c == '\n') {
        ++line;
      } else if (c == '[' || c == '{') {
        if (++depth > kMaxFlowDepth) {
          YAML::Mark mark;
          mark.line = line;
          return Error("nests more than " + std::to_string(kMaxFlowDepth) + " levels deep", mark);
        }
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;
      }
    }
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      std::string column =
          e.mark.is_null() ? "" : " (column " + std::to_string(e.mark.column + 1) + ")";
      return Error("bad YAML: " + e.msg + column, e.mark);
    }
    try {
      return Build(root);
    } catch (const YAML::Exception& e) {
      return Error(e.msg, e.mark);
    }
  }

 private:
  Result<ResourceSpec> Build(const YAML::Node& root) const {
    if (root.IsNull()) return Error("has no nodes (the document is empty)");
    if (!root.IsMap()) {
      return Error("must be a map with a 'nodes' list, got " + KindName(root), MarkOf(root));
    }
    DROVER_RETURN_IF_ERROR(CheckKeys(root, "the top level", {"nodes", "ssh"}));
    const YAML::Node nodes = root["nodes"];
    if (!nodes || nodes.IsNull() || (nodes.IsSequence() && nodes.size() == 0)) {
      return Error("has no nodes (expected a 'nodes:' list)", MarkOf(nodes));
    }
    if (!nodes.IsSequence()) {
      return Error("'nodes' must be a list, got " + KindName(nodes), MarkOf(nodes));
    }

    ResourceSpec spec;
    const YAML::Node ssh = root["ssh"];
    if (ssh && !ssh.IsNull()) {
      if (!ssh.IsMap()) {
        return Error("'ssh' must be a map of named configs, got " + KindName(ssh), MarkOf(ssh));
      }
      for (const auto& entry : ssh) {
        DROVER_ASSIGN_OR_RETURN(std::string name, Scalar(entry.first, "an ssh config name"));
        if (spec.ssh_configs.count(name)) {
          return Error("ssh." + name + " appears twice", MarkOf(entry.first));
        }
        DROVER_ASSIGN_OR_RETURN(SshConfig config, Ssh(name, entry.second));
        spec.ssh_configs[name] = std::move(config);
      }
    }

    std::size_t count = nodes.size();
    std::set<std::string> addresses;
    std::vector<YAML::Mark> marks;  // of each node, for the checks after the loop
    for (std::size_t i = 0; i < count; ++i) {
      const YAML::Node item = nodes[i];
      const YAML::Mark mark = MarkOf(item);
      std::string where = "nodes[" + std::to_string(i) + "]";
      if (!item.IsMap()) return Error(where + " must be a map, got " + KindName(item), mark);
      ResourceNode node;
      const YAML::Node address = item["address"];
      // Name the node by its address in the key check when it has a usable one.
      std::string named =
          address && address.IsScalar() ? where + " (" + address.Scalar() + ")" : where;
      DROVER_RETURN_IF_ERROR(CheckKeys(
          item, named, {"address", "gpus", "cpus", "chief", "ssh_config", "network_bandwidth"}));
      if (!address) return Error(where + " has no address", mark);
      DROVER_ASSIGN_OR_RETURN(node.address, Scalar(address, where + ".address"));
      if (node.address.empty() || node.address.find_first_of(" \t\r\n/,") != std::string::npos) {
        return Error(where + ".address \"" + node.address + "\" is not a host name or IP address",
                     MarkOf(address));
      }
      where += " (" + node.address + ")";
      if (!addresses.insert(node.address).second) {
        return Error(where + ": duplicate address; each node must appear once", MarkOf(address));
      }
      if (count > 1 && IsLoopback(node.address)) {
        return Error(where + ": a loopback address cannot be used when there are several nodes",
                     MarkOf(address));
      }
      if (const YAML::Node gpus = item["gpus"]) {
        DROVER_ASSIGN_OR_RETURN(node.gpus, IndexList(gpus, where + ": gpus"));
      }
      if (const YAML::Node cpus = item["cpus"]) {
        DROVER_ASSIGN_OR_RETURN(node.cpus, IndexList(cpus, where + ": cpus"));
      }
      const YAML::Node chief = item["chief"];
      if (chief) {
        DROVER_ASSIGN_OR_RETURN(node.chief, Bool(chief, where + ": chief"));
      }
      if (const YAML::Node ssh_config = item["ssh_config"]; ssh_config && !ssh_config.IsNull()) {
        DROVER_ASSIGN_OR_RETURN(node.ssh_config, Scalar(ssh_config, where + ": ssh_config"));
        if (!spec.ssh_configs.count(node.ssh_config)) {
          return Error(
              where + ": ssh_config '" + node.ssh_config + "' names no entry of the 'ssh:' map",
              MarkOf(ssh_config));
        }
      }
      if (const YAML::Node bandwidth = item["network_bandwidth"];
          bandwidth && !bandwidth.IsNull()) {
        double value = 0;
        if (!bandwidth.IsScalar() || !YAML::convert<double>::decode(bandwidth, value) ||
            !(value >= 0)) {
          return Error(where + ": network_bandwidth must be a non-negative number, got " +
                           KindName(bandwidth),
                       MarkOf(bandwidth));
        }
        node.network_bandwidth = value;
      }
      if (node.chief) {
        if (!spec.chief.empty()) {
          return Error(where + ": a second chief; '" + spec.chief + "' is already the chief",
                       MarkOf(chief));
        }
        spec.chief = node.address;
      }
      spec.nodes.push_back(std::move(node));
      marks.push_back(mark);
    }
    // AutoDist: a lone node is the chief without saying so.
    if (spec.chief.empty()) {
      if (count > 1) {
        return Error("no node is the chief; mark exactly one of the " + std::to_string(count) +
                     " nodes with 'chief: true'");
      }
      spec.nodes[0].chief = true;
      spec.chief = spec.nodes[0].address;
    }
    for (std::size_t i = 0; i < spec.nodes.size(); ++i) {
      const ResourceNode& node = spec.nodes[i];
      if (!node.chief && node.ssh_config.empty()) {
        return Error("nodes[" + std::to_string(i) + "] (" + node.address +
                         "): a non-chief node needs an ssh_config",
                     marks[i]);
      }
    }
    return spec;
  }

  std::string source_;
};

}  // namespace

const ResourceNode* ResourceSpec::FindNode(std::string_view address) const {
  for (const ResourceNode& node : nodes) {
    if (node.address == address) return &node;
  }
  return nullptr;
}

std::vector<std::string> ResourceSpec::SortedAddresses() const {
  std::vector<std::string> sorted;
  for (const ResourceNode& node : nodes) sorted.push_back(node.address);
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

Result<ResourceSpec> ParseResourceSpec(std::string_view yaml, std::string_view source) {
  return SpecParser(source).Parse(yaml);
}

Result<ResourceSpec> LoadResourceSpec(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(std::string text,
                          os::ReadFileCapped(path, kMaxResourceSpecBytes, "resource spec"));
  return ParseResourceSpec(text, path);
}

ResourceSpecClusterResolver::ResourceSpecClusterResolver(ResourceSpec spec, Options options,
                                                         Environment& env)
    : spec_(std::move(spec)), options_(std::move(options)), env_(&env) {
  rpc_layer_ = options_.rpc_layer;
  sorted_ = spec_.SortedAddresses();
}

Result<std::unique_ptr<ResourceSpecClusterResolver>> ResourceSpecClusterResolver::Create(
    const std::string& path, Options options, Environment& env) {
  DROVER_ASSIGN_OR_RETURN(ResourceSpec spec, LoadResourceSpec(path));
  return Create(std::move(spec), std::move(options), env);
}

Result<std::unique_ptr<ResourceSpecClusterResolver>> ResourceSpecClusterResolver::Create(
    ResourceSpec spec, Options options, Environment& env) {
  if (spec.nodes.empty()) return Status::InvalidArgument("the resource spec has no nodes");
  if (spec.FindNode(spec.chief) == nullptr) {
    return Status::InvalidArgument("the resource spec's chief '" + spec.chief +
                                   "' is not one of its nodes");
  }
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort("port_base", options.port_base));
  DROVER_RETURN_IF_ERROR(resolver_internal::CheckPort(
      "port_base + nodes - 1",
      static_cast<long long>(options.port_base) + static_cast<long long>(spec.nodes.size()) - 1));
  return std::unique_ptr<ResourceSpecClusterResolver>(
      new ResourceSpecClusterResolver(std::move(spec), std::move(options), env));
}

Result<ClusterSpec> ResourceSpecClusterResolver::cluster_spec() const {
  std::vector<std::string> tasks;
  for (std::size_t i = 0; i < sorted_.size(); ++i) {
    tasks.push_back(HostPort(sorted_[i], options_.port_base + static_cast<int>(i)));
  }
  ClusterSpec spec;
  DROVER_RETURN_IF_ERROR(spec.AddJob("worker", std::move(tasks)));
  return spec;
}

Result<std::string> ResourceSpecClusterResolver::master(
    const std::optional<std::string>& task_type, std::optional<int> task_id,
    const std::optional<std::string>& rpc_layer) const {
  return resolver_internal::MasterFor(*this, task_type, task_id, rpc_layer);
}

Result<AcceleratorMap> ResourceSpecClusterResolver::num_accelerators(
    const std::optional<std::string>& task_type, std::optional<int> task_id) const {
  const ResourceNode* node = nullptr;
  if (task_type || task_id) {
    std::string type = task_type.value_or("worker");
    DROVER_ASSIGN_OR_RETURN(std::string address, get_address_from_task(type, task_id.value_or(0)));
    node = spec_.FindNode(address);
  } else {
    DROVER_ASSIGN_OR_RETURN(node, LocalNode());
  }
  AcceleratorMap map;
  if (node != nullptr && !node->gpus.empty()) map["GPU"] = static_cast<int>(node->gpus.size());
  return map;
}

std::optional<std::string> ResourceSpecClusterResolver::task_type() const {
  if (task_type_) return task_type_;
  return std::string("worker");
}

std::optional<int> ResourceSpecClusterResolver::task_id() const {
  if (task_id_) return task_id_;
  Result<int> index = get_local_worker_task_index();
  if (!index.ok()) return std::nullopt;
  return *index;
}

bool ResourceSpecClusterResolver::is_chief(const std::optional<std::string>& address) const {
  // AutoDist's `address or ...`: an empty address means "the local one".
  std::string subject = address && !address->empty() ? *address : get_local_address();
  return subject == spec_.chief;
}

Result<std::string> ResourceSpecClusterResolver::get_address_from_task(std::string_view job_name,
                                                                       int task_index) const {
  if (job_name != "worker") {
    return Status::NotFound("No such job in cluster: '" + std::string(job_name) + "'");
  }
  if (task_index < 0 || task_index >= static_cast<int>(sorted_.size())) {
    return Status::NotFound("No task with index " + std::to_string(task_index) +
                            " in job 'worker'");
  }
  return sorted_[task_index];
}

std::string ResourceSpecClusterResolver::get_local_address() const {
  for (const char* name : {"DROVER_WORKER", "AUTODIST_WORKER"}) {
    std::optional<std::string> value = env_->Get(name);
    if (value && !value->empty()) return *value;
  }
  return spec_.chief;
}

Result<int> ResourceSpecClusterResolver::get_local_worker_task_index() const {
  std::string local = get_local_address();
  // Exact host match: AutoDist's substring test made 10.0.0.1 match 10.0.0.11.
  for (std::size_t i = 0; i < sorted_.size(); ++i) {
    if (sorted_[i] == local) return static_cast<int>(i);
  }
  return Status::NotFound("the local address '" + local +
                          "' (DROVER_WORKER/AUTODIST_WORKER, else the chief) is not a node of "
                          "the resource spec");
}

Result<std::string> ResourceSpecClusterResolver::get_local_session_target() const {
  DROVER_ASSIGN_OR_RETURN(int index, get_local_worker_task_index());
  std::string layer = rpc_layer().value_or("");
  return FormatMasterUrl("localhost:" + std::to_string(options_.port_base + index), layer);
}

Result<const ResourceNode*> ResourceSpecClusterResolver::LocalNode() const {
  DROVER_ASSIGN_OR_RETURN(int index, get_local_worker_task_index());
  return spec_.FindNode(sorted_[index]);
}

}  // namespace drover

#include "drover/resource_spec_cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "drover/environment.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

using Options = ResourceSpecClusterResolver::Options;

constexpr char kTwoNodes[] = R"(
nodes:
  - address: 10.0.0.11
    gpus: [0, 1, 1]
    ssh_config: conf
    network_bandwidth: 25
  - address: 10.0.0.1
    gpus: [0]
    cpus: [0, 1]
    chief: true
  - address: 10.0.0.2
    ssh_config: conf
ssh:
  conf:
    username: alice
    key_file: ~/.ssh/id_rsa
    port: 2222
    python_venv: source /venv/bin/activate
    shared_envs:
      LD_LIBRARY_PATH: /usr/local/cuda/lib64
    env:
      NCCL_DEBUG: INFO
)";

// A file removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char path[] = "/tmp/drover_resource_spec_XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = path;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ParseResourceSpecTest, ParsesNodesAndSshConfigs) {
  ASSERT_OK_AND_ASSIGN(ResourceSpec spec, ParseResourceSpec(kTwoNodes, "spec.yml"));
  ASSERT_EQ(spec.nodes.size(), 3u);
  EXPECT_EQ(spec.chief, "10.0.0.1");
  EXPECT_EQ(spec.nodes[0].address, "10.0.0.11");
  EXPECT_THAT(spec.nodes[0].gpus, ElementsAre(0, 1));  // a set, as AutoDist keeps
  EXPECT_THAT(spec.nodes[0].network_bandwidth, Optional(25.0));
  EXPECT_FALSE(spec.nodes[0].chief);
  EXPECT_TRUE(spec.nodes[1].chief);
  EXPECT_THAT(spec.nodes[1].cpus, ElementsAre(0, 1));
  EXPECT_TRUE(spec.nodes[2].gpus.empty());
  const SshConfig& conf = spec.ssh_configs.at("conf");
  EXPECT_EQ(conf.username, "alice");
  EXPECT_EQ(conf.port, 2222);
  EXPECT_EQ(conf.key_file, "~/.ssh/id_rsa");
  EXPECT_EQ(conf.python_venv, "source /venv/bin/activate");
  EXPECT_EQ(conf.env, (std::map<std::string, std::string>{
                          {"LD_LIBRARY_PATH", "/usr/local/cuda/lib64"}, {"NCCL_DEBUG", "INFO"}}));
  EXPECT_THAT(spec.SortedAddresses(), ElementsAre("10.0.0.1", "10.0.0.11", "10.0.0.2"));
  EXPECT_EQ(spec.FindNode("10.0.0.1"), &spec.nodes[1]);
  EXPECT_EQ(spec.FindNode("10.0.0"), nullptr);
}

TEST(ParseResourceSpecTest, OneNodeIsTheChiefByDefault) {
  ASSERT_OK_AND_ASSIGN(ResourceSpec spec, ParseResourceSpec("nodes:\n  - address: localhost\n"));
  EXPECT_EQ(spec.chief, "localhost");
  EXPECT_TRUE(spec.nodes[0].chief);
  EXPECT_EQ(spec.ssh_configs.size(), 0u);
}

TEST(ParseResourceSpecTest, ValidationErrorsNameTheFileAndNode) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {"", "has no nodes"},
      {"nodes: []", "has no nodes"},
      {"ssh: {}", "has no nodes"},
      {"- a\n- b", "must be a map with a 'nodes' list"},
      {"nodes: {address: a}", "'nodes' must be a list"},
      {"nodes: [a]", "nodes[0] must be a map"},
      {"nodes:\n  - gpus: [0]", "nodes[0] has no address"},
      {"nodes:\n  - address: [a]", "nodes[0].address must be a string"},
      {"nodes:\n  - address: 'a b'", "is not a host name"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: a\n    ssh_config: c\nssh: {c: {}}",
       "nodes[1] (a): duplicate address"},
      {"nodes:\n  - address: a\n    gpus: 0",
       "nodes[0] (a): gpus must be a list of integers, got \"0\""},
      {"nodes:\n  - address: a\n    gpus: [0, x]", "but nodes[0] (a): gpus[1] is \"x\""},
      {"nodes:\n  - address: a\n    gpus: [-1]", "non-negative"},
      {"nodes:\n  - address: a\n    gpus: [[0]]", "gpus[0] is a list"},
      {"nodes:\n  - address: a\n    gpus: {0: 1}", "got a map"},
      {"nodes:\n  - address: a\n    cpus: [1.5]", "cpus must be a list of non-negative integers"},
      {"nodes:\n  - address: a\n    chief: maybe", "nodes[0] (a): chief must be true or false"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b\n    chief: true",
       "nodes[1] (b): a second chief; 'a' is already the chief"},
      {"nodes:\n  - address: a\n    ssh_config: c\n  - address: b\n    ssh_config: c\nssh: {c: {}}",
       "no node is the chief"},
      {"nodes:\n  - address: 127.0.0.1\n    chief: true\n  - address: b\n    ssh_config: c\nssh: "
       "{c: {}}",
       "nodes[0] (127.0.0.1): a loopback address"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b",
       "nodes[1] (b): a non-chief node needs an ssh_config"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b\n    ssh_config: nope",
       "nodes[1] (b): ssh_config 'nope' names no entry"},
      {"nodes:\n  - address: a\nssh: [x]", "'ssh' must be a map"},
      {"nodes:\n  - address: a\nssh: {c: 3}", "ssh.c must be a map"},
      {"nodes:\n  - address: a\nssh: {c: {port: 0}}", "ssh.c.port=0 is not a port"},
      {"nodes:\n  - address: a\nssh: {c: {port: ssh}}", "ssh.c.port must be an integer"},
      {"nodes:\n  - address: a\nssh: {c: {shared_envs: [a]}}", "ssh.c.shared_envs must be a map"},
      {"nodes:\n  - address: a\n    network_bandwidth: fast",
       "network_bandwidth must be a non-negative number"},
      {"nodes: [", "bad YAML"},
      {std::string(100, '[') + std::string(100, ']'), "nests more than 64 levels"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseResourceSpec(c.yaml, "cluster.yml"),
                StatusIs(Status::Code::kInvalidArgument,
                         AllOf(HasSubstr("resource spec 'cluster.yml'"), HasSubstr(c.message))))
        << c.yaml << " -> " << ParseResourceSpec(c.yaml, "cluster.yml").status();
  }
  EXPECT_THAT(ParseResourceSpec(std::string(kMaxResourceSpecBytes + 1, ' ')),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bytes")));
}

TEST(ParseResourceSpecTest, RefusesUnknownKeysNamingPlaceAndLine) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {"node:\n  - address: a\n",
       "line 1: the top level: unknown key 'node' (expected nodes, ssh)"},
      {"nodes:\n  - address: a\nsssh: {}\n", "line 3: the top level: unknown key 'sssh'"},
      {"nodes:\n  - address: a\n    gpu: [0]\n",
       "line 3: nodes[0] (a): unknown key 'gpu' (expected address, gpus, cpus, chief, ssh_config, "
       "network_bandwidth)"},
      // Without an address the node is named by its index alone.
      {"nodes:\n  - adress: a\n", "line 2: nodes[0]: unknown key 'adress'"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b\n    ssh_config: c\n"
       "    sshconfig: c\nssh: {c: {}}\n",
       "line 6: nodes[1] (b): unknown key 'sshconfig'"},
      {"nodes:\n  - address: a\nssh:\n  conf:\n    username: u\n    user: u\n",
       "line 6: ssh.conf: unknown key 'user' (expected username, port, key_file, python_venv, "
       "shared_envs, env)"},
      // AutoDist derives pkey from key_file; a spec does not set it.
      {"nodes:\n  - address: a\nssh:\n  conf:\n    pkey: x\n",
       "line 5: ssh.conf: unknown key 'pkey'"},
      {"nodes:\n  - address: a\n    gpus: [0]\n    gpus: [1]\n",
       "line 4: nodes[0] (a): key 'gpus' appears twice"},
      {"nodes:\n  - address: a\n    [x]: 1\n", "line 3: a key of nodes[0] (a) must be a string"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseResourceSpec(c.yaml, "cluster.yml"),
                StatusIs(Status::Code::kInvalidArgument,
                         AllOf(HasSubstr("resource spec 'cluster.yml', "), HasSubstr(c.message))))
        << c.yaml << " -> " << ParseResourceSpec(c.yaml, "cluster.yml").status();
  }
}

TEST(ParseResourceSpecTest, ErrorsNameTheLine) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {"# a comment\nnodes:\n  - address: a\n    gpus: zero\n",
       "resource spec 'cluster.yml', line 4: nodes[0] (a): gpus must be a list of integers"},
      {"nodes:\n  - address: a\n    gpus:\n      - 0\n      - x\n",
       "line 5: nodes[0] (a): gpus must be a list of non-negative integers, but nodes[0] (a): "
       "gpus[1] is \"x\""},
      {"nodes:\n  - address: a\n    chief: true\n\n  - address: a\n    ssh_config: c\nssh: {c: {}}",
       "line 5: nodes[1] (a): duplicate address"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b\n    chief: true\n",
       "line 5: nodes[1] (b): a second chief"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b\n    gpus: [0]\n",
       "line 4: nodes[1] (b): a non-chief node needs an ssh_config"},
      {"nodes:\n  - address: a\n    chief: true\n  - address: b\n    ssh_config: nope\n",
       "line 5: nodes[1] (b): ssh_config 'nope' names no entry"},
      {"nodes:\n  - address: a\nssh:\n  c:\n    port: 70000\n",
       "line 5: ssh.c.port=70000 is not a port"},
      {"nodes:\n  - address: a\nssh:\n  c:\n    env:\n      A: [1]\n",
       "line 6: ssh.c.env.A must be a string"},
      {"nodes:\n  - address: a\n    network_bandwidth: -1\n",
       "line 3: nodes[0] (a): network_bandwidth must be a non-negative number"},
      {"nodes:\n  - address: a\n  - b\n", "line 3: nodes[1] must be a map"},
      // Malformed YAML: yaml-cpp's mark, reported 1-based.
      {"nodes:\n  - address: a\n    gpus: [0, 1\n", "line 4: bad YAML: "},
      {"nodes:\n  - address: a\n   bad: : :\n", "line 3: bad YAML: "},
      {"\n\n" + std::string(100, '['), "line 3: nests more than 64 levels"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(
        ParseResourceSpec(c.yaml, "cluster.yml"),
        StatusIs(Status::Code::kInvalidArgument,
                 AllOf(HasSubstr("resource spec 'cluster.yml', line "), HasSubstr(c.message))))
        << c.yaml << " -> " << ParseResourceSpec(c.yaml, "cluster.yml").status();
  }
  // Errors about the whole spec name no line.
  EXPECT_THAT(ParseResourceSpec("", "cluster.yml"),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("resource spec 'cluster.yml': has no nodes")));
}

TEST(LoadResourceSpecTest, ReadsAFileAndNamesItInErrors) {
  TempFile good(kTwoNodes);
  ASSERT_OK_AND_ASSIGN(ResourceSpec spec, LoadResourceSpec(good.path()));
  EXPECT_EQ(spec.nodes.size(), 3u);
  TempFile bad("nodes:\n  - address: a\n    gpus: zero\n");
  EXPECT_THAT(LoadResourceSpec(bad.path()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr(bad.path())));
  EXPECT_THAT(LoadResourceSpec("/nonexistent/spec.yml"),
              StatusIs(Status::Code::kIoError, HasSubstr("/nonexistent/spec.yml")));
}

TEST(ResourceSpecClusterResolverTest, ClusterUsesSortedAddressesAndPorts) {
  TempFile file(kTwoNodes);
  MapEnvironment env;
  ASSERT_OK_AND_ASSIGN(auto resolver, ResourceSpecClusterResolver::Create(file.path(), {}, env));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  ClusterSpec expected;
  ASSERT_OK(expected.AddJob("worker", {"10.0.0.1:15000", "10.0.0.11:15001", "10.0.0.2:15002"}));
  EXPECT_EQ(spec, expected);
  // No DROVER_WORKER/AUTODIST_WORKER: this is the chief.
  EXPECT_EQ(resolver->get_local_address(), "10.0.0.1");
  EXPECT_TRUE(resolver->is_chief());
  EXPECT_EQ(resolver->get_local_worker_task_index().value_or(-1), 0);
  EXPECT_EQ(resolver->get_local_session_target().value_or(""), "grpc://localhost:15000");
  EXPECT_THAT(resolver->task_type(), Optional(std::string("worker")));
  EXPECT_THAT(resolver->task_id(), Optional(0));
  EXPECT_EQ(resolver->master().value_or(""), "grpc://10.0.0.1:15000");
  EXPECT_EQ(resolver->num_accelerators().value_or(AcceleratorMap{}), (AcceleratorMap{{"GPU", 1}}));
}

// AutoDist matched "10.0.0.1" inside "10.0.0.11"; we match whole addresses.
TEST(ResourceSpecClusterResolverTest, LocalTaskIndexMatchesExactly) {
  MapEnvironment env(std::map<std::string, std::string>{{"AUTODIST_WORKER", "10.0.0.11"}});
  ASSERT_OK_AND_ASSIGN(ResourceSpec spec, ParseResourceSpec(kTwoNodes));
  ASSERT_OK_AND_ASSIGN(auto resolver, ResourceSpecClusterResolver::Create(spec, {}, env));
  EXPECT_EQ(resolver->get_local_worker_task_index().value_or(-1), 1);
  EXPECT_EQ(resolver->get_local_session_target().value_or(""), "grpc://localhost:15001");
  EXPECT_FALSE(resolver->is_chief());
  EXPECT_TRUE(resolver->is_chief("10.0.0.1"));
  EXPECT_FALSE(resolver->is_chief("10.0.0.11"));
  EXPECT_EQ(resolver->num_accelerators().value_or(AcceleratorMap{}), (AcceleratorMap{{"GPU", 2}}));
  // DROVER_WORKER wins over AUTODIST_WORKER; re-read on every call.
  env.Set("DROVER_WORKER", "10.0.0.2");
  EXPECT_EQ(resolver->get_local_address(), "10.0.0.2");
  EXPECT_EQ(resolver->get_local_worker_task_index().value_or(-1), 2);
  EXPECT_TRUE(resolver->num_accelerators().value_or(AcceleratorMap{{"x", 1}}).empty());
  env.Set("DROVER_WORKER", "10.0.0");
  EXPECT_THAT(resolver->get_local_worker_task_index(),
              StatusIs(Status::Code::kNotFound, HasSubstr("'10.0.0'")));
  EXPECT_THAT(resolver->get_local_session_target(),
              StatusIs(Status::Code::kNotFound, HasSubstr("10.0.0")));
  EXPECT_EQ(resolver->task_id(), std::nullopt);
  EXPECT_EQ(resolver->master().value_or("error"), "");
}

TEST(ResourceSpecClusterResolverTest, AddressFromTaskAndOverrides) {
  ASSERT_OK_AND_ASSIGN(ResourceSpec spec, ParseResourceSpec(kTwoNodes));
  MapEnvironment env;
  Options options;
  options.port_base = 9000;
  options.rpc_layer = "grpc+verbs";
  ASSERT_OK_AND_ASSIGN(auto resolver, ResourceSpecClusterResolver::Create(spec, options, env));
  EXPECT_EQ(resolver->get_address_from_task("worker", 2).value_or(""), "10.0.0.2");
  EXPECT_THAT(resolver->get_address_from_task("ps", 0),
              StatusIs(Status::Code::kNotFound, HasSubstr("'ps'")));
  EXPECT_THAT(resolver->get_address_from_task("worker", 3),
              StatusIs(Status::Code::kNotFound, HasSubstr("index 3")));
  EXPECT_EQ(resolver->get_local_session_target().value_or(""), "grpc+verbs://localhost:9000");
  resolver->set_task_id(1);
  EXPECT_EQ(resolver->master().value_or(""), "grpc+verbs://10.0.0.11:9001");
  EXPECT_EQ(resolver->num_accelerators("worker", 1).value_or(AcceleratorMap{}),
            (AcceleratorMap{{"GPU", 2}}));
  EXPECT_THAT(resolver->num_accelerators("worker", 9),
              StatusIs(Status::Code::kNotFound, HasSubstr("9")));
}

TEST(ResourceSpecClusterResolverTest, CreateErrors) {
  MapEnvironment env;
  EXPECT_THAT(ResourceSpecClusterResolver::Create("/nonexistent/x.yml", {}, env),
              StatusIs(Status::Code::kIoError, HasSubstr("/nonexistent/x.yml")));
  EXPECT_THAT(ResourceSpecClusterResolver::Create(ResourceSpec{}, {}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("no nodes")));
  ResourceSpec spec;
  spec.nodes.push_back({});
  spec.nodes[0].address = "a";
  spec.chief = "b";
  EXPECT_THAT(ResourceSpecClusterResolver::Create(spec, {}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("chief 'b'")));
  spec.chief = "a";
  Options options;
  options.port_base = 65536;
  EXPECT_THAT(ResourceSpecClusterResolver::Create(spec, options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("port_base=65536")));
  ASSERT_OK_AND_ASSIGN(ResourceSpec three, ParseResourceSpec(kTwoNodes));
  options.port_base = 65534;
  EXPECT_THAT(ResourceSpecClusterResolver::Create(three, options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("65536")));
}

}  // namespace
}  // namespace drover

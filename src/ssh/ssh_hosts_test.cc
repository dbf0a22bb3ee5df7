#include "ssh/ssh_hosts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "drover/resource_spec_cluster_resolver.h"
#include "testing/status_matchers.h"

namespace drover::ssh {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Matches an SshHost by address and slots.
::testing::Matcher<const SshHost&> Host(const std::string& address, int slots) {
  return AllOf(Field("address", &SshHost::address, address),
               Field("slots", &SshHost::slots, slots));
}

// A file with `text`, removed when the test ends; `suffix` ends its name.
class TempFile {
 public:
  explicit TempFile(const std::string& text, const std::string& suffix = "") {
    std::string pattern = "/tmp/drover_hosts_XXXXXX" + suffix;
    std::vector<char> path(pattern.begin(), pattern.end());
    path.push_back('\0');
    int fd = mkstemps(path.data(), static_cast<int>(suffix.size()));
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = path.data();
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ParseHostListTest, ParsesHostsSlotsAndIpv6) {
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> hosts, ParseHostList("h1:2,h2,10.0.0.3:4,[::1]:2"));
  EXPECT_THAT(hosts,
              ElementsAre(Host("h1", 2), Host("h2", 1), Host("10.0.0.3", 4), Host("::1", 2)));
  EXPECT_EQ(TotalSlots(hosts), 9);
  // Defaults: no GPUs, not the chief, the ssh client's user and port.
  EXPECT_THAT(hosts[0].gpus, IsEmpty());
  EXPECT_FALSE(hosts[0].chief);
  EXPECT_EQ(hosts[0].username, "");
  EXPECT_EQ(hosts[0].port, 0);
}

TEST(ParseHostListTest, UnbracketedIpv6HasNoSlots) {
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> hosts,
                       ParseHostList("fe80::1:2, [fe80::2] ,alice@h3:3"));
  EXPECT_THAT(hosts, ElementsAre(Host("fe80::1:2", 1), Host("fe80::2", 1), Host("alice@h3", 3)));
}

TEST(ParseHostListTest, ErrorsNameTheEntry) {
  struct Case {
    std::string list;
    std::string message;
  };
  const Case cases[] = {
      {"", "no hosts"},
      {"  ", "no hosts"},
      {"h1,,h2", "entry 2 is empty"},
      {"h1,", "entry 2 is empty"},
      {",h1", "entry 1 is empty"},
      {"h1:0", "entry 1 \"h1:0\": slots \"0\" is not a positive integer"},
      {"h1:2,h2:x", "entry 2 \"h2:x\": slots \"x\" is not a positive integer"},
      {"h1:-1", "slots \"-1\" is not a positive integer"},
      {"h1:", "slots \"\" is not a positive integer"},
      {"h1:2.5", "slots \"2.5\""},
      {"h1:99999999999999999999", "is not a positive integer"},
      {"h1:65537", "is not a positive integer (1..65536)"},
      {":2", "entry 1 \":2\": empty host"},
      {"[]:2", "empty host"},
      {"[::1", "no ']' closes"},
      {"[::1]x", "unexpected \"x\" after ']'"},
      {"h1,h2:3,h1:2", "entry 3: host 'h1' is listed twice"},
      {"[::1],::1", "host '::1' is listed twice"},
      {"-oProxyCommand=x", "starts with '-'"},
      {"h/1", "is not a host name"},
      {"h 1", "is not a host name"},
      {std::string("h\0x", 3), "\"h\\x00x\" is not a host name"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseHostList(c.list),
                StatusIs(Status::Code::kInvalidArgument,
                         AllOf(HasSubstr("host list"), HasSubstr(c.message))))
        << c.list << " -> " << ParseHostList(c.list).status();
  }
}

TEST(ParseHostfileTest, ParsesSlotsCommentsAndBlankLines) {
  constexpr char kHostfile[] =
      "# cluster A\n"
      "\n"
      "h1 slots=4\n"
      "  h2   slots=2 max_slots=8   # the second\n"
      "h3\r\n"
      "h4:3\n"
      "\t[fe80::1] slots = 2\n"
      "fe80::2 max_slots=1\n"
      "h5#no slots\n"
      "   # indented comment";
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> hosts, ParseHostfile(kHostfile, "hosts"));
  EXPECT_THAT(hosts, ElementsAre(Host("h1", 4), Host("h2", 2), Host("h3", 1), Host("h4", 3),
                                 Host("fe80::1", 2), Host("fe80::2", 1), Host("h5", 1)));
  EXPECT_EQ(TotalSlots(hosts), 14);
}

TEST(ParseHostfileTest, ErrorsNameTheSourceAndLine) {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"", "hostfile: no hosts"},
      {"# only\n\n   \n", "hostfile: no hosts"},
      {"h1\nh2 slot=2\n", "hostfile:2: unknown \"slot=2\" after host 'h2' (expected slots=N"},
      {"h1 gpus\n", "hostfile:1: unknown \"gpus\""},
      {"h1\n\nh2 slots=0", "hostfile:3: slots \"0\" is not a positive integer"},
      {"h1 slots=two", "hostfile:1: slots \"two\" is not a positive integer"},
      {"h1 slots=", "hostfile:1: slots \"\" is not a positive integer"},
      {"h1 max_slots=-2", "hostfile:1: max_slots \"-2\" is not a positive integer"},
      {"h1 slots=4 max_slots=2", "hostfile:1: max_slots=2 is less than slots=4 for 'h1'"},
      {"h1 slots=1 slots=2", "hostfile:1: slots is given twice for 'h1'"},
      {"h1:2 slots=2", "hostfile:1: slots is given twice"},
      {"h1:x", "hostfile:1: slots \"x\" is not a positive integer"},
      {"h1\n# c\nh2\nh1 slots=2\n", "hostfile:4: host 'h1' is listed twice (first on line 1)"},
      {"h1,h2\n", "hostfile:1: host \"h1,h2\" is not a host name"},
      {"[::1\n", "hostfile:1: no ']' closes"},
      {"-F/etc/x\n", "hostfile:1: host \"-F/etc/x\" starts with '-'"},
      {"slots=2\n", "hostfile:1: host \"slots=2\" is not a host name"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseHostfile(c.text, "hostfile"),
                StatusIs(Status::Code::kInvalidArgument, HasSubstr(c.message)))
        << c.text << " -> " << ParseHostfile(c.text, "hostfile").status();
  }
}

constexpr char kSpec[] = R"(nodes:
  - address: 10.0.0.1
    gpus: [0, 1]
    chief: true
  - address: 10.0.0.2
    gpus: [3, 1, 2]
    ssh_config: conf
  - address: gpu-less
    ssh_config: plain
ssh:
  conf:
    username: alice
    port: 2222
    key_file: ~/.ssh/id_rsa
    python_venv: source /venv/bin/activate
    shared_envs: {NCCL_DEBUG: INFO}
  plain:
    key_file: /keys/id
)";

TEST(HostsFromResourceSpecTest, MapsNodesInFileOrder) {
  MapEnvironment env(std::map<std::string, std::string>{{"HOME", "/home/alice"}});
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> hosts, HostsFromResourceSpec(kSpec, "spec.yml", env));
  EXPECT_THAT(hosts, ElementsAre(Host("10.0.0.1", 2), Host("10.0.0.2", 3), Host("gpu-less", 1)));
  EXPECT_EQ(TotalSlots(hosts), 6);

  // The chief without an ssh_config: the ssh client's defaults.
  EXPECT_TRUE(hosts[0].chief);
  EXPECT_THAT(hosts[0].gpus, ElementsAre(0, 1));
  EXPECT_EQ(hosts[0].username, "");
  EXPECT_EQ(hosts[0].port, 0);
  EXPECT_EQ(hosts[0].key_file, "");

  EXPECT_FALSE(hosts[1].chief);
  EXPECT_THAT(hosts[1].gpus, ElementsAre(1, 2, 3));
  EXPECT_EQ(hosts[1].username, "alice");
  EXPECT_EQ(hosts[1].port, 2222);
  EXPECT_EQ(hosts[1].key_file, "/home/alice/.ssh/id_rsa");
  EXPECT_EQ(hosts[1].python_venv, "source /venv/bin/activate");
  EXPECT_EQ(hosts[1].env, (std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}}));

  EXPECT_EQ(hosts[2].username, "");
  EXPECT_EQ(hosts[2].port, 22);  // SshConfig's default
  EXPECT_EQ(hosts[2].key_file, "/keys/id");
}

TEST(HostsFromResourceSpecTest, WithoutAHomeTheKeyFileStaysAsWritten) {
  MapEnvironment env;
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> hosts, HostsFromResourceSpec(kSpec, "spec.yml", env));
  EXPECT_EQ(hosts[1].key_file, "~/.ssh/id_rsa");  // ssh names the path it could not use
}

TEST(HostsFromResourceSpecTest, ErrorsNameTheSourceAndLine) {
  MapEnvironment env;
  EXPECT_THAT(
      HostsFromResourceSpec("nodes:\n  - address: a\n    gpu: [0]\n", "spec.yml", env),
      StatusIs(Status::Code::kInvalidArgument, AllOf(HasSubstr("resource spec 'spec.yml', line 3"),
                                                     HasSubstr("unknown key 'gpu'"))));
  EXPECT_THAT(HostsFromResourceSpec("nodes: [", "spec.yml", env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bad YAML")));
}

TEST(LoadHostsTest, PicksTheFormatFromTheValue) {
  MapEnvironment env;
  TempFile spec(kSpec, ".yaml");
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> from_spec, LoadHosts(spec.path(), env));
  EXPECT_EQ(from_spec.size(), 3u);
  EXPECT_TRUE(from_spec[0].chief);

  TempFile yml("nodes:\n  - address: solo\n    gpus: [0, 1, 2, 3]\n", ".yml");
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> from_yml, LoadHosts(yml.path(), env));
  EXPECT_THAT(from_yml, ElementsAre(Host("solo", 4)));

  TempFile hostfile("h1 slots=2\nh2\n", ".txt");
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> from_file, LoadHosts(hostfile.path(), env));
  EXPECT_THAT(from_file, ElementsAre(Host("h1", 2), Host("h2", 1)));

  // A hostfile with no suffix is a hostfile too.
  TempFile bare("h9 slots=3\n");
  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> from_bare, LoadHosts(bare.path(), env));
  EXPECT_THAT(from_bare, ElementsAre(Host("h9", 3)));

  ASSERT_OK_AND_ASSIGN(std::vector<SshHost> from_list, LoadHosts("h1:2,h2", env));
  EXPECT_THAT(from_list, ElementsAre(Host("h1", 2), Host("h2", 1)));
}

TEST(LoadHostsTest, ErrorsNameTheFile) {
  MapEnvironment env;
  TempFile bad("h1\nh1\n");
  EXPECT_THAT(LoadHosts(bad.path(), env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr(bad.path() + ":2: host 'h1'")));
  TempFile bad_spec("nodes:\n  - address: a\n    chief: yes\nextra: 1\n", ".yml");
  EXPECT_THAT(LoadHosts(bad_spec.path(), env),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr(bad_spec.path()), HasSubstr("line 4"),
                             HasSubstr("unknown key 'extra'"))));
  EXPECT_THAT(LoadHosts("/nonexistent/hosts", env),
              StatusIs(Status::Code::kIoError, HasSubstr("'/nonexistent/hosts'")));
  EXPECT_THAT(LoadHosts("/tmp", env),
              StatusIs(Status::Code::kIoError, HasSubstr("'/tmp': it is a directory")));
  EXPECT_THAT(LoadHosts("cluster.yml", env),
              StatusIs(Status::Code::kIoError, HasSubstr("'cluster.yml'")));
  EXPECT_THAT(LoadHosts("", env), StatusIs(Status::Code::kInvalidArgument, HasSubstr("no hosts")));
}

TEST(LoadHostsTest, RefusesOversizedFiles) {
  MapEnvironment env;
  TempFile big(std::string(kMaxResourceSpecBytes + 1, '#'));
  EXPECT_THAT(LoadHosts(big.path(), env),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr(big.path()), HasSubstr("larger than 1048576 bytes"))));
}

TEST(LoadHostsTest, UnreadableFileIsAnIoError) {
  MapEnvironment env;
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  TempFile locked("h1\n");
  ASSERT_EQ(chmod(locked.path().c_str(), 0), 0);
  EXPECT_THAT(LoadHosts(locked.path(), env),
              StatusIs(Status::Code::kIoError, HasSubstr(locked.path())));
}

TEST(TotalSlotsTest, SumsAndSaturates) {
  EXPECT_EQ(TotalSlots({}), 0);
  std::vector<SshHost> hosts(3);
  hosts[0].slots = 2;
  EXPECT_EQ(TotalSlots(hosts), 4);
  hosts[1].slots = 2147483647;
  EXPECT_EQ(TotalSlots(hosts), 2147483647);
}

}  // namespace
}  // namespace drover::ssh

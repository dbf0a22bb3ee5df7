// What drover hands to ssh: the options every call carries, and the remote
// command line, which must survive the remote shell (quoting itself is
// tested in os/shell_quote_test.cc). Runs against real sshd hosts are in
// tests/ssh/.

#include "ssh/ssh_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "os/run_process.h"
#include "ssh/ssh_engine.h"
#include "testing/status_matchers.h"

namespace drover::ssh {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Runs `sh -c` on a command line and returns what it printed.
std::string ThroughShell(const std::string& command) {
  Result<os::CommandResult> result = os::RunProcess({"sh", "-c", command}, "", 60);
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? result->output : "";
}

TEST(SshArgvTest, BatchModeMultiplexedAndHostKeysChecked) {
  SshHost host;
  host.address = "h1";
  SshOptions options;
  options.control_dir = "/tmp/cm";
  std::vector<std::string> argv = SshArgv(host, options, "true");
  EXPECT_EQ(argv.front(), "ssh");
  EXPECT_THAT(argv, Contains("BatchMode=yes"));
  EXPECT_THAT(argv, Contains("ControlMaster=auto"));
  EXPECT_THAT(argv, Contains("ControlPath=/tmp/cm/%C"));
  EXPECT_THAT(argv, Not(Contains("StrictHostKeyChecking=no")));
  // The host and the command come last, after "--", so neither is an option.
  ASSERT_GE(argv.size(), 3u);
  EXPECT_THAT(std::vector<std::string>(argv.end() - 3, argv.end()),
              ElementsAre("--", "h1", "true"));
}

TEST(SshArgvTest, SpecSettingsAndUncheckedHostKeys) {
  SshHost host;
  host.address = "10.0.0.2";
  host.username = "alice";
  host.port = 2222;
  host.key_file = "/keys/id";
  SshOptions options;
  options.config_file = "/etc/drover/ssh_config";
  options.check_host_keys = false;
  options.extra_options = {"ProxyJump=bastion"};
  std::vector<std::string> argv = SshArgv(host, options, "true");
  auto after = [&argv](const std::string& flag) {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(after("-F"), "/etc/drover/ssh_config");
  EXPECT_EQ(after("-l"), "alice");
  EXPECT_EQ(after("-p"), "2222");
  EXPECT_EQ(after("-i"), "/keys/id");
  EXPECT_THAT(argv, Contains("StrictHostKeyChecking=no"));
  EXPECT_THAT(argv, Contains("UserKnownHostsFile=/dev/null"));
  EXPECT_THAT(argv, Contains("ProxyJump=bastion"));
  EXPECT_THAT(argv, Not(Contains("ControlMaster=auto")));  // no control_dir
}

TEST(RemoteCommandTest, DirectoryVenvEnvironmentThenExec) {
  SshHost host;
  host.python_venv = "source /venv/bin/activate";
  host.env = {{"LD_LIBRARY_PATH", "/cuda"}, {"SHARED", "spec"}};
  std::string command =
      RemoteCommand(host, {"python3", "train.py", "a b"}, {{"SHARED", "driver's"}}, "/work dir");
  EXPECT_EQ(command,
            "cd '/work dir' 2>/dev/null || cd; source /venv/bin/activate && exec env "
            "LD_LIBRARY_PATH=/cuda 'SHARED=driver'\\''s' python3 train.py 'a b'");
}

TEST(RemoteCommandTest, RunsThroughAShell) {
  std::string command =
      RemoteCommand(SshHost{}, {"sh", "-c", "echo \"$A|$PWD\""}, {{"A", "x y"}}, "/");
  EXPECT_EQ(ThroughShell(command), "x y|/\n");
}

TEST(LocalAddressTowardsTest, LoopbackIsReachedFromLoopback) {
  ASSERT_OK_AND_ASSIGN(std::string address, LocalAddressTowards("127.0.0.1"));
  EXPECT_EQ(address, "127.0.0.1");
  EXPECT_FALSE(LocalAddressTowards("no-such-host.invalid").ok());
}

TEST(SshEngineTest, SlotsFollowTheHostsAndDealTheirGpus) {
  SshEngineOptions options;
  SshHost a;
  a.address = "127.0.0.1";
  a.slots = 2;
  a.gpus = {0, 1, 2, 3};
  SshHost b;
  b.address = "127.0.0.2";
  options.hosts = {a, b};
  options.ssh.ssh_binary = "/bin/false";  // ssh -G fails: the addresses stay as given
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SshEngine> engine, SshEngine::Create(options));
  EXPECT_EQ(engine->name(), "ssh");
  EXPECT_EQ(engine->total_slots(), 3);
  EXPECT_EQ(engine->agent_host(0), "127.0.0.1");
  EXPECT_EQ(engine->agent_host(1), "127.0.0.1");
  EXPECT_EQ(engine->agent_host(2), "127.0.0.2");
  EXPECT_EQ(engine->rendezvous_host(), "127.0.0.1");  // loopback hosts: the driver is local
  EXPECT_THAT(engine->SlotGpus(), ElementsAre("0,1", "2,3", ""));
}

TEST(SshEngineTest, NoHostsIsBadInput) {
  EXPECT_THAT(SshEngine::Create(SshEngineOptions{}),
              ::drover::testing::StatusIs(Status::Code::kInvalidArgument, HasSubstr("--hosts")));
}

TEST(SshEngineTest, GivenDriverAddressWins) {
  SshEngineOptions options;
  SshHost host;
  host.address = "127.0.0.1";
  options.hosts = {host};
  options.driver_address = "192.0.2.7";
  options.ssh.ssh_binary = "/bin/false";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SshEngine> engine, SshEngine::Create(options));
  EXPECT_EQ(engine->rendezvous_host(), "192.0.2.7");
}

}  // namespace
}  // namespace drover::ssh

namespace drover::ssh {
namespace {

TEST(ForwardedVariablesTest, PythonPathDroverVariablesAndEnvFlags) {
  MapEnvironment here(
      {{"PYTHONPATH", "/opt/lib"}, {"DROVER_MARK", "m1"}, {"HOME", "/root"}, {"DATA", "/data"}});
  Result<std::map<std::string, std::string>> env =
      ForwardedVariables({"DATA", "SEED=7", "HOME=/home/u"}, here);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"DATA", "/data"},
                                                      {"DROVER_MARK", "m1"},
                                                      {"HOME", "/home/u"},
                                                      {"PYTHONPATH", "/opt/lib"},
                                                      {"SEED", "7"}}));
}

TEST(ForwardedVariablesTest, AnUnsetNameOrAnEmptyOneIsRefused) {
  MapEnvironment here;
  EXPECT_THAT(ForwardedVariables({"MISSING"}, here).status().message(),
              ::testing::HasSubstr("--env MISSING: it is not set here"));
  EXPECT_THAT(ForwardedVariables({"=x"}, here).status().message(),
              ::testing::HasSubstr("--env takes NAME or NAME=VALUE"));
}

}  // namespace
}  // namespace drover::ssh

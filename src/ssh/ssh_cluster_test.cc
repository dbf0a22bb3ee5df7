// SshCluster without sshd: a fake `ssh` (a shell script) runs the remote
// command locally with `sh -c`, so command construction, binary-safe file
// writes, copies and the error mapping are checked end to end. (Runs against
// real sshd hosts are in tests/ssh/test_ssh_cluster.py.)

#include "ssh/ssh_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/status_matchers.h"

namespace drover::ssh {
namespace {

namespace fs = std::filesystem;
using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Skips ssh's options up to `--`; the host 10.0.0.99 refuses connections,
// as ssh reports it; `-O exit` (StopMasters) finds no master.
constexpr char kFakeSsh[] = R"(#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -O) echo "Control socket connect: No such file or directory" >&2; exit 255 ;;
    *) shift ;;
  esac
done
host=$1; shift
if [ "$host" = 10.0.0.99 ]; then
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255
fi
exec sh -c "$1"
)";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& data, fs::perms mode) {
  std::ofstream(path, std::ios::binary) << data;
  fs::permissions(path, mode);
}

struct ProcessOutput {
  std::string output;
  std::string error;
  os::ExitStatus status = os::ExitStatus::Exited(-1);
};

// Reads a process's stdout and stderr to their end and reaps it.
ProcessOutput Collect(os::Subprocess& process) {
  ProcessOutput out;
  char buffer[4096];
  while (process.stdout_fd() >= 0 || process.stderr_fd() >= 0) {
    for (int which = 0; which < 2; ++which) {
      int fd = which == 0 ? process.stdout_fd() : process.stderr_fd();
      if (fd < 0) continue;
      ssize_t got = ::read(fd, buffer, sizeof(buffer));
      if (got > 0) {
        (which == 0 ? out.output : out.error).append(buffer, static_cast<size_t>(got));
      } else if (got == 0) {
        which == 0 ? process.CloseStdout() : process.CloseStderr();
      }
    }
    ::usleep(1000);
  }
  out.status = process.Wait();
  return out;
}

class SshClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/drover-ssh-cluster-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    WriteFile(dir_ / "ssh", kFakeSsh, fs::perms::owner_all);
    spec_ = R"(nodes:
  - address: 10.0.0.1
    chief: true
    gpus: [0, 1]
  - address: 10.0.0.2
    ssh_config: conf
  - address: 10.0.0.99
    ssh_config: conf
ssh:
  conf:
    username: alice
    python_venv: export VENV_ON=yes
    shared_envs: {SHARED: "a b"}
)";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<SshCluster> MakeCluster() {
    SshCluster::Options options;
    options.ssh.ssh_binary = (dir_ / "ssh").string();
    options.timeout_s = 60;
    Result<std::unique_ptr<SshCluster>> cluster =
        SshCluster::FromText(spec_, "spec.yml", options, env_);
    EXPECT_OK(cluster);
    return cluster.ok() ? std::move(cluster).value() : nullptr;
  }

  fs::path dir_;
  std::string spec_;
  MapEnvironment env_;
};

TEST_F(SshClusterTest, AnswersAutoDistQuestions) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  EXPECT_TRUE(cluster->is_chief());
  EXPECT_TRUE(cluster->is_chief("10.0.0.1"));
  EXPECT_FALSE(cluster->is_chief("10.0.0.2"));
  EXPECT_EQ(cluster->get_local_address(), "10.0.0.1");
  EXPECT_EQ(cluster->get_address_from_task("worker", 1).value_or(""), "10.0.0.2");
  EXPECT_THAT(cluster->get_address_from_task("worker", 7),
              StatusIs(Status::Code::kNotFound, HasSubstr("7")));
  env_.Set("AUTODIST_WORKER", "10.0.0.2");
  EXPECT_FALSE(cluster->is_chief());
  EXPECT_EQ(cluster->get_local_address(), "10.0.0.2");
  EXPECT_EQ(cluster->get_local_worker_task_index().value_or(-1), 1);
  EXPECT_EQ(cluster->get_local_session_target().value_or(""), "grpc://localhost:15001");
  EXPECT_EQ(cluster->addresses(), (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "10.0.0.99"}));
}

TEST_F(SshClusterTest, OwnsAPrivateControlMasterDirectory) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  const std::string control_dir = cluster->ssh_options().control_dir;
  ASSERT_THAT(control_dir, HasSubstr("/tmp/drover-ssh-"));
  struct stat info;
  ASSERT_EQ(::stat(control_dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  Result<std::vector<std::string>> argv = cluster->SshArgvFor("10.0.0.2", "true");
  ASSERT_OK(argv);
  EXPECT_THAT(*argv, ::testing::Contains("ControlPath=" + control_dir + "/%C"));
  EXPECT_THAT(*argv, ::testing::Contains("alice"));
  cluster.reset();
  EXPECT_FALSE(fs::exists(control_dir));
}

TEST_F(SshClusterTest, UnknownHostIsNotFoundAndNamed) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  auto named = StatusIs(Status::Code::kNotFound, HasSubstr("'nosuch'"));
  EXPECT_THAT(cluster->RemoteFileWrite("/tmp/x", "x", "nosuch"), named);
  EXPECT_THAT(cluster->RemoteCopy(dir_.string(), "/tmp", "nosuch"), named);
  EXPECT_THAT(cluster->RemoteExec({"true"}, "nosuch").status(), named);
  EXPECT_THAT(cluster->SshArgvFor("nosuch", "true").status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("10.0.0.1, 10.0.0.2, 10.0.0.99")));
}

TEST_F(SshClusterTest, RemotePathWordKeepsTheHomeExpandable) {
  EXPECT_EQ(RemotePathWord("/a b/c"), "'/a b/c'");
  EXPECT_EQ(RemotePathWord("~/a b"), "~/'a b'");
  EXPECT_EQ(RemotePathWord("~"), "~");
  EXPECT_EQ(RemotePathWord("rel/x"), "rel/x");
}

TEST_F(SshClusterTest, RemoteExecCommandHasVenvEnvAndWatchdog) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  Result<std::string> command = cluster->RemoteExecCommand({"echo", "$SHARED"}, "10.0.0.2");
  ASSERT_OK(command);
  EXPECT_EQ(command->rfind("export VENV_ON=yes && exec env 'SHARED=a b' bash -c ", 0), 0u)
      << *command;
  EXPECT_THAT(*command, HasSubstr("'echo $SHARED'"));
  EXPECT_THAT(cluster->RemoteExecCommand({}, "10.0.0.2").status(),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("10.0.0.2")));
}

TEST_F(SshClusterTest, RemoteExecRunsBashWithOutputAndExitCode) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  Result<os::Subprocess> process = cluster->RemoteExec(
      {"echo", "\"$SHARED/$VENV_ON\";", "echo", "oops", ">&2;", "exit", "3"}, "10.0.0.2");
  ASSERT_OK(process);
  ProcessOutput out = Collect(*process);
  EXPECT_EQ(out.output, "a b/yes\n");
  EXPECT_EQ(out.error, "oops\n");
  EXPECT_EQ(out.status, os::ExitStatus::Exited(3));
}

TEST_F(SshClusterTest, RemoteExecEndsTheCommandWhenStdinCloses) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  const fs::path marker = dir_ / "marker";
  Result<os::Subprocess> process = cluster->RemoteExec(
      {"trap 'echo stopped; exit 7' TERM; touch " + marker.string() + "; sleep 600 & wait"},
      "10.0.0.2");
  ASSERT_OK(process);
  for (int i = 0; i < 3000 && !fs::exists(marker); ++i) ::usleep(10000);
  ASSERT_TRUE(fs::exists(marker));
  process->CloseStdin();
  ProcessOutput out = Collect(*process);
  EXPECT_EQ(out.output, "stopped\n");
  EXPECT_EQ(out.status, os::ExitStatus::Exited(7));
}

TEST_F(SshClusterTest, RemoteFileWriteIsBinarySafeAndMakesDirectories) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  constexpr char kBytes[] = "a\0b\n\xff'quote\" $HOME";
  const std::string data(kBytes, sizeof(kBytes) - 1);  // the NUL inside included
  const fs::path target = dir_ / "new dir" / "sub" / "file's.bin";
  ASSERT_OK(cluster->RemoteFileWrite(target.string(), data, "10.0.0.2"));
  EXPECT_EQ(ReadFile(target), data);
  ASSERT_OK(cluster->RemoteFileWrite(target.string(), "", "10.0.0.2"));
  EXPECT_EQ(ReadFile(target), "");
}

TEST_F(SshClusterTest, RemoteFileWriteErrorsNameHostAndPath) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  WriteFile(dir_ / "plain", "x", fs::perms::owner_all);
  const std::string under_file = (dir_ / "plain" / "f").string();
  EXPECT_THAT(cluster->RemoteFileWrite(under_file, "x", "10.0.0.2"),
              StatusIs(Status::Code::kIoError,
                       ::testing::AllOf(HasSubstr(under_file), HasSubstr("10.0.0.2"))));
  EXPECT_THAT(cluster->RemoteFileWrite("/tmp/x", "x", "10.0.0.99"),
              StatusIs(Status::Code::kUnavailable,
                       ::testing::AllOf(HasSubstr("10.0.0.99"), HasSubstr("Connection refused"))));
  EXPECT_THAT(cluster->RemoteFileWrite("/tmp/dir/", "x", "10.0.0.2"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("/tmp/dir/")));
}

TEST_F(SshClusterTest, RemoteCopyCopiesAFileIntoADirectoryKeepingItsMode) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  fs::create_directory(dir_ / "src");
  WriteFile(dir_ / "src" / "run.sh", data, fs::perms::owner_all | fs::perms::group_read);
  const fs::path into = dir_ / "remote" / "work";
  ASSERT_OK(cluster->RemoteCopy((dir_ / "src" / "run.sh").string(), into.string(), "10.0.0.2"));
  EXPECT_EQ(ReadFile(into / "run.sh"), data);
  EXPECT_EQ(fs::status(into / "run.sh").permissions(),
            fs::perms::owner_all | fs::perms::group_read);
}

TEST_F(SshClusterTest, RemoteCopyCopiesADirectoryRecursively) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  const fs::path tree = dir_ / "model";
  fs::create_directories(tree / "a" / "b");
  WriteFile(tree / "top.txt", "top", fs::perms::owner_read | fs::perms::owner_write);
  WriteFile(tree / "a" / "b" / "deep.bin", std::string("\0\1\2", 3), fs::perms::owner_all);
  fs::permissions(tree / "a", fs::perms::owner_all | fs::perms::others_exec);
  const fs::path into = dir_ / "dest";
  ASSERT_OK(cluster->RemoteCopy(tree.string() + "/", into.string(), "10.0.0.2"));
  EXPECT_EQ(ReadFile(into / "model" / "top.txt"), "top");
  EXPECT_EQ(ReadFile(into / "model" / "a" / "b" / "deep.bin"), std::string("\0\1\2", 3));
  EXPECT_EQ(fs::status(into / "model" / "a").permissions(),
            fs::perms::owner_all | fs::perms::others_exec);
  EXPECT_EQ(fs::status(into / "model" / "top.txt").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(SshClusterTest, RemoteCopyFollowsALinkGivenAsThePath) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  fs::create_directories(dir_ / "real" / "d");
  WriteFile(dir_ / "real" / "f.txt", "file", fs::perms::owner_all);
  WriteFile(dir_ / "real" / "d" / "in.txt", "in", fs::perms::owner_all);
  fs::create_symlink(dir_ / "real" / "f.txt", dir_ / "file-link");
  fs::create_directory_symlink(dir_ / "real" / "d", dir_ / "dir-link");
  ASSERT_OK(
      cluster->RemoteCopy((dir_ / "file-link").string(), (dir_ / "out").string(), "10.0.0.2"));
  ASSERT_OK(cluster->RemoteCopy((dir_ / "dir-link").string(), (dir_ / "out").string(), "10.0.0.2"));
  EXPECT_FALSE(fs::is_symlink(dir_ / "out" / "file-link"));
  EXPECT_EQ(ReadFile(dir_ / "out" / "file-link"), "file");
  EXPECT_FALSE(fs::is_symlink(dir_ / "out" / "dir-link"));
  EXPECT_EQ(ReadFile(dir_ / "out" / "dir-link" / "in.txt"), "in");
}

TEST_F(SshClusterTest, RemoteCopyErrorsNameHostAndPath) {
  auto cluster = MakeCluster();
  ASSERT_NE(cluster, nullptr);
  const std::string missing = (dir_ / "missing.txt").string();
  EXPECT_THAT(cluster->RemoteCopy(missing, "/tmp", "10.0.0.2"),
              StatusIs(Status::Code::kNotFound,
                       ::testing::AllOf(HasSubstr(missing), HasSubstr("No such file"))));
  WriteFile(dir_ / "plain", "x", fs::perms::owner_all);
  const std::string under_file = (dir_ / "plain" / "d").string();
  EXPECT_THAT(cluster->RemoteCopy((dir_ / "plain").string(), under_file, "10.0.0.2"),
              StatusIs(Status::Code::kIoError,
                       ::testing::AllOf(HasSubstr(under_file), HasSubstr("10.0.0.2"),
                                        HasSubstr("Not a directory"))));
  EXPECT_THAT(cluster->RemoteCopy((dir_ / "plain").string(), "/tmp/x", "10.0.0.99"),
              StatusIs(Status::Code::kUnavailable,
                       ::testing::AllOf(HasSubstr("10.0.0.99"), HasSubstr("Connection refused"))));
}

TEST_F(SshClusterTest, RemoteFailureMapsPermissionDenied) {
  SshHost host;
  host.address = "h1";
  EXPECT_THAT(RemoteFailure(host, "remote_copy of 'x'",
                            {1, "", "mkdir: cannot create directory '/x': Permission denied\n"}),
              StatusIs(Status::Code::kPermissionDenied,
                       "remote_copy of 'x' on h1: mkdir: cannot create directory '/x': "
                       "Permission denied"));
  EXPECT_THAT(RemoteFailure(host, "w", {255, "", "root@h1: Permission denied (publickey).\r\n"}),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("ssh to h1 failed")));
  EXPECT_THAT(RemoteFailure(host, "w", {2, "", ""}),
              StatusIs(Status::Code::kIoError, HasSubstr("exit code 2")));
}

// Start runs `drover run --engine ssh --hosts <spec> ... -- command`: a fake
// drover records its argv and says what a real run says once formed.
constexpr char kFakeDroverFormed[] = R"(#!/bin/sh
echo "$@" > "$(dirname "$0")/run-args"
echo "drover run: 3 nodes on the ssh engine" >&2
echo "drover run: cluster run-x formed: worker:0 = executor 0" >&2
exec sleep 300
)";
constexpr char kFakeDroverFails[] = R"(#!/bin/sh
echo "drover run: pre-flight check failed on 10.0.0.2; nothing was started" >&2
exit 1
)";

TEST_F(SshClusterTest, StartReturnsOnceFormedAndTerminateStopsTheRun) {
  WriteFile(dir_ / "drover", kFakeDroverFormed, fs::perms::owner_all);
  SshCluster::Options options;
  options.ssh.ssh_binary = (dir_ / "ssh").string();
  options.ssh.config_file = "/etc/ssh-test-config";
  options.drover_binary = (dir_ / "drover").string();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SshCluster> cluster,
                       SshCluster::FromText(spec_, "spec.yml", options, env_));
  ASSERT_OK(cluster->Start({"python3", "train.py"}, {"--epochs", "2"}));
  EXPECT_THAT(cluster->Start({"true"}),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("a run is already going")));
  std::ifstream args(dir_ / "run-args");
  std::string line;
  std::getline(args, line);
  EXPECT_EQ(line, "run --engine ssh --hosts " + cluster->ssh_options().control_dir +
                      "/resource_spec.yml --ssh-config /etc/ssh-test-config --epochs 2 -- "
                      "python3 train.py");
  EXPECT_EQ(cluster->Terminate(std::chrono::seconds(5)), 128 + SIGTERM);
  EXPECT_EQ(cluster->Terminate(), std::nullopt);  // idempotent
}

TEST_F(SshClusterTest, StartThatEndsBeforeFormingSaysWhy) {
  WriteFile(dir_ / "drover", kFakeDroverFails, fs::perms::owner_all);
  SshCluster::Options options;
  options.ssh.ssh_binary = (dir_ / "ssh").string();
  options.drover_binary = (dir_ / "drover").string();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SshCluster> cluster,
                       SshCluster::FromText(spec_, "spec.yml", options, env_));
  EXPECT_THAT(cluster->Start({"true"}),
              StatusIs(Status::Code::kUnavailable,
                       AllOf(HasSubstr("exit code 1"), HasSubstr("pre-flight check failed"))));
}

TEST(SshClusterCreateTest, MissingSpecIsAnIoErrorNamingIt) {
  MapEnvironment env;
  EXPECT_THAT(SshCluster::Create("/nonexistent/spec.yml", {}, env).status(),
              StatusIs(Status::Code::kIoError, HasSubstr("/nonexistent/spec.yml")));
  EXPECT_THAT(SshCluster::FromText("nodes: []\n", "bad.yml", {}, env).status(),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bad.yml")));
}

}  // namespace
}  // namespace drover::ssh

#include "drover/agent.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "agent/test_util.h"
#include "drover/node_context.h"
#include "drover/rendezvous.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::ReadFile;
using ::drover::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::map<std::string, std::string> ParseEnv(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line, '\0')) {
    size_t equals = line.find('=');
    if (equals != std::string::npos) env[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return env;
}

// Waits (bounded) for a file to appear with content.
std::string AwaitFile(const std::string& path) {
  for (int i = 0; i < 2000; ++i) {
    std::string text = ReadFile(path);
    if (!text.empty() && text.back() == '\n') return text;
    std::this_thread::sleep_for(5ms);
  }
  return "";
}

bool EventuallyGroupGone(pid_t pgid) {
  for (int i = 0; i < 1000; ++i) {
    if (::kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// A rendezvous server with N slots, and agents run on threads against it.
class AgentTest : public ::testing::Test {
 protected:
  // `missed_heartbeats`: 100 by default, as death by silence is not what
  // most tests are about (a slow AddressSanitizer build is slow everywhere).
  void StartServer(int nodes, Milliseconds reservation_timeout = 60s, int num_ps = 0,
                   int missed_heartbeats = 100) {
    ASSERT_OK_AND_ASSIGN(token_, ClusterToken::Generate());
    RendezvousServerOptions options;
    options.bind_address = "127.0.0.1";
    options.token = token_;
    options.cluster.num_nodes = nodes;
    options.cluster.num_ps = num_ps;
    options.reservation_timeout = reservation_timeout;
    options.heartbeat_interval = 100ms;
    options.missed_heartbeats_until_dead = missed_heartbeats;
    options.on_event = [this](const NodeEvent& event) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(event);
    };
    ASSERT_OK_AND_ASSIGN(server_, RendezvousServer::Start(options));
  }

  AgentOptions Options(const std::string& id, const std::string& script) {
    AgentOptions options;
    options.rendezvous_address = "127.0.0.1:" + std::to_string(server_->port());
    options.credential = Credential::Cluster(token_);
    options.executor_id = id;
    options.host = "127.0.0.1";
    options.grace = 10s;
    options.reservation_timeout = 60s;
    options.command = {"/bin/sh", "-c", script};
    options.drover_binary = DROVER_BIN_PATH;  // runs `drover guard`
    options.stdout_fd = Open(dir_.File(id + ".out"));
    options.stderr_fd = Open(dir_.File(id + ".err"));
    return options;
  }

  int Open(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    fds_.push_back(fd);
    return fd;
  }

  void TearDown() override {
    server_.reset();  // its loop thread calls on_event, which uses the members below
    for (int fd : fds_) ::close(fd);
  }

  // The error the node reported, as the driver hears it (on_event).
  NodeEvent ReportedError(const std::string& id) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const NodeEvent& event : events_) {
          if (event.kind == NodeEvent::Kind::kError && event.node.executor_id == id) return event;
        }
      }
      std::this_thread::sleep_for(5ms);
    }
    return NodeEvent{NodeEvent::Kind::kDead, {}, "no error reported", {}};
  }

  std::vector<NodeEvent> Events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

  TempDir dir_;
  ClusterToken token_;
  std::unique_ptr<RendezvousServer> server_;
  std::vector<int> fds_;
  std::mutex mu_;
  std::vector<NodeEvent> events_;  // guarded by mu_
};

TEST_F(AgentTest, ProgramSeesTheClusterEnvironmentAndContext) {
  StartServer(2);
  const std::string script = "env -0 > \"$DROVER_WORKING_DIR/env-$DROVER_EXECUTOR_ID\"";
  AgentOptions a = Options("exec-a", script);
  a.working_dir = dir_.path();
  a.log_dir = dir_.File("logs");
  a.gpus = std::vector<int>{0, 1};
  a.num_ports = 2;
  a.restart_count = 1;
  AgentOptions b = Options("exec-b", script);
  b.working_dir = dir_.path();
  b.gpus = std::vector<int>{};
  int code_a = -1, code_b = -1;
  std::thread thread_a([&] { code_a = Agent(a, ProcessEnvironment()).Run(); });
  std::thread thread_b([&] { code_b = Agent(b, ProcessEnvironment()).Run(); });
  thread_a.join();
  thread_b.join();
  ASSERT_EQ(code_a, 0) << ReadFile(dir_.File("exec-a.err"));
  ASSERT_EQ(code_b, 0) << ReadFile(dir_.File("exec-b.err"));

  auto env_a = ParseEnv(ReadFile(dir_.File("env-exec-a")));
  auto env_b = ParseEnv(ReadFile(dir_.File("env-exec-b")));
  EXPECT_EQ(env_a["DROVER_EXECUTOR_ID"], "exec-a");
  EXPECT_EQ(env_a["WORLD_SIZE"], "2");
  EXPECT_EQ(env_b["WORLD_SIZE"], "2");
  EXPECT_EQ(std::set<std::string>({env_a["RANK"], env_b["RANK"]}),
            std::set<std::string>({"0", "1"}));
  EXPECT_EQ(env_a["DROVER_JOB_NAME"], "worker");
  EXPECT_THAT(env_a["TF_CONFIG"], HasSubstr("\"worker\""));
  EXPECT_EQ(env_a["CUDA_VISIBLE_DEVICES"], "0,1");
  ASSERT_EQ(env_b.count("CUDA_VISIBLE_DEVICES"), 1u);
  EXPECT_EQ(env_b["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env_a["DROVER_RESTART_COUNT"], "1");
  EXPECT_EQ(env_b["DROVER_RESTART_COUNT"], "0");
  EXPECT_EQ(env_a["DROVER_LOG_DIR"], dir_.File("logs"));
  EXPECT_EQ(env_b["DROVER_LOG_DIR"], "");
  EXPECT_EQ(env_a["DROVER_WORKING_DIR"], dir_.path());
  EXPECT_FALSE(env_a["DROVER_CLUSTER_ID"].empty());
  EXPECT_EQ(env_a["DROVER_CLUSTER_ID"], env_b["DROVER_CLUSTER_ID"]);
  EXPECT_EQ(env_a["PATH"], std::getenv("PATH"));  // the agent's environment is kept

  // Node a reserved two ports: its address is the first.
  const std::string& ports = env_a["DROVER_PORTS"];
  ASSERT_NE(ports.find(','), std::string::npos);
  EXPECT_EQ(ports.substr(0, ports.find(',')), env_a["DROVER_PORT"]);
  EXPECT_THAT(env_a["DROVER_CLUSTER_SPEC"], HasSubstr("127.0.0.1:" + env_a["DROVER_PORT"]));

  EXPECT_EQ(env_a["DROVER_CONTEXT_FILE"], dir_.File("drover-context-exec-a.json"));
  ASSERT_OK_AND_ASSIGN(NodeContext context, NodeContext::LoadFile(env_a["DROVER_CONTEXT_FILE"]));
  EXPECT_EQ(context.executor_id, "exec-a");
  EXPECT_EQ(context.job_name, "worker");
  EXPECT_EQ(std::to_string(context.task_index), env_a["DROVER_TASK_INDEX"]);
  EXPECT_EQ(std::to_string(context.port), env_a["DROVER_PORT"]);
  EXPECT_EQ(context.ports.size(), 2u);
  EXPECT_EQ(context.num_workers, 2);
  EXPECT_EQ(context.is_chief, env_a["RANK"] == "0");
  EXPECT_EQ(context.restart_count, 1);
  EXPECT_EQ(context.working_dir, dir_.path());
  EXPECT_EQ(context.cluster_id, env_a["DROVER_CLUSTER_ID"]);
  EXPECT_EQ(context.absolute_path("x"), "file://" + dir_.path() + "/x");
}

// Variables, the host name and the interfaces come from the Environment the
// agent is given, never from the process itself.
TEST_F(AgentTest, ReadsVariablesHostNameAndInterfacesThroughItsEnvironment) {
  StartServer(2);
  ::setenv("DROVER_TEST_ONLY_IN_PROCESS", "1", 1);
  MapEnvironment env(std::map<std::string, std::string>{{"PATH", std::getenv("PATH")},
                                                        {"DROVER_TEST_ONLY_IN_FAKE", "yes"}},
                     "fake-node");
  env.set_interfaces({{"lo", "10.9.8.7", /*loopback=*/true}, {"eth7", "10.9.8.7"}});
  const std::string script = "env -0 > \"$DROVER_WORKING_DIR/env-$DROVER_EXECUTOR_ID\"";
  AgentOptions a = Options("exec-a", script);
  a.working_dir = dir_.path();
  a.host = "";  // the Environment's host name
  AgentOptions b = Options("exec-b", script);
  b.working_dir = dir_.path();
  b.host = "10.9.8.7";  // an address of the fake eth7
  int code_a = -1, code_b = -1;
  std::thread thread_a([&] { code_a = Agent(a, env).Run(); });
  std::thread thread_b([&] { code_b = Agent(b, env).Run(); });
  thread_a.join();
  thread_b.join();
  ::unsetenv("DROVER_TEST_ONLY_IN_PROCESS");
  ASSERT_EQ(code_a, 0) << ReadFile(dir_.File("exec-a.err"));
  ASSERT_EQ(code_b, 0) << ReadFile(dir_.File("exec-b.err"));

  auto env_a = ParseEnv(ReadFile(dir_.File("env-exec-a")));
  auto env_b = ParseEnv(ReadFile(dir_.File("env-exec-b")));
  EXPECT_EQ(env_a["DROVER_TEST_ONLY_IN_FAKE"], "yes");
  EXPECT_EQ(env_a.count("DROVER_TEST_ONLY_IN_PROCESS"), 0u);
  EXPECT_THAT(env_a["DROVER_CLUSTER_SPEC"],
              AllOf(HasSubstr("\"fake-node:"), HasSubstr("\"10.9.8.7:")));
  EXPECT_EQ(env_a.count("NCCL_SOCKET_IFNAME"), 0u);  // no address given: no interface pinned
  EXPECT_EQ(env_b["NCCL_SOCKET_IFNAME"], "eth7");    // the loopback entry is passed over
  EXPECT_EQ(env_b["GLOO_SOCKET_IFNAME"], "eth7");
}

// An agent heartbeats from the barrier on: a program that takes three
// seconds to start (here its `drover guard`, behind a slow wrapper) is not
// declared dead after one second of silence.
TEST_F(AgentTest, ASlowProgramStartIsNotADeath) {
  StartServer(1, 60s, 0, /*missed_heartbeats=*/10);
  const std::string slow = dir_.File("slow-drover");
  std::ofstream(slow) << "#!/bin/sh\nsleep 3\nexec '" << DROVER_BIN_PATH << "' \"$@\"\n";
  ASSERT_EQ(::chmod(slow.c_str(), 0755), 0);
  AgentOptions options = Options("exec-0", "echo started");
  options.drover_binary = slow;
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 0) << ReadFile(dir_.File("exec-0.err"));
  EXPECT_EQ(ReadFile(dir_.File("exec-0.out")), "started\n");
  for (const NodeEvent& event : Events()) {
    EXPECT_NE(event.kind, NodeEvent::Kind::kDead) << event.message;
  }
}

TEST_F(AgentTest, OutputIsPassedThroughUnchanged) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "printf 'a\\nb'; printf 'e1\\n' >&2; printf 'c\\n'");
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 0);
  EXPECT_EQ(ReadFile(dir_.File("exec-0.out")), "a\nbc\n");
  EXPECT_EQ(ReadFile(dir_.File("exec-0.err")), "e1\n");
}

TEST_F(AgentTest, FailureIsReportedWithTheLastLines) {
  StartServer(1);
  AgentOptions options =
      Options("exec-0", "i=1; while [ $i -le 25 ]; do echo line $i; i=$((i+1)); done; exit 3");
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 3);
  NodeEvent reported = ReportedError("exec-0");
  const NodeEvent* node = &reported;
  EXPECT_EQ(node->message, "worker:0 exited with exit code 3");
  ASSERT_EQ(node->last_log_lines.size(), 20u);
  EXPECT_EQ(node->last_log_lines.front(), "line 6");
  EXPECT_EQ(node->last_log_lines.back(), "line 25");
}

TEST_F(AgentTest, DeathBySignalIsReportedAndExitsWith128PlusSignal) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "echo dying >&2; kill -KILL $$");
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 128 + SIGKILL);
  NodeEvent reported = ReportedError("exec-0");
  const NodeEvent* node = &reported;
  EXPECT_EQ(node->message, "worker:0 killed by SIGKILL");
  EXPECT_THAT(node->last_log_lines, ElementsAre("dying"));
}

TEST_F(AgentTest, StopFromTheDriverTerminatesTheProgramGroup) {
  StartServer(1);
  const std::string marker = dir_.File("pid");
  AgentOptions options = Options("exec-0", "sleep 30 & echo $$ > " + marker + "; wait");
  int code = -1;
  std::thread thread([&] { code = Agent(options, ProcessEnvironment()).Run(); });
  std::string pid_text = AwaitFile(marker);
  ASSERT_FALSE(pid_text.empty());
  pid_t pgid = std::stoi(pid_text);
  server_->StopAll();
  thread.join();
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(EventuallyGroupGone(pgid));
  server_.reset();  // every event is in
  for (const NodeEvent& event : Events()) {
    EXPECT_NE(event.kind, NodeEvent::Kind::kError) << event.message;
  }
}

TEST_F(AgentTest, StopEscalatesToSigkillAfterGrace) {
  StartServer(1);
  const std::string marker = dir_.File("pid");
  AgentOptions options =
      Options("exec-0", "trap '' TERM; echo $$ > " + marker + "; while :; do sleep 0.05; done");
  options.grace = 100ms;
  int code = -1;
  std::thread thread([&] { code = Agent(options, ProcessEnvironment()).Run(); });
  std::string pid_text = AwaitFile(marker);
  ASSERT_FALSE(pid_text.empty());
  server_->StopAll();
  thread.join();
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(EventuallyGroupGone(std::stoi(pid_text)));
}

TEST_F(AgentTest, InterruptStopsTheProgramAndExitsWith128PlusSignal) {
  StartServer(1);
  const std::string marker = dir_.File("pid");
  AgentOptions options = Options("exec-0", "echo $$ > " + marker + "; exec sleep 30");
  Agent agent(options, ProcessEnvironment());
  int code = -1;
  std::thread thread([&] { code = agent.Run(); });
  std::string pid_text = AwaitFile(marker);
  ASSERT_FALSE(pid_text.empty());
  EXPECT_TRUE(agent.Interrupt(SIGTERM));
  thread.join();
  EXPECT_EQ(code, 128 + SIGTERM);
  EXPECT_TRUE(EventuallyGroupGone(std::stoi(pid_text)));
}

// The driver (or ssh) stops reading the agent's output while the program
// floods it: STOP and SIGTERM must still end the node within its grace.
class FloodTest : public AgentTest, public ::testing::WithParamInterface<bool> {};

TEST_P(FloodTest, AgentWhoseReaderStoppedReadingStillStops) {
  const bool by_signal = GetParam();
  StartServer(1);
  int output[2];
  ASSERT_EQ(::pipe2(output, O_CLOEXEC), 0);
  AgentOptions options = Options("exec-0", "yes flood-line");
  options.stdout_fd = output[1];
  options.stderr_fd = output[1];
  options.grace = 1s;
  Agent agent(options, ProcessEnvironment());
  std::atomic<int> code{-1};
  std::thread thread([&] { code = agent.Run(); });
  // Progress, not time: the pipe to the "driver" is full.
  int queued = 0;
  for (int i = 0; i < 6000 && queued < 60'000; ++i) {
    ::ioctl(output[0], FIONREAD, &queued);
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GE(queued, 60'000);
  if (by_signal) {
    agent.Interrupt(SIGTERM);
  } else {
    server_->StopAll();
  }
  for (int i = 0; i < 6000 && code == -1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(code, by_signal ? 128 + SIGTERM : 0) << "the agent did not stop while blocked";
  // Unblock an agent stuck in a write, so the thread can end either way.
  char buffer[65536];
  ::fcntl(output[0], F_SETFL, O_NONBLOCK);
  while (code == -1) {
    (void)!::read(output[0], buffer, sizeof(buffer));
    std::this_thread::sleep_for(1ms);
  }
  thread.join();
  ::close(output[0]);
  ::close(output[1]);
}

INSTANTIATE_TEST_SUITE_P(StopOrSigterm, FloodTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Sigterm" : "Stop"; });

// A reader that takes the output slowly but steadily (a driver busy with a
// flood of output on a loaded host) still gets the program's last lines:
// what was in flight when the program exited takes this reader well over
// the agent's drain limit, which bounds only a reader that takes nothing.
TEST_F(AgentTest, ASlowReaderGetsTheLastLinesAfterTheProgramExits) {
  StartServer(1);
  int output[2];
  ASSERT_EQ(::pipe2(output, O_CLOEXEC), 0);
  AgentOptions options =
      Options("exec-0", "head -c 400000 /dev/zero | tr '\\0' x; echo; echo after");
  options.stdout_fd = output[1];
  std::atomic<int> code{-1};
  std::thread thread([&] { code = Agent(options, ProcessEnvironment()).Run(); });
  // About 270 KB/s: what is queued at the program's exit (the pipes and
  // the agent's buffer, over 300 KB) takes more than a second to read.
  std::string got;
  char buffer[4096];
  ::fcntl(output[0], F_SETFL, O_NONBLOCK);
  for (;;) {
    const ssize_t n = ::read(output[0], buffer, sizeof(buffer));
    if (n > 0) got.append(buffer, static_cast<size_t>(n));
    if (n <= 0 && code != -1) break;
    std::this_thread::sleep_for(15ms);
  }
  thread.join();
  ::close(output[0]);
  ::close(output[1]);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(got.size(), 400000u + 7u);
  EXPECT_TRUE(got.ends_with("\nafter\n")) << got.substr(got.size() > 20 ? got.size() - 20 : 0);
}

TEST_F(AgentTest, LosingTheRendezvousStopsTheProgram) {
  StartServer(1);
  const std::string marker = dir_.File("pid");
  AgentOptions options = Options("exec-0", "echo $$ > " + marker + "; exec sleep 30");
  int code = -1;
  std::thread thread([&] { code = Agent(options, ProcessEnvironment()).Run(); });
  std::string pid_text = AwaitFile(marker);
  ASSERT_FALSE(pid_text.empty());
  server_->Shutdown();
  thread.join();
  EXPECT_EQ(code, 1);
  EXPECT_THAT(ReadFile(dir_.File("exec-0.err")),
              StartsWith("drover agent exec-0: lost the rendezvous server"));
  EXPECT_TRUE(EventuallyGroupGone(std::stoi(pid_text)));
}

TEST_F(AgentTest, ReservationTimeoutIsOneLineNamingTheMissingNode) {
  StartServer(2, 200ms);
  AgentOptions options = Options("exec-0", "echo never");
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 1);
  std::string err = ReadFile(dir_.File("exec-0.err"));
  EXPECT_THAT(err, StartsWith("drover agent exec-0: "));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_THAT(err, HasSubstr("1"));  // the server's message lists registered/missing slots
  EXPECT_EQ(ReadFile(dir_.File("exec-0.out")), "");
}

TEST_F(AgentTest, MissingProgramIsReported) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "");
  options.command = {"drover-no-such-program"};
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 1);
  EXPECT_THAT(ReadFile(dir_.File("exec-0.err")), HasSubstr("drover-no-such-program"));
  NodeEvent reported = ReportedError("exec-0");
  const NodeEvent* node = &reported;
  EXPECT_THAT(node->message, HasSubstr("worker:0 could not start"));
}

TEST_F(AgentTest, ExternalFeedPlanPublishesTheFeedSocketOfEveryNode) {
  StartServer(2, 60s, /*num_ps=*/1);
  // The program holds on until the test has seen the cluster.
  const std::string go = dir_.File("go");
  // Written whole and renamed into place: the test reads it once it exists.
  const std::string out = dir_.path() + "/socket-$DROVER_EXECUTOR_ID";
  const std::string script = "{ printf '%s\\n' \"${DROVER_FEED_SOCKET-unset}\"; [ -S " +
                             std::string("\"$DROVER_FEED_SOCKET\" ] && echo served; } > ") + out +
                             ".tmp; mv " + out + ".tmp " + out + "; while [ ! -e " + go +
                             " ]; do sleep 0.02; done";
  AgentOptions a = Options("exec-a", script);
  AgentOptions b = Options("exec-b", script);
  const std::string plan = R"({"mode": "train", "format": "pickle", "external": true})";
  a.feed_plan_json = b.feed_plan_json = plan;
  int code_a = -1, code_b = -1;
  std::thread thread_a([&] { code_a = Agent(a, ProcessEnvironment()).Run(); });
  std::thread thread_b([&] { code_b = Agent(b, ProcessEnvironment()).Run(); });
  Result<FormedCluster> formed = server_->WaitForCluster(Clock::now() + 60s);
  std::map<std::string, NodeInfo> nodes;
  if (formed.ok()) {
    for (const NodeInfo& node : formed->nodes) nodes[node.job_name] = node;
  }
  // Both programs have started once both files are there.
  std::string worker_saw, ps_saw;
  if (nodes.count("worker") && nodes.count("ps")) {
    worker_saw = AwaitFile(dir_.File("socket-" + nodes["worker"].executor_id));
    ps_saw = AwaitFile(dir_.File("socket-" + nodes["ps"].executor_id));
  }
  ::drover::testing::WriteFile(go, "");
  thread_a.join();
  thread_b.join();
  ASSERT_OK(formed);
  ASSERT_EQ(code_a, 0) << ReadFile(dir_.File("exec-a.err"));
  ASSERT_EQ(code_b, 0) << ReadFile(dir_.File("exec-b.err"));
  ASSERT_EQ(nodes.size(), 2u);
  const std::string& socket = nodes["worker"].feed_socket;
  EXPECT_THAT(socket, StartsWith("/tmp/drover-feed-"));
  EXPECT_THAT(socket, ::testing::EndsWith("/feed.sock"));
  // The worker serves it, as its DROVER_FEED_SOCKET; the ps is not fed.
  EXPECT_EQ(worker_saw, socket + "\nserved\n");
  EXPECT_EQ(ps_saw, "unset\n");
  EXPECT_FALSE(nodes["ps"].feed_socket.empty());
  // Nothing is left behind.
  for (const auto& [job, node] : nodes) {
    EXPECT_FALSE(fs::exists(fs::path(node.feed_socket).parent_path())) << job;
  }
}

TEST_F(AgentTest, BadInlineFeedPlanIsReportedNamingTheFlag) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "echo never");
  options.feed_plan_json = R"({"mode": "train", "format": "pickle", "partitions": []})";
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 1);
  NodeEvent reported = ReportedError("exec-0");
  EXPECT_THAT(reported.message, HasSubstr("--feed-plan-json"));
  EXPECT_THAT(reported.message, HasSubstr("format"));
  EXPECT_EQ(ReadFile(dir_.File("exec-0.out")), "");
}

TEST_F(AgentTest, ExitWithParentThatIsAlreadyGoneExitsAtOnce) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "echo never");
  options.exit_with_parent = ::getppid() == 1 ? 2 : 1;  // not our parent
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 1);
  EXPECT_THAT(ReadFile(dir_.File("exec-0.err")),
              AllOf(StartsWith("drover agent exec-0: "), HasSubstr("--exit-with-parent")));
  EXPECT_EQ(ReadFile(dir_.File("exec-0.out")), "");
}

TEST_F(AgentTest, WrongTokenFailsWithOneLine) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "echo never");
  ASSERT_OK_AND_ASSIGN(ClusterToken other, ClusterToken::Generate());
  options.credential = Credential::Cluster(other);
  options.reservation_timeout = 1s;
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 1);
  EXPECT_THAT(ReadFile(dir_.File("exec-0.err")), StartsWith("drover agent exec-0: "));
}

TEST_F(AgentTest, RunsWithItsOwnNodeCredential) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "echo hello from $DROVER_JOB_NAME");
  ASSERT_OK_AND_ASSIGN(options.credential, Credential::ForNode(token_, "exec-0"));
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 0);
  EXPECT_THAT(ReadFile(dir_.File("exec-0.out")), HasSubstr("hello from worker"));
}

TEST_F(AgentTest, AnotherExecutorsCredentialFailsBeforeConnecting) {
  StartServer(1);
  AgentOptions options = Options("exec-0", "echo never");
  ASSERT_OK_AND_ASSIGN(options.credential, Credential::ForNode(token_, "exec-1"));
  EXPECT_EQ(Agent(options, ProcessEnvironment()).Run(), 1);
  EXPECT_EQ(ReadFile(dir_.File("exec-0.err")),
            "drover agent exec-0: the credential given is the node credential of executor exec-1, "
            "not executor exec-0's\n");
  EXPECT_EQ(server_->QueryState().registered, 0);
}

// ---------------------------------------------------------------------------
// A host's nodes on one connection (HostConnection).

// The server's side of its established connections: TCP sockets in this
// network namespace whose local port is `port`.
int ConnectionsTo(uint16_t port) {
  char local_port[8];
  std::snprintf(local_port, sizeof(local_port), ":%04X", port);
  int count = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(ReadFile(table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "01" && local.size() > 5 && local.substr(local.size() - 5) == local_port)
        ++count;
    }
  }
  return count;
}

bool EventuallyExists(const std::string& path) {
  for (int i = 0; i < 6000; ++i) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class HostConnectionTest : public AgentTest {
 protected:
  // Opened with the cluster token, or else with the nodes' own credentials
  // (the ssh and slurm engines' agents).
  std::shared_ptr<HostConnection> Connect(std::vector<std::string> ids,
                                          bool node_credentials = false) {
    RendezvousClientOptions options;
    options.address = "127.0.0.1:" + std::to_string(server_->port());
    options.credential = Credential::Cluster(token_);
    if (node_credentials) {
      options.credential = *Credential::ForNode(token_, ids.front());
      for (size_t i = 1; i < ids.size(); ++i) {
        options.host_credentials.push_back(*Credential::ForNode(token_, ids[i]));
      }
    }
    options.name = "test host";
    Result<std::shared_ptr<HostConnection>> host =
        HostConnection::Create(std::move(options), std::move(ids));
    EXPECT_OK(host.status());
    return host.ok() ? *host : nullptr;
  }

  AgentOptions NodeOptions(const std::shared_ptr<HostConnection>& host, const std::string& id,
                           const std::string& script) {
    AgentOptions options = Options(id, script);
    options.host_connection = host;
    options.working_dir = dir_.path();
    return options;
  }

  // Runs h0 and h1 with kUntilReleased on `host`, each on threads_[i]
  // (codes_[i] its exit code), and waits until both programs started.
  void StartTwoUntilReleased(const std::shared_ptr<HostConnection>& host) {
    for (size_t i = 0; i < 2; ++i) {
      AgentOptions options = NodeOptions(host, "h" + std::to_string(i), kUntilReleased);
      threads_.emplace_back(
          [this, i, options] { codes_[i] = Agent(options, ProcessEnvironment()).Run(); });
    }
    for (const char* id : {"h0", "h1"}) {
      ASSERT_TRUE(EventuallyExists(dir_.File(std::string("started-") + id))) << id;
    }
  }

  void TearDown() override {
    for (const char* id : {"h0", "h1"}) std::ofstream(dir_.File(std::string("release-") + id));
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
    AgentTest::TearDown();
  }

  std::atomic<int> codes_[2] = {-1, -1};
  std::vector<std::thread> threads_;

  // Says it started, then runs until the test releases it.
  const std::string kUntilReleased =
      "touch \"started-$DROVER_EXECUTOR_ID\"; "
      "while [ ! -e \"release-$DROVER_EXECUTOR_ID\" ]; do sleep 0.05; done; echo rank $RANK";
};

TEST_F(HostConnectionTest, AHostsNodesRegisterAndLeaveOnOneConnection) {
  StartServer(3);
  std::shared_ptr<HostConnection> host = Connect({"h0", "h1", "h2"});
  ASSERT_NE(host, nullptr);
  std::vector<int> codes(3, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    AgentOptions options = NodeOptions(host, "h" + std::to_string(i), kUntilReleased);
    threads.emplace_back([&codes, i, options] {
      codes[static_cast<size_t>(i)] = Agent(options, ProcessEnvironment()).Run();
    });
  }
  for (const char* id : {"h0", "h1", "h2"}) {
    ASSERT_TRUE(EventuallyExists(dir_.File(std::string("started-") + id))) << id;
  }
  EXPECT_EQ(ConnectionsTo(server_->port()), 1);
  ClusterState state = server_->QueryState();
  EXPECT_EQ(state.registered, 3);
  for (const NodeStatus& node : state.nodes) EXPECT_TRUE(node.alive) << node.node.executor_id;
  for (const char* id : {"h0", "h1", "h2"}) {
    std::ofstream(dir_.File(std::string("release-") + id)) << "";
  }
  for (std::thread& thread : threads) thread.join();
  std::set<std::string> ranks;
  for (int i = 0; i < 3; ++i) {
    const std::string id = "h" + std::to_string(i);
    EXPECT_EQ(codes[static_cast<size_t>(i)], 0) << ReadFile(dir_.File(id + ".err"));
    ranks.insert(ReadFile(dir_.File(id + ".out")));
  }
  EXPECT_EQ(ranks, std::set<std::string>({"rank 0\n", "rank 1\n", "rank 2\n"}));
  int left = 0;
  for (const NodeEvent& event : Events()) {
    EXPECT_NE(event.kind, NodeEvent::Kind::kDead) << event.message;
    if (event.kind == NodeEvent::Kind::kLeft) ++left;
  }
  EXPECT_EQ(left, 3);  // each LEAVE handled before its agent returned
}

TEST_F(HostConnectionTest, AHostsNodesShareOneConnectionWithTheirOwnCredentials) {
  StartServer(2);
  std::shared_ptr<HostConnection> host = Connect({"h0", "h1"}, /*node_credentials=*/true);
  ASSERT_NE(host, nullptr);
  for (size_t i = 0; i < 2; ++i) {
    const std::string id = "h" + std::to_string(i);
    AgentOptions options = NodeOptions(host, id, kUntilReleased);
    options.credential = *Credential::ForNode(token_, id);  // no cluster token anywhere
    threads_.emplace_back(
        [this, i, options] { codes_[i] = Agent(options, ProcessEnvironment()).Run(); });
  }
  for (const char* id : {"h0", "h1"}) {
    ASSERT_TRUE(EventuallyExists(dir_.File(std::string("started-") + id))) << id;
  }
  EXPECT_EQ(ConnectionsTo(server_->port()), 1);
  for (const char* id : {"h0", "h1"}) std::ofstream(dir_.File(std::string("release-") + id));
  for (std::thread& thread : threads_) thread.join();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(codes_[i], 0) << ReadFile(dir_.File("h" + std::to_string(i) + ".err"));
  }
  int left = 0;
  for (const NodeEvent& event : Events()) left += event.kind == NodeEvent::Kind::kLeft;
  EXPECT_EQ(left, 2);
}

TEST_F(HostConnectionTest, AStopForOneNodeStopsThatNodeOnly) {
  StartServer(2);
  std::shared_ptr<HostConnection> host = Connect({"h0", "h1"});
  ASSERT_NE(host, nullptr);
  StartTwoUntilReleased(host);
  ASSERT_OK(server_->StopNode("h1"));
  threads_[1].join();
  EXPECT_EQ(codes_[1], 0) << ReadFile(dir_.File("h1.err"));  // stopped by the driver
  EXPECT_EQ(codes_[0], -1) << ReadFile(dir_.File("h0.err"));
  for (const NodeStatus& node : server_->QueryState().nodes) {
    if (node.node.executor_id == "h0") {
      EXPECT_TRUE(node.alive && !node.left);
    }
    if (node.node.executor_id == "h1") {
      EXPECT_TRUE(node.left);
    }
  }
  std::ofstream(dir_.File("release-h0")) << "";
  threads_[0].join();
  EXPECT_EQ(codes_[0], 0) << ReadFile(dir_.File("h0.err"));
  EXPECT_THAT(ReadFile(dir_.File("h0.out")), StartsWith("rank "));
}

TEST_F(HostConnectionTest, EachNodeReportsItsOwnFailureAndAStopAllEndsTheRest) {
  StartServer(2);
  std::shared_ptr<HostConnection> host = Connect({"h0", "h1"});
  ASSERT_NE(host, nullptr);
  int code_0 = -1, code_1 = -1;
  std::thread node_0([&, options = NodeOptions(host, "h0", "echo about to fail; exit 3")] {
    code_0 = Agent(options, ProcessEnvironment()).Run();
  });
  std::thread node_1([&, options = NodeOptions(host, "h1", kUntilReleased)] {
    code_1 = Agent(options, ProcessEnvironment()).Run();
  });
  node_0.join();
  EXPECT_EQ(code_0, 3);
  NodeEvent error = ReportedError("h0");
  EXPECT_THAT(error.message, HasSubstr("exited with exit code 3"));
  EXPECT_THAT(error.last_log_lines, ElementsAre("about to fail"));
  ASSERT_TRUE(EventuallyExists(dir_.File("started-h1")));
  server_->StopAll();
  node_1.join();
  EXPECT_EQ(code_1, 0) << ReadFile(dir_.File("h1.err"));
}

TEST_F(HostConnectionTest, ANodeThatEndsBeforeRegisteringDoesNotHoldUpTheOthers) {
  StartServer(1);
  std::shared_ptr<HostConnection> host = Connect({"h0", "h1"});
  ASSERT_NE(host, nullptr);
  AgentOptions bad = NodeOptions(host, "h1", "echo never");
  bad.feed_plan = "plan.json";
  bad.feed_plan_json = "{}";  // both: refused before registering
  int code_0 = -1, code_1 = -1;
  std::thread node_0([&, options = NodeOptions(host, "h0", "echo ran")] {
    code_0 = Agent(options, ProcessEnvironment()).Run();
  });
  std::thread node_1([&] { code_1 = Agent(bad, ProcessEnvironment()).Run(); });
  node_1.join();
  node_0.join();
  EXPECT_EQ(code_1, 1);
  EXPECT_THAT(ReadFile(dir_.File("h1.err")), HasSubstr("not both"));
  EXPECT_EQ(code_0, 0) << ReadFile(dir_.File("h0.err"));
  EXPECT_EQ(ReadFile(dir_.File("h0.out")), "ran\n");
}

TEST_F(HostConnectionTest, ALostConnectionIsEveryNodesLoss) {
  StartServer(2);
  std::shared_ptr<HostConnection> host = Connect({"h0", "h1"});
  ASSERT_NE(host, nullptr);
  StartTwoUntilReleased(host);
  server_->Shutdown();
  for (std::thread& thread : threads_) thread.join();
  EXPECT_EQ(codes_[0], 1);
  EXPECT_EQ(codes_[1], 1);
  EXPECT_THAT(ReadFile(dir_.File("h0.err")),
              StartsWith("drover agent h0: lost the rendezvous server"));
  EXPECT_THAT(ReadFile(dir_.File("h1.err")),
              StartsWith("drover agent h1: lost the rendezvous server"));
}

TEST_F(HostConnectionTest, IsRefusedWithoutEveryNodesCredentialOrWithRepeatedNodes) {
  StartServer(1);
  RendezvousClientOptions options;
  options.address = "127.0.0.1:" + std::to_string(server_->port());
  ASSERT_OK_AND_ASSIGN(options.credential, Credential::ForNode(token_, "h0"));
  EXPECT_THAT(HostConnection::Create(options, {"h0", "h1"}).status(),
              ::drover::testing::StatusIs(Status::Code::kInvalidArgument,
                                          HasSubstr("needs every node's credential; executor "
                                                    "h1's is missing")));
  EXPECT_THAT(HostConnection::Create(options, {"h1"}).status(),
              ::drover::testing::StatusIs(Status::Code::kInvalidArgument,
                                          HasSubstr("one of its nodes' credentials, not the node "
                                                    "credential of executor h0")));
  ASSERT_OK_AND_ASSIGN(options.credential, Credential::ForStatus(token_));
  EXPECT_THAT(
      HostConnection::Create(options, {"h0"}).status(),
      ::drover::testing::StatusIs(Status::Code::kInvalidArgument, HasSubstr("not the status key")));
  options.credential = Credential::Cluster(token_);
  EXPECT_THAT(
      HostConnection::Create(options, {"h0", "h0"}).status(),
      ::drover::testing::StatusIs(Status::Code::kInvalidArgument, HasSubstr("h0 is twice")));
  options.address = "etcd://127.0.0.1:2379/run";
  EXPECT_THAT(
      HostConnection::Create(options, {"h0"}).status(),
      ::drover::testing::StatusIs(Status::Code::kInvalidArgument, HasSubstr("through etcd")));
  // An agent whose id the connection was not made for fails before connecting.
  options.address = "127.0.0.1:" + std::to_string(server_->port());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<HostConnection> host,
                       HostConnection::Create(options, {"h0"}));
  AgentOptions stranger = NodeOptions(host, "h9", "echo never");
  EXPECT_EQ(Agent(stranger, ProcessEnvironment()).Run(), 1);
  EXPECT_THAT(ReadFile(dir_.File("h9.err")), HasSubstr("not made for executor h9"));
}

}  // namespace
}  // namespace drover

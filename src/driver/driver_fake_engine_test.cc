// The driver's logic with agents that are threads speaking the real
// rendezvous protocol (testing/fake_engine.h): formation, tagged output and
// logs, stopping the ps once the workers are done, a failing node, restarts,
// a node that never comes, a node whose connection drops, a stop request.
// No process is started; the CLI tests run the same paths with real agents.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "driver/driver.h"
#include "testing/fake_engine.h"

namespace drover {
namespace {

using ::drover::testing::FakeEngine;
using ::drover::testing::FakeNodeRecord;
using ::drover::testing::FakeNodeScript;
using ::testing::HasSubstr;
using ::testing::Not;

DriverOptions Options(int nodes, int ps, const std::string& test) {
  DriverOptions options;
  options.cluster.num_nodes = nodes;
  options.cluster.num_ps = ps;
  options.command = {"train"};
  options.log_dir = ::testing::TempDir() + "/driver-fake-" + test;
  std::filesystem::remove_all(options.log_dir);
  options.grace = Milliseconds(1'000);
  return options;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const FakeNodeRecord* Find(const std::vector<FakeNodeRecord>& nodes, const std::string& job,
                           int index, int round = 0) {
  for (const FakeNodeRecord& node : nodes) {
    if (node.job_name == job && node.task_index == index && node.round == round) return &node;
  }
  return nullptr;
}

// A script where executor `index` does `special` and every other node runs
// until the driver stops it.
testing::FakeScriptFunction OneNodeDoes(int index, FakeNodeScript special) {
  return [index, special](int executor, int) {
    if (executor == index) return special;
    FakeNodeScript others;
    others.runs_until_stop = true;
    return others;
  };
}

TEST(DriverFakeEngineTest, FormsTagsOutputAndStopsThePsWhenTheWorkersAreDone) {
  DriverOptions options = Options(3, 1, "forms");
  FakeEngine engine([](int index, int) {
    FakeNodeScript script;
    if (index == 0) {
      script.runs_until_stop = true;  // slot 0 is the ps
      script.lines = {"ps serving"};
    } else {
      script.lines = {"hello from executor " + std::to_string(index)};
    }
    return script;
  });
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 0) << err.str();

  EXPECT_THAT(out.str(), HasSubstr("[worker:0] hello from executor 1"));
  EXPECT_THAT(out.str(), HasSubstr("[worker:1] hello from executor 2"));
  EXPECT_THAT(out.str(), HasSubstr("[ps:0] ps serving"));
  EXPECT_THAT(ReadFile(options.log_dir + "/worker-1.log"), HasSubstr("hello from executor 2"));
  const std::vector<FakeNodeRecord> nodes = engine.nodes();
  ASSERT_EQ(nodes.size(), 3u);
  const FakeNodeRecord* ps = Find(nodes, "ps", 0);
  ASSERT_NE(ps, nullptr);
  EXPECT_TRUE(ps->stopped) << "the ps ends by the driver's STOP, not a signal";
  for (const FakeNodeRecord& node : nodes) {
    EXPECT_EQ(node.error, "") << node.executor_id;
    EXPECT_FALSE(node.signal.has_value()) << node.executor_id;
    EXPECT_THAT(node.argv, ::testing::Contains("--executor-id"));
  }
}

TEST(DriverFakeEngineTest, FailingWorkerEndsTheRunNamingItsLastLinesAndStopsTheOthers) {
  DriverOptions options = Options(2, 0, "fails");
  FakeNodeScript failing;
  failing.lines = {"loading", "out of memory"};
  failing.exit_code = 3;
  FakeEngine engine(OneNodeDoes(1, failing));
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 1);

  EXPECT_THAT(err.str(), HasSubstr("worker:1"));
  EXPECT_THAT(err.str(), HasSubstr("exit code 3"));
  EXPECT_THAT(err.str(), HasSubstr("out of memory"));
  const std::vector<FakeNodeRecord> nodes = engine.nodes();
  const FakeNodeRecord* survivor = Find(nodes, "worker", 0);
  ASSERT_NE(survivor, nullptr);
  EXPECT_TRUE(survivor->stopped || survivor->signal.has_value())
      << "worker:0 kept running after worker:1 failed";
}

TEST(DriverFakeEngineTest, RestartReformsTheWholeGroupWithTheNextRoundNumber) {
  DriverOptions options = Options(2, 0, "restarts");
  options.max_restarts = 1;
  FakeEngine engine([](int index, int round) {
    FakeNodeScript script;
    script.lines = {"round " + std::to_string(round)};
    if (round == 0 && index == 1) script.exit_code = 7;
    return script;
  });
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 0) << err.str();

  EXPECT_THAT(err.str(), HasSubstr("re-forming the group (restart 1 of 1)"));
  const std::vector<FakeNodeRecord> nodes = engine.nodes();
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_NE(Find(nodes, "worker", 0, 1), nullptr);
  EXPECT_NE(Find(nodes, "worker", 1, 1), nullptr);
  EXPECT_THAT(out.str(), HasSubstr("[worker:1] round 1"));
}

TEST(DriverFakeEngineTest, NodeThatNeverRegistersIsNamedWhenTheReservationTimesOut) {
  DriverOptions options = Options(3, 0, "never");
  options.reservation_timeout = Milliseconds(1'000);
  FakeEngine engine([](int index, int) {
    FakeNodeScript script;
    script.registers = index != 2;
    return script;
  });
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 1);

  EXPECT_THAT(err.str(), HasSubstr("2 of 3 nodes registered"));
  EXPECT_THAT(err.str(), HasSubstr("missing 1 (worker:2)"));
  for (const FakeNodeRecord& node : engine.nodes()) {
    EXPECT_EQ(node.job_name, "") << "executor " << node.executor_id << " formed a cluster";
  }
}

TEST(DriverFakeEngineTest, NodeWhoseConnectionDropsIsDeclaredLostAndSignalled) {
  DriverOptions options = Options(2, 0, "drops");
  FakeNodeScript dropping;
  dropping.drops_connection = true;
  FakeEngine engine(OneNodeDoes(1, dropping));
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 1);

  EXPECT_THAT(err.str(), HasSubstr("worker:1"));
  const std::vector<FakeNodeRecord> nodes = engine.nodes();
  const FakeNodeRecord* lost = Find(nodes, "worker", 1);
  ASSERT_NE(lost, nullptr);
  EXPECT_TRUE(lost->signal.has_value()) << "the lost node's agent was never signalled";
}

TEST(DriverFakeEngineTest, TheNodesHeartbeatAtTheRunsInterval) {
  DriverOptions options = Options(2, 0, "heartbeat");
  options.heartbeat_interval = Milliseconds(250);
  FakeEngine engine([](int, int) { return FakeNodeScript{}; });
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 0) << err.str();
  const std::vector<FakeNodeRecord> nodes = engine.nodes();
  ASSERT_EQ(nodes.size(), 2u);
  for (const FakeNodeRecord& node : nodes) {
    EXPECT_EQ(node.heartbeat_interval, Milliseconds(250)) << node.executor_id;
  }
}

TEST(DriverFakeEngineTest, StopRequestStopsEveryNodeAndSaysSo) {
  DriverOptions options = Options(2, 0, "stop");
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(stop_fd, 0);
  options.stop_fd = stop_fd;
  options.on_formed = [stop_fd](const FormedCluster&) {
    const uint64_t one = 1;
    ASSERT_EQ(::write(stop_fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  };
  FakeEngine engine([](int, int) {
    FakeNodeScript script;
    script.runs_until_stop = true;
    return script;
  });
  std::ostringstream out, err;
  const int code = Driver(options, engine, out, err).Run();
  ::close(stop_fd);

  EXPECT_NE(code, 0);
  EXPECT_THAT(err.str(), HasSubstr("stop requested"));
  EXPECT_THAT(err.str(), Not(HasSubstr("failed")));
  for (const FakeNodeRecord& node : engine.nodes()) {
    EXPECT_TRUE(node.stopped || node.signal.has_value()) << "executor " << node.executor_id;
  }
}

// scancel (or a pod's eviction) sends SIGTERM to the driver and to every
// node at once; a node may end first. The run was stopped, not failed: the
// driver's exit status is the signal's, and nothing restarts.
TEST(DriverFakeEngineTest, NodeEndedBySigtermThenTheDriverIsAStopNotAFailure) {
  DriverOptions options = Options(2, 0, "outside-stop");
  options.max_restarts = 1;
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(stop_fd, 0);
  options.stop_fd = stop_fd;
  FakeNodeScript terminated;
  terminated.exit_code = 128 + SIGTERM;
  terminated.once_exit_seen = [stop_fd] {
    const uint64_t one = 1;
    ASSERT_EQ(::write(stop_fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  };
  FakeEngine engine(OneNodeDoes(1, terminated));
  std::ostringstream out, err;
  const int code = Driver(options, engine, out, err).Run();
  ::close(stop_fd);

  EXPECT_EQ(code, 128 + SIGTERM) << err.str();
  EXPECT_THAT(err.str(), HasSubstr("stop requested"));
  EXPECT_THAT(err.str(), Not(HasSubstr("re-forming")));
  for (const FakeNodeRecord& node : engine.nodes()) EXPECT_EQ(node.round, 0);
}

// Without the driver's own signal, a node's SIGTERM is a failure like any
// other (an OOM killer's, an operator's): reported, and restarted.
TEST(DriverFakeEngineTest, NodeEndedBySigtermAloneIsAFailure) {
  DriverOptions options = Options(2, 0, "sigterm-alone");
  FakeNodeScript terminated;
  terminated.exit_code = 128 + SIGTERM;
  FakeEngine engine(OneNodeDoes(1, terminated));
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 1);
  EXPECT_THAT(err.str(), HasSubstr("exit code 143"));
}

}  // namespace
}  // namespace drover

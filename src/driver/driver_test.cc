#include "driver/driver.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "engine/local_engine.h"

namespace drover {
namespace {

TEST(DriverTest, PlanNamesRolesAndRanks) {
  DriverOptions options;
  options.cluster.num_nodes = 3;
  options.cluster.num_ps = 1;
  options.command = {"python3", "train.py"};
  LocalEngine engine({});
  std::ostringstream out, err;
  Driver(options, engine, out, err).PrintPlan(out);
  std::string plan = out.str();
  EXPECT_NE(plan.find("ps:0  executor 0"), std::string::npos) << plan;
  EXPECT_NE(plan.find("worker:1  executor 2"), std::string::npos) << plan;
  EXPECT_NE(plan.find("RANK=1 WORLD_SIZE=2"), std::string::npos) << plan;
  EXPECT_NE(plan.find("python3 train.py"), std::string::npos) << plan;
}

TEST(DriverTest, BadTemplateIsBadInput) {
  DriverOptions options;
  options.cluster.num_nodes = 1;
  options.cluster.num_ps = 2;
  options.command = {"true"};
  LocalEngine engine({});
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 2);
  EXPECT_NE(err.str().find("cannot hold"), std::string::npos);
}

// An engine whose launcher outlives its agent (an ssh or srun stuck on its
// way out): sh runs the agent, then sleeps.
class LingeringLauncherEngine : public LocalEngine {
 public:
  LingeringLauncherEngine() : LocalEngine({}) {}
  Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) override {
    std::vector<std::string> argv = {"sh", "-c", "\"$0\" \"$@\"; exec sleep 300"};
    argv.insert(argv.end(), launch.argv.begin(), launch.argv.end());
    return SpawnProcessGroup("executor " + launch.executor_id, argv, true, SIGTERM);
  }
};

TEST(DriverTest, LauncherThatOutlivesItsFinishedAgentIsStopped) {
  Result<std::string> self = SelfExecutable();
  ASSERT_TRUE(self.ok());
  DriverOptions options;
  options.cluster.num_nodes = 2;
  options.command = {"true"};
  options.agent_binary = std::filesystem::path(*self).parent_path() / "drover";
  options.log_dir = ::testing::TempDir() + "/lingering-launcher";
  options.launcher_exit_wait = Milliseconds(500);
  LingeringLauncherEngine engine;
  std::ostringstream out, err;
  EXPECT_EQ(Driver(options, engine, out, err).Run(), 0) << err.str();
  EXPECT_NE(err.str().find("worker:1's agent finished 0.5 s ago, but its local launcher"),
            std::string::npos)
      << err.str();
}

}  // namespace
}  // namespace drover

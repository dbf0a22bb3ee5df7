#include "drover/framework_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::Not;

ClusterSpec TwoHostCluster() {
  ClusterSpec spec;
  EXPECT_OK(spec.AddJob("chief", {"h1:2000"}));
  EXPECT_OK(spec.AddJob("worker", {"h1:2001", "h2:2000", "h2:2001"}));
  EXPECT_OK(spec.AddJob("ps", {"h3:2000"}));
  return spec;
}

TEST(MakeTfConfigTest, HasClusterTaskAndCloudEnvironmentWithChief) {
  ASSERT_OK_AND_ASSIGN(std::string text, MakeTfConfig(TwoHostCluster(), "worker", 2, "grpc"));
  auto config = nlohmann::json::parse(text);
  EXPECT_EQ(config["cluster"]["worker"][2], "h2:2001");
  EXPECT_EQ(config["cluster"]["chief"][0], "h1:2000");
  EXPECT_EQ(config["task"]["type"], "worker");
  EXPECT_EQ(config["task"]["index"], 2);
  EXPECT_EQ(config["environment"], "cloud");
  EXPECT_EQ(config["rpc_layer"], "grpc");
}

TEST(MakeTfConfigTest, NoEnvironmentWithoutChiefOrMaster) {
  ClusterSpec spec;
  ASSERT_OK(spec.AddJob("worker", {"a:1", "b:1"}));
  ASSERT_OK_AND_ASSIGN(std::string text, MakeTfConfig(spec, "worker", 0));
  auto config = nlohmann::json::parse(text);
  EXPECT_FALSE(config.contains("environment"));
  EXPECT_FALSE(config.contains("rpc_layer"));
}

TEST(MakeTfConfigTest, SparseJobsStaySparse) {
  ClusterSpec spec;
  ASSERT_OK(spec.AddSparseJob("worker", {{1, "b:1"}, {3, "d:1"}}));
  ASSERT_OK_AND_ASSIGN(std::string text, MakeTfConfig(spec, "worker", 3));
  auto config = nlohmann::json::parse(text);
  EXPECT_EQ(config["cluster"]["worker"]["3"], "d:1");
}

TEST(MakeTfConfigTest, UnknownTaskIsAnError) {
  EXPECT_THAT(MakeTfConfig(TwoHostCluster(), "evaluator", 0),
              StatusIs(Status::Code::kNotFound, HasSubstr("evaluator")));
  EXPECT_THAT(MakeTfConfig(TwoHostCluster(), "worker", 9),
              StatusIs(Status::Code::kNotFound, HasSubstr("9")));
}

TEST(ComputeRankTest, ChiefIsRankZeroThenWorkersByIndex) {
  ClusterSpec spec = TwoHostCluster();
  ASSERT_OK_AND_ASSIGN(auto chief, ComputeRank(spec, "chief", 0));
  ASSERT_TRUE(chief.has_value());
  EXPECT_EQ(chief->rank, 0);
  EXPECT_EQ(chief->world_size, 4);
  EXPECT_EQ(chief->master_host, "h1");
  EXPECT_EQ(chief->master_port, 2000);

  ASSERT_OK_AND_ASSIGN(auto w2, ComputeRank(spec, "worker", 2));
  ASSERT_TRUE(w2.has_value());
  EXPECT_EQ(w2->rank, 3);
  EXPECT_EQ(w2->local_rank, 1);        // h2:2000 (worker 1) came first on h2
  EXPECT_EQ(w2->local_world_size, 2);  // two ranks on h2
  EXPECT_EQ(w2->group_rank, 1);        // h1 is node 0, h2 node 1
  EXPECT_EQ(w2->group_world_size, 2);  // ps's host h3 holds no rank
  EXPECT_EQ(w2->role_rank, 2);
  EXPECT_EQ(w2->role_world_size, 3);
}

TEST(ComputeRankTest, ParameterServersHaveNoRank) {
  ASSERT_OK_AND_ASSIGN(auto ps, ComputeRank(TwoHostCluster(), "ps", 0));
  EXPECT_FALSE(ps.has_value());
}

TEST(ComputeRankTest, BadAddressNamesTheTask) {
  ClusterSpec spec;
  ASSERT_OK(spec.AddJob("worker", {"a:1", "nohost"}));
  EXPECT_THAT(ComputeRank(spec, "worker", 0),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("worker:1")));
}

TEST(FrameworkEnvironmentTest, TorchVariablesMatchTorchrunNames) {
  ASSERT_OK_AND_ASSIGN(auto vars, FrameworkEnvironment(TwoHostCluster(), "worker", 0));
  EXPECT_EQ(vars["MASTER_ADDR"], "h1");
  EXPECT_EQ(vars["MASTER_PORT"], "2000");
  EXPECT_EQ(vars["RANK"], "1");
  EXPECT_EQ(vars["WORLD_SIZE"], "4");
  EXPECT_EQ(vars["LOCAL_RANK"], "1");
  EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(vars["GROUP_RANK"], "0");
  EXPECT_EQ(vars["ROLE_NAME"], "worker");
  EXPECT_EQ(vars["ROLE_RANK"], "0");
  EXPECT_EQ(vars["JAX_COORDINATOR_ADDRESS"], "h1:2000");
  EXPECT_EQ(vars["JAX_NUM_PROCESSES"], "4");
  EXPECT_EQ(vars["JAX_PROCESS_ID"], "1");
  EXPECT_EQ(vars["DROVER_JOB_NAME"], "worker");
  EXPECT_EQ(vars["DROVER_TASK_INDEX"], "0");
  EXPECT_EQ(nlohmann::json::parse(vars["TF_CONFIG"])["task"]["index"], 0);
  EXPECT_EQ(nlohmann::json::parse(vars["DROVER_CLUSTER_SPEC"])["ps"][0], "h3:2000");
}

TEST(FrameworkEnvironmentTest, PortOverridesAndFrameworkSwitches) {
  FrameworkEnvOptions options;
  options.master_port = 29500;
  options.jax_coordinator_port = 1234;
  options.tensorflow = false;
  ASSERT_OK_AND_ASSIGN(auto vars, FrameworkEnvironment(TwoHostCluster(), "chief", 0, options));
  EXPECT_EQ(vars["MASTER_PORT"], "29500");
  EXPECT_EQ(vars["JAX_COORDINATOR_ADDRESS"], "h1:1234");
  EXPECT_THAT(vars, Not(Contains(Key("TF_CONFIG"))));

  options = {};
  options.torch = false;
  options.jax = false;
  options.drover = false;
  ASSERT_OK_AND_ASSIGN(auto only_tf, FrameworkEnvironment(TwoHostCluster(), "chief", 0, options));
  EXPECT_EQ(only_tf.size(), 1u);
  EXPECT_THAT(only_tf, Contains(Key("TF_CONFIG")));
}

TEST(FrameworkEnvironmentTest, ParameterServerGetsTfConfigButNoRank) {
  ASSERT_OK_AND_ASSIGN(auto vars, FrameworkEnvironment(TwoHostCluster(), "ps", 0));
  EXPECT_THAT(vars, Contains(Key("TF_CONFIG")));
  EXPECT_THAT(vars, Not(Contains(Key("RANK"))));
  EXPECT_THAT(vars, Not(Contains(Key("MASTER_ADDR"))));
}

TEST(FrameworkEnvironmentTest, CustomTrainingJobsChangeRankOrder) {
  FrameworkEnvOptions options;
  options.training_jobs = {"worker", "chief"};
  ASSERT_OK_AND_ASSIGN(auto vars, FrameworkEnvironment(TwoHostCluster(), "chief", 0, options));
  EXPECT_EQ(vars["RANK"], "3");
  EXPECT_EQ(vars["MASTER_ADDR"], "h1");
  EXPECT_EQ(vars["MASTER_PORT"], "2001");  // worker 0 is rank 0 now
}

TEST(FrameworkEnvironmentTest, Ipv6CoordinatorIsBracketed) {
  ClusterSpec spec;
  ASSERT_OK(spec.AddJob("worker", {"[::1]:2000"}));
  ASSERT_OK_AND_ASSIGN(auto vars, FrameworkEnvironment(spec, "worker", 0));
  EXPECT_EQ(vars["MASTER_ADDR"], "::1");
  EXPECT_EQ(vars["JAX_COORDINATOR_ADDRESS"], "[::1]:2000");
}

TEST(FormatShellExportsTest, QuotesForPosixShells) {
  EXPECT_EQ(FormatShellExports({{"A", "x y"}, {"B", "it's"}}),
            "export A='x y'\nexport B='it'\\''s'\n");
}

}  // namespace
}  // namespace drover

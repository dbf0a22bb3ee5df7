#include "drover/torch_env_cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "drover/environment.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Optional;

using Vars = std::map<std::string, std::string>;

Vars Torchrun(int rank, int world, int local_rank, int local_world) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
          {"GROUP_RANK", std::to_string(rank / local_world)},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"}};
}

TEST(TorchEnvClusterResolverTest, NonZeroRankIsASparseJobOfMasterAndSelf) {
  MapEnvironment env(Torchrun(3, 4, 1, 2), "node1");
  ASSERT_OK_AND_ASSIGN(auto resolver, TorchEnvClusterResolver::Create({}, env));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  ClusterSpec expected;
  ASSERT_OK(expected.AddSparseJob("worker", {{0, "node0:29500"}, {3, "node1:8889"}}));
  EXPECT_EQ(spec, expected);
  EXPECT_FALSE(spec.is_dense("worker"));
  EXPECT_THAT(resolver->task_type(), Optional(std::string("worker")));
  EXPECT_THAT(resolver->task_id(), Optional(3));
  EXPECT_EQ(resolver->master().value_or(""), "grpc://node1:8889");
  EXPECT_EQ(resolver->master("worker", 0, std::nullopt).value_or(""), "grpc://node0:29500");
  EXPECT_EQ(resolver->world_size().value_or(0), 4);
  EXPECT_EQ(resolver->local_rank().value_or(-1), 1);
  EXPECT_EQ(resolver->local_world_size().value_or(0), 2);
  EXPECT_EQ(resolver->group_rank().value_or(std::nullopt), std::optional<int>(1));
  EXPECT_EQ(resolver->master_address().value_or(""), "node0:29500");
  EXPECT_THAT(resolver->master("worker", 1, std::nullopt),
              StatusIs(Status::Code::kNotFound, HasSubstr("No task with index 1")));
}

TEST(TorchEnvClusterResolverTest, RankZeroIsTheMaster) {
  MapEnvironment env(Torchrun(0, 2, 0, 1), "node0");
  TorchEnvClusterResolver::Options options;
  options.job_name = "trainer";
  options.rpc_layer = "";
  ASSERT_OK_AND_ASSIGN(auto resolver, TorchEnvClusterResolver::Create(options, env));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  ClusterSpec expected;
  ASSERT_OK(expected.AddSparseJob("trainer", {{0, "node0:29500"}}));
  EXPECT_EQ(spec, expected);
  EXPECT_EQ(resolver->master().value_or(""), "node0:29500");
}

TEST(TorchEnvClusterResolverTest, AcceleratorsAreTheEnvironmentsGpus) {
  MapEnvironment env(Torchrun(0, 1, 0, 1), "node0", /*gpus=*/4);
  ASSERT_OK_AND_ASSIGN(auto resolver, TorchEnvClusterResolver::Create({}, env));
  EXPECT_EQ(resolver->num_accelerators().value_or(AcceleratorMap{}), (AcceleratorMap{{"GPU", 4}}));
}

TEST(TorchEnvClusterResolverTest, EnvironmentIsReadOnEveryCallAndOverridesWin) {
  MapEnvironment env(Torchrun(1, 2, 0, 1), "b");
  ASSERT_OK_AND_ASSIGN(auto resolver, TorchEnvClusterResolver::Create({}, env));
  env.Set("MASTER_ADDR", "10.0.0.9");
  env.Set("MASTER_PORT", "1234");
  EXPECT_EQ(resolver->master("worker", 0, "grpc").value_or(""), "grpc://10.0.0.9:1234");
  resolver->set_task_id(0);
  resolver->set_rpc_layer("ab");
  EXPECT_EQ(resolver->master().value_or(""), "ab://10.0.0.9:1234");
  env.Set("MASTER_ADDR", "fe80::1");
  EXPECT_EQ(resolver->master().value_or(""), "ab://[fe80::1]:1234");
}

TEST(TorchEnvClusterResolverTest, LocalVariablesDefaultTogether) {
  MapEnvironment env(
      Vars{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}}, "h");
  ASSERT_OK_AND_ASSIGN(auto resolver, TorchEnvClusterResolver::Create({}, env));
  EXPECT_EQ(resolver->local_rank().value_or(-1), 0);
  EXPECT_EQ(resolver->local_world_size().value_or(-1), 1);
  EXPECT_EQ(resolver->group_rank().value_or(1), std::nullopt);
  EXPECT_EQ(resolver->master().value_or(""), "grpc://h:8888");
  env.Set("LOCAL_RANK", "0");
  EXPECT_THAT(resolver->cluster_spec(),
              StatusIs(Status::Code::kNotFound,
                       HasSubstr("LOCAL_WORLD_SIZE is not set but LOCAL_RANK is")));
}

TEST(TorchEnvClusterResolverTest, MissingVariablesAreNamed) {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    Vars vars = Torchrun(1, 2, 0, 1);
    vars.erase(name);
    MapEnvironment env(vars);
    EXPECT_THAT(TorchEnvClusterResolver::Create({}, env),
                StatusIs(Status::Code::kNotFound, HasSubstr(std::string(name) + " is not set")))
        << name;
  }
}

TEST(TorchEnvClusterResolverTest, GarbledVariablesAreNamed) {
  struct Case {
    const char* name;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"RANK", "abc", "RANK=abc is not an integer"},
      {"RANK", "5", "RANK=5 must be < WORLD_SIZE=2"},
      {"RANK", "-1", "RANK=-1 must be >= 0"},
      {"WORLD_SIZE", "0", "WORLD_SIZE=0 must be >= 1"},
      {"LOCAL_RANK", "1", "LOCAL_RANK=1 must be < LOCAL_WORLD_SIZE=1"},
      {"LOCAL_RANK", "x", "LOCAL_RANK=x is not an integer"},
      {"LOCAL_WORLD_SIZE", "3", "LOCAL_WORLD_SIZE=3 must be <= WORLD_SIZE=2"},
      {"GROUP_RANK", "g", "GROUP_RANK=g is not an integer"},
      {"MASTER_PORT", "http", "MASTER_PORT=http is not an integer"},
      {"MASTER_PORT", "70000", "MASTER_PORT=70000 must be <= 65535"},
      {"MASTER_PORT", "0", "MASTER_PORT=0 must be >= 1"},
      {"MASTER_ADDR", "", "MASTER_ADDR is empty"},
      {"MASTER_ADDR", "tcp://x", "MASTER_ADDR=tcp://x is not a host name"},
  };
  for (const Case& c : cases) {
    Vars vars = Torchrun(1, 2, 0, 1);
    vars[c.name] = c.value;
    MapEnvironment env(vars);
    EXPECT_THAT(TorchEnvClusterResolver::Create({}, env),
                StatusIs(Status::Code::kInvalidArgument, HasSubstr(c.message)))
        << c.name << "=" << c.value;
  }
}

TEST(TorchEnvClusterResolverTest, BadOptions) {
  MapEnvironment env(Torchrun(1, 2, 1, 2));
  TorchEnvClusterResolver::Options options;
  options.job_name = "";
  EXPECT_THAT(TorchEnvClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("job_name")));
  options.job_name = "worker";
  options.port_base = 65535;
  EXPECT_THAT(TorchEnvClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("port_base + LOCAL_RANK=65536")));
  options.port_base = -5;
  EXPECT_THAT(TorchEnvClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("port_base=-5")));
}

TEST(TorchEnvClusterResolverTest, UnreadableEnvironmentGivesNoTask) {
  MapEnvironment env(Torchrun(1, 2, 0, 1));
  ASSERT_OK_AND_ASSIGN(auto resolver, TorchEnvClusterResolver::Create({}, env));
  env.Unset("RANK");
  EXPECT_EQ(resolver->task_type(), std::nullopt);
  EXPECT_EQ(resolver->task_id(), std::nullopt);
  EXPECT_EQ(resolver->master().value_or("error"), "");
}

}  // namespace
}  // namespace drover

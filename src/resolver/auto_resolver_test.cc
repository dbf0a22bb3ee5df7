#include "drover/auto_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kTfConfig[] =
    R"({"cluster": {"worker": ["w0:1", "w1:1"]}, "task": {"type": "worker", "index": 1}})";

std::map<std::string, std::string> TorchVars() {
  return {{"RANK", "1"},        {"WORLD_SIZE", "2"},
          {"LOCAL_RANK", "1"},  {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29500"}};
}

std::map<std::string, std::string> SlurmVars() {
  return {{"SLURM_PROCID", "1"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_NODELIST", "n[1-2]"},
          {"SLURM_JOB_NODELIST", "n[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_TASKS_PER_NODE", "1(x2)"}};
}

std::string Detected(std::map<std::string, std::string> vars) {
  MapEnvironment env(std::move(vars));
  auto choice = MakeClusterResolver("auto", env);
  if (!choice.ok()) return choice.status().ToString();
  return choice->kind;
}

TEST(AutoResolverTest, FindsEachSource) {
  EXPECT_EQ(Detected({{"TF_CONFIG", kTfConfig}}), "tfconfig");
  EXPECT_EQ(Detected(TorchVars()), "torch");
  EXPECT_EQ(Detected(SlurmVars()), "slurm");
  EXPECT_EQ(
      Detected({{"JOB_COMPLETION_INDEX", "0"}, {"DROVER_NUM_TASKS", "1"}, {"HOSTNAME", "train-0"}}),
      "k8s");
}

TEST(AutoResolverTest, LaunchersWinOverTheSlurmAllocationAroundThem) {
  auto vars = SlurmVars();
  for (const auto& [name, value] : TorchVars()) vars[name] = value;
  EXPECT_EQ(Detected(vars), "torch");

  vars = SlurmVars();
  vars["OMPI_COMM_WORLD_RANK"] = "0";
  vars["OMPI_COMM_WORLD_SIZE"] = "1";
  vars["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  vars["OMPI_COMM_WORLD_LOCAL_SIZE"] = "1";
  MapEnvironment env(vars);
  auto choice = MakeClusterResolver("auto", env);
  ASSERT_OK(choice);
  EXPECT_EQ(choice->kind, "mpi");
}

TEST(AutoResolverTest, TfConfigWinsOverEverything) {
  auto vars = TorchVars();
  vars["TF_CONFIG"] = kTfConfig;
  EXPECT_EQ(Detected(vars), "tfconfig");
}

TEST(AutoResolverTest, EmptyTfConfigDoesNotCount) {
  auto vars = TorchVars();
  vars["TF_CONFIG"] = "";
  EXPECT_EQ(Detected(vars), "torch");
}

TEST(AutoResolverTest, NothingFoundListsWhatWasChecked) {
  MapEnvironment env;
  EXPECT_THAT(MakeClusterResolver("auto", env),
              StatusIs(Status::Code::kNotFound,
                       AllOf(HasSubstr("TF_CONFIG"), HasSubstr("SLURM_PROCID"),
                             HasSubstr("OMPI_COMM_WORLD_RANK"), HasSubstr("JOB_COMPLETION_INDEX"),
                             HasSubstr("DROVER_RESOURCE_SPEC"))));
}

TEST(AutoResolverTest, UnknownNameIsInvalid) {
  MapEnvironment env;
  EXPECT_THAT(MakeClusterResolver("zookeeper", env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("zookeeper")));
}

TEST(AutoResolverTest, StaticTakesAClusterDict) {
  MapEnvironment env;
  ASSERT_OK_AND_ASSIGN(ResolverChoice choice,
                       MakeClusterResolver(R"(static={"worker": ["a:1", "b:2"]})", env));
  EXPECT_EQ(choice.kind, "static");
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, choice.resolver->cluster_spec());
  EXPECT_EQ(*spec.task_address("worker", 1), "b:2");
  EXPECT_EQ(choice.resolver->task_type(), std::nullopt);
}

TEST(AutoResolverTest, StaticTakesATfConfigShapedObject) {
  MapEnvironment env;
  ASSERT_OK_AND_ASSIGN(ResolverChoice choice,
                       MakeClusterResolver(std::string("static=") + kTfConfig, env));
  EXPECT_EQ(choice.resolver->task_type(), "worker");
  EXPECT_EQ(choice.resolver->task_id(), 1);
  EXPECT_EQ(*choice.resolver->master("worker", 1, std::nullopt), "w1:1");
  EXPECT_EQ(*choice.resolver->master(), "");  // SimpleClusterResolver: no master given
}

TEST(AutoResolverTest, StaticRejectsMalformedJson) {
  MapEnvironment env;
  EXPECT_THAT(MakeClusterResolver("static={oops", env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("static")));
  EXPECT_THAT(MakeClusterResolver(R"(static={"worker": 3})", env),
              StatusIs(Status::Code::kWrongType, HasSubstr("static")));
}

TEST(AutoResolverTest, NamedResolverReportsItsOwnErrors) {
  MapEnvironment env(
      {{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}});
  EXPECT_THAT(MakeClusterResolver("torch", env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("RANK")));
}

TEST(AutoResolverTest, ResourceSpecFromEnvironmentNamesTheFile) {
  MapEnvironment env(
      std::map<std::string, std::string>{{"DROVER_RESOURCE_SPEC", "/nonexistent/drover-spec.yml"}});
  auto choice = MakeClusterResolver("auto", env);
  ASSERT_FALSE(choice.ok());
  EXPECT_THAT(choice.status().message(), HasSubstr("/nonexistent/drover-spec.yml"));
}

}  // namespace
}  // namespace drover

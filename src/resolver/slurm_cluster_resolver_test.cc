#include "drover/slurm_cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

using Options = SlurmClusterResolver::Options;

std::unique_ptr<SlurmClusterResolver> MustCreate(Options options, Environment& env) {
  Result<std::unique_ptr<SlurmClusterResolver>> resolver =
      SlurmClusterResolver::Create(std::move(options), env);
  EXPECT_OK(resolver);
  return resolver.ok() ? std::move(resolver).value() : nullptr;
}

ClusterSpec Spec(std::map<std::string, std::vector<std::string>> jobs) {
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) EXPECT_OK(spec.AddJob(name, tasks));
  return spec;
}

// TensorFlow's testSimpleRetrievalFromEnv: everything from the environment.
TEST(SlurmClusterResolverTest, SimpleRetrievalFromEnv) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
                      {"CUDA_VISIBLE_DEVICES", "0"}});
  auto resolver = MustCreate({}, env);
  ASSERT_NE(resolver, nullptr);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  EXPECT_EQ(spec, Spec({{"worker", {"t02n13:8888", "t02n41:8888", "t02n43:8888"}}}));
  ASSERT_OK_AND_ASSIGN(std::string master, resolver->master("worker", 0, "grpc"));
  EXPECT_EQ(master, "grpc://t02n13:8888");
  ASSERT_OK_AND_ASSIGN(AcceleratorMap accelerators, resolver->num_accelerators());
  EXPECT_EQ(accelerators, (AcceleratorMap{{"GPU", 1}}));
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "0");
}

// TensorFlow's testSimpleSuccessfulRetrieval.
TEST(SlurmClusterResolverTest, SimpleSuccessfulRetrieval) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}});
  Options options;
  options.jobs = {{"ps", 1}, {"worker", 2}};
  options.tasks_per_node = 1;
  options.gpus_per_node = 1;
  options.gpus_per_task = 1;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  EXPECT_EQ(spec, Spec({{"ps", {"t02n13:8888"}}, {"worker", {"t02n41:8888", "t02n43:8888"}}}));
  EXPECT_FALSE(env.Get("CUDA_VISIBLE_DEVICES").has_value());
}

// TensorFlow's testSimpleMasterRetrieval: task and rpc_layer overrides.
TEST(SlurmClusterResolverTest, SimpleMasterRetrieval) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}});
  Options options;
  options.jobs = {{"ps", 1}, {"worker", 2}};
  options.tasks_per_node = 1;
  options.gpus_per_node = 1;
  options.gpus_per_task = 1;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  resolver->set_task_type("worker");
  resolver->set_task_id(1);
  EXPECT_EQ(resolver->master().value_or(""), "grpc://t02n43:8888");
  resolver->set_rpc_layer("ab");
  EXPECT_EQ(resolver->master("ps", 0, std::nullopt).value_or(""), "ab://t02n13:8888");
  EXPECT_EQ(resolver->master("ps", 0, "test").value_or(""), "test://t02n13:8888");
  // An empty rpc_layer argument falls back, as TensorFlow's `or` does.
  EXPECT_EQ(resolver->master("ps", 0, "").value_or(""), "ab://t02n13:8888");
  // Back to the source's values.
  resolver->set_task_type(std::nullopt);
  resolver->set_task_id(std::nullopt);
  EXPECT_EQ(resolver->master().value_or(""), "ab://t02n13:8888");
  EXPECT_THAT(resolver->master("chief", 0, std::nullopt),
              StatusIs(Status::Code::kNotFound, HasSubstr("chief")));
}

// TensorFlow's testTaskPerNodeNotSetRetrieval.
TEST(SlurmClusterResolverTest, TasksPerNodeFromEnvironment) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}});
  Options options;
  options.jobs = {{"ps", 1}, {"worker", 2}};
  options.gpus_per_node = 1;
  options.gpus_per_task = 1;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"ps", {"t02n13:8888"}}, {"worker", {"t02n41:8888", "t02n43:8888"}}}));
}

// TensorFlow's testMultiTaskPerNodeRetrieval: heterogeneous nodes.
TEST(SlurmClusterResolverTest, MultiTaskPerNode) {
  MapEnvironment env({{"SLURM_PROCID", "1"},
                      {"SLURM_STEP_NUM_TASKS", "5"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
                      {"CUDA_VISIBLE_DEVICES", ""}});
  Options options;
  options.jobs = {{"ps", 1}, {"worker", 4}};
  options.gpus_per_node = 2;
  options.gpus_per_task = 1;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"ps", {"t02n13:8888"}},
                  {"worker", {"t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"}}}));
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(resolver->get_task_info(),
            std::make_pair(std::optional<std::string>("worker"), std::optional<int>(0)));
}

// TensorFlow's testMultipleGpusPerTaskRetrieval.
TEST(SlurmClusterResolverTest, MultipleGpusPerTask) {
  MapEnvironment env({{"SLURM_PROCID", "1"},
                      {"SLURM_STEP_NUM_TASKS", "5"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                      {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
                      {"CUDA_VISIBLE_DEVICES", ""}});
  Options options;
  options.jobs = {{"ps", 1}, {"worker", 4}};
  options.gpus_per_node = 4;
  options.gpus_per_task = 2;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  ASSERT_OK(resolver->cluster_spec());
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "2,3");
  ASSERT_OK_AND_ASSIGN(AcceleratorMap accelerators, resolver->num_accelerators());
  EXPECT_EQ(accelerators, (AcceleratorMap{{"GPU", 2}}));
}

// TensorFlow sorts hosts as strings; Slurm places ranks in nodelist order.
TEST(SlurmClusterResolverTest, RanksFollowTheNodelistNotStringOrder) {
  MapEnvironment env({{"SLURM_PROCID", "2"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                      {"SLURM_STEP_NODELIST", "n[2,9-10]"}});
  Options options;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"n2:8888", "n9:8888", "n10:8888"}}}));
  EXPECT_THAT(resolver->task_id(), Optional(2));
  EXPECT_EQ(resolver->master().value_or(""), "grpc://n10:8888");
}

TEST(SlurmClusterResolverTest, GpusAreTakenFromTheVisibleDevices) {
  // Slurm gave this task physical GPUs 4-7; tasks get subsets of them.
  MapEnvironment env({{"SLURM_PROCID", "1"},
                      {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2"},
                      {"SLURM_STEP_NODELIST", "gpu01"},
                      {"CUDA_VISIBLE_DEVICES", "4,5,6,7"}});
  auto resolver = MustCreate({}, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->gpus_per_node(), 4);
  EXPECT_EQ(resolver->gpus_per_task(), 2);
  ASSERT_OK(resolver->cluster_spec());
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "6,7");
  // Read once: a second call does not narrow the list again.
  ASSERT_OK(resolver->cluster_spec());
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "6,7");
  ASSERT_OK_AND_ASSIGN(auto placements, resolver->Placement());
  EXPECT_THAT(placements[0].gpus, ElementsAre("4", "5"));
  EXPECT_THAT(placements[1].gpus, ElementsAre("6", "7"));
}

TEST(SlurmClusterResolverTest, GpusPerNodeDefaultsFromSlurmThenTheHost) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "1"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1"},
                      {"SLURM_STEP_NODELIST", "a"},
                      {"SLURM_STEP_GPUS", "2,3"}},
                     "a", /*gpus=*/8);
  EXPECT_EQ(MustCreate({}, env)->gpus_per_node(), 2);
  env.Unset("SLURM_STEP_GPUS");
  env.Set("SLURM_JOB_GPUS", "0,1,2");
  EXPECT_EQ(MustCreate({}, env)->gpus_per_node(), 3);
  env.Unset("SLURM_JOB_GPUS");
  env.Set("SLURM_GPUS_ON_NODE", "5");
  EXPECT_EQ(MustCreate({}, env)->gpus_per_node(), 5);
  env.Unset("SLURM_GPUS_ON_NODE");
  EXPECT_EQ(MustCreate({}, env)->gpus_per_node(), 8);
  env.Set("SLURM_GPUS_ON_NODE", "many");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("SLURM_GPUS_ON_NODE=many")));
}

// TensorFlow divides by zero here; we give the task no GPUs and hide them.
TEST(SlurmClusterResolverTest, ZeroGpusPerTaskHidesAllGpus) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2"},
                      {"SLURM_STEP_NODELIST", "a"}},
                     "a", /*gpus=*/1);
  auto resolver = MustCreate({}, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->gpus_per_task(), 0);
  ASSERT_OK(resolver->cluster_spec());
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "");
  ASSERT_OK_AND_ASSIGN(AcceleratorMap accelerators, resolver->num_accelerators());
  EXPECT_TRUE(accelerators.empty());

  Options explicit_zero;
  explicit_zero.gpus_per_node = 4;
  explicit_zero.gpus_per_task = 0;
  env.Set("CUDA_VISIBLE_DEVICES", "0,1,2,3");
  auto zero = MustCreate(explicit_zero, env);
  ASSERT_NE(zero, nullptr);
  ASSERT_OK(zero->cluster_spec());
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "");
}

TEST(SlurmClusterResolverTest, JobLevelVariablesWhenNotInAStep) {
  MapEnvironment env({{"SLURM_PROCID", "3"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_TASKS_PER_NODE", "2(x2)"},
                      {"SLURM_JOB_NODELIST", "c[1-2]"}});
  Options options;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"c1:8888", "c1:8889", "c2:8888", "c2:8889"}}}));
  EXPECT_THAT(resolver->task_id(), Optional(3));
}

TEST(SlurmClusterResolverTest, CyclicAndPlaneDistributions) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "5"},
                      {"SLURM_STEP_TASKS_PER_NODE", "3,2"},
                      {"SLURM_STEP_NODELIST", "a,b"},
                      {"SLURM_DISTRIBUTION", "cyclic:block"}});
  Options options;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"a:8888", "b:8888", "a:8889", "b:8889", "a:8890"}}}));
  env.Set("SLURM_DISTRIBUTION", "plane=2");
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"a:8888", "a:8889", "b:8888", "b:8889", "a:8890"}}}));
  env.Set("SLURM_DISTRIBUTION", "plane");
  env.Set("SLURM_DIST_PLANESIZE", "3");
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"a:8888", "a:8889", "a:8890", "b:8888", "b:8889"}}}));
  env.Unset("SLURM_DIST_PLANESIZE");
  EXPECT_THAT(resolver->cluster_spec(),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("SLURM_DIST_PLANESIZE")));
  env.Set("SLURM_DISTRIBUTION", "plane=0");
  EXPECT_THAT(resolver->cluster_spec(),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("must be >= 1")));
  env.Set("SLURM_DISTRIBUTION", "arbitrary");
  EXPECT_THAT(resolver->cluster_spec(), StatusIs(Status::Code::kInvalidArgument,
                                                 AllOf(HasSubstr("SLURM_DISTRIBUTION=arbitrary"),
                                                       HasSubstr("tasks_per_host"))));
  env.Set("SLURM_DISTRIBUTION", "block");
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"a:8888", "a:8889", "a:8890", "b:8888", "b:8889"}}}));
}

TEST(SlurmClusterResolverTest, ExplicitTasksPerHost) {
  MapEnvironment env(std::map<std::string, std::string>{{"SLURM_PROCID", "2"}});
  Options options;
  options.tasks_per_host = {{"z", 1}, {"a", 2}};
  options.jobs = {{"chief", 1}, {"worker", 2}};
  options.gpus_per_node = 0;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"chief", {"z:8888"}}, {"worker", {"a:8888", "a:8889"}}}));
  EXPECT_EQ(resolver->get_task_info(),
            std::make_pair(std::optional<std::string>("worker"), std::optional<int>(1)));
}

TEST(SlurmClusterResolverTest, EnvironmentIsReadOnEveryCall) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                      {"SLURM_STEP_NODELIST", "a,b"}});
  Options options;
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  EXPECT_THAT(resolver->task_id(), Optional(0));
  env.Set("SLURM_PROCID", "1");
  EXPECT_THAT(resolver->task_id(), Optional(1));
  env.Set("SLURM_STEP_NODELIST", "c,d");
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"c:8888", "d:8888"}}}));
  env.Unset("SLURM_PROCID");
  EXPECT_EQ(resolver->task_id(), std::nullopt);
  EXPECT_EQ(resolver->master().value_or("error"), "");
}

// Missing and inconsistent variables are kFailedPrecondition (RuntimeError in
// Python, as TensorFlow raises); garbled ones kInvalidArgument (ValueError).
TEST(SlurmClusterResolverTest, MissingVariablesAreNamed) {
  MapEnvironment env;
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition,
                       AllOf(HasSubstr("SLURM_PROCID"), HasSubstr("Slurm step"))));
  env.Set("SLURM_PROCID", "0");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("SLURM_STEP_NODELIST")));
  env.Set("SLURM_STEP_NODELIST", "a");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("SLURM_STEP_TASKS_PER_NODE")));
  env.Unset("SLURM_STEP_NODELIST");
  env.Set("SLURM_JOB_NODELIST", "a");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("SLURM_TASKS_PER_NODE")));
}

TEST(SlurmClusterResolverTest, GarbledVariablesAreNamed) {
  MapEnvironment env({{"SLURM_PROCID", "abc"},
                      {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2"},
                      {"SLURM_STEP_NODELIST", "a"}});
  EXPECT_THAT(
      SlurmClusterResolver::Create({}, env),
      StatusIs(Status::Code::kInvalidArgument, HasSubstr("SLURM_PROCID=abc is not an integer")));
  env.Set("SLURM_PROCID", "-1");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("SLURM_PROCID=-1 must be >= 0")));
  env.Set("SLURM_PROCID", "2");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("SLURM_PROCID=2 must be < 2")));
  env.Set("SLURM_PROCID", "0");
  env.Set("SLURM_STEP_NODELIST", "a[1-");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("SLURM_STEP_NODELIST: invalid hostlist"))));
  env.Set("SLURM_STEP_NODELIST", " ");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("names no nodes")));
  env.Set("SLURM_STEP_NODELIST", "a");
  env.Set("SLURM_STEP_TASKS_PER_NODE", "2(x");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("SLURM_STEP_TASKS_PER_NODE: invalid tasks-per-node")));
  env.Set("SLURM_STEP_TASKS_PER_NODE", "1(x2)");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition,
                       AllOf(HasSubstr("names 1 nodes"), HasSubstr("task counts for 2"))));
  env.Set("SLURM_STEP_TASKS_PER_NODE", "2");
  env.Set("SLURM_STEP_NUM_TASKS", "two");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("SLURM_STEP_NUM_TASKS=two")));
  env.Set("SLURM_STEP_NUM_TASKS", "2");
  env.Set("SLURM_DISTRIBUTION", "weird");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("SLURM_DISTRIBUTION=weird")));
}

TEST(SlurmClusterResolverTest, TooManyOrTooFewTasksRequested) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
                      {"SLURM_STEP_NODELIST", "a,b,c"}});
  Options options;
  options.jobs = {{"ps", 1}, {"worker", 3}};
  options.auto_set_gpu = false;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kFailedPrecondition,
                       AllOf(HasSubstr("ask for 4 tasks"), HasSubstr("started 3"),
                             HasSubstr("ps: 1, worker: 3"))));
  options.jobs = {{"worker", -1}};
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("must be >= 0")));
  options.jobs = {{"", 3}};
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("job name is empty")));
  // SLURM_STEP_NUM_TASKS disagreeing with the per-node counts.
  env.Set("SLURM_STEP_NUM_TASKS", "4");
  EXPECT_THAT(SlurmClusterResolver::Create({}, env),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("SLURM_STEP_NUM_TASKS=4")));
}

TEST(SlurmClusterResolverTest, NotEnoughGpus) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
                      {"SLURM_STEP_NODELIST", "a,b"}});
  Options options;
  options.gpus_per_node = 2;
  options.gpus_per_task = 2;
  EXPECT_THAT(
      SlurmClusterResolver::Create(options, env),
      StatusIs(Status::Code::kFailedPrecondition,
               AllOf(HasSubstr("more GPUs per node than available"), HasSubstr("2 tasks on a"))));
  // CUDA_VISIBLE_DEVICES narrower than gpus_per_node.
  env.Set("CUDA_VISIBLE_DEVICES", "0");
  options.gpus_per_task = 1;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("CUDA_VISIBLE_DEVICES=0"), HasSubstr("auto_set_gpu"))));
  options.gpus_per_node = -1;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("gpus_per_node=-1")));
  options.gpus_per_node = 2;
  options.gpus_per_task = -1;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("gpus_per_task=-1")));
}

TEST(SlurmClusterResolverTest, BadOptions) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2"},
                      {"SLURM_STEP_NODELIST", "a"}});
  Options options;
  options.port_base = 0;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("port_base=0")));
  options.port_base = 65535;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("65536")));
  options.port_base = 8888;
  options.tasks_per_node = -2;
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("tasks_per_node=-2")));
  options.tasks_per_node.reset();
  options.tasks_per_host = {{"", 1}};
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("empty host")));
  options.tasks_per_host = {{"a", -1}};
  EXPECT_THAT(SlurmClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("must be >= 0")));
}

TEST(SlurmClusterResolverTest, EmptyJobIsKept) {
  MapEnvironment env({{"SLURM_PROCID", "0"},
                      {"SLURM_STEP_NUM_TASKS", "1"},
                      {"SLURM_STEP_TASKS_PER_NODE", "1"},
                      {"SLURM_STEP_NODELIST", "a"}});
  Options options;
  options.jobs = {{"ps", 0}, {"worker", 1}};
  options.auto_set_gpu = false;
  auto resolver = MustCreate(options, env);
  ASSERT_NE(resolver, nullptr);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  EXPECT_TRUE(spec.has_job("ps"));
  EXPECT_EQ(spec.num_tasks("ps").value_or(-1), 0);
}

}  // namespace
}  // namespace drover

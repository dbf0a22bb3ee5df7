// TensorFlow's tfconfig_cluster_resolver_test.py re-expressed, plus
// ParseTfConfig's accepted shapes and errors.

#include "drover/tf_config_cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "drover/environment.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Code = Status::Code;

constexpr char kPsAndWorkers[] = R"(
    "cluster": {
      "ps": ["ps0:2222", "ps1:2222"],
      "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]
    })";

ClusterSpec PsAndWorkers() {
  ClusterSpec spec;
  EXPECT_OK(spec.AddJob("ps", {"ps0:2222", "ps1:2222"}));
  EXPECT_OK(spec.AddJob("worker", {"worker0:2222", "worker1:2222", "worker2:2222"}));
  return spec;
}

MapEnvironment EnvWithTfConfig(const std::string& tf_config) {
  MapEnvironment env;
  env.Set("TF_CONFIG", tf_config);
  return env;
}

// ---- TensorFlow's TFConfigClusterResolverTest ----

TEST(TFConfigClusterResolverTest, NormalClusterSpecRead) {
  MapEnvironment env = EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                                       R"(, "task": {"type": "ps", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver.cluster_spec());
  EXPECT_EQ(spec, PsAndWorkers());
  EXPECT_EQ(spec.AsClusterDef(), PsAndWorkers().AsClusterDef());
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_def, ClusterSpec::FromClusterDef(spec.AsClusterDef()));
  EXPECT_EQ(from_def, PsAndWorkers());
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_dict, ClusterSpec::FromJson(spec.ToJson()));
  EXPECT_EQ(from_dict, PsAndWorkers());
}

TEST(TFConfigClusterResolverTest, AutomaticMasterRead) {
  MapEnvironment env = EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                                       R"(, "task": {"type": "ps", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "ps0:2222");
}

TEST(TFConfigClusterResolverTest, SpecifiedTaskTypeAndIndexMasterRead) {
  MapEnvironment env = EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                                       R"(, "task": {"type": "ps", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master("worker", 1, std::nullopt).value(), "worker1:2222");
}

TEST(TFConfigClusterResolverTest, SessionMasterRead) {
  MapEnvironment env = EnvWithTfConfig(
      std::string("{") + kPsAndWorkers +
      R"(, "session_master": "sessionmaster:2222", "task": {"type": "ps", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "sessionmaster:2222");
}

TEST(TFConfigClusterResolverTest, RpcLayerRead) {
  MapEnvironment env =
      EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                      R"(, "rpc_layer": "grpc", "task": {"type": "ps", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "grpc://ps0:2222");
}

TEST(TFConfigClusterResolverTest, TaskTypeIndexRpcRead) {
  MapEnvironment env =
      EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                      R"(, "rpc_layer": "grpc", "task": {"type": "ps", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.task_type(), "ps");
  EXPECT_EQ(resolver.task_id(), 0);
  EXPECT_EQ(resolver.rpc_layer(), "grpc");
}

TEST(TFConfigClusterResolverTest, ParameterOverrides) {
  MapEnvironment env =
      EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                      R"(, "rpc_layer": "grpc", "task": {"type": "ps", "index": 1}})");
  TFConfigClusterResolver resolver({.task_type = "ps", .task_id = 0}, env);
  EXPECT_EQ(resolver.master().value(), "grpc://ps0:2222");
  EXPECT_EQ(resolver.task_type(), "ps");
  EXPECT_EQ(resolver.task_id(), 0);

  resolver.set_task_type("worker");
  resolver.set_task_id(1);
  resolver.set_rpc_layer("test");
  EXPECT_EQ(resolver.master().value(), "test://worker1:2222");
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.rpc_layer(), "test");
}

TEST(TFConfigClusterResolverTest, TaskTypeCastToString) {
  MapEnvironment env = EnvWithTfConfig(R"({
      "cluster": {"123456": ["ps0:2222", "ps1:2222"], "worker": ["worker0:2222"]},
      "rpc_layer": "grpc",
      "task": {"type": 123456, "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.task_type(), "123456");
  EXPECT_EQ(resolver.master().value(), "grpc://ps0:2222");
}

TEST(TFConfigClusterResolverTest, TaskIndexCastToInteger) {
  MapEnvironment env = EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                                       R"(, "task": {"type": "ps", "index": "1"}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.task_id(), 1);
}

TEST(TFConfigClusterResolverTest, ZeroItemsInClusterSpecMasterRead) {
  MapEnvironment env = EnvWithTfConfig("\n    {}\n    ");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "");
}

TEST(TFConfigClusterResolverTest, OneItemInClusterSpecMasterRead) {
  MapEnvironment env = EnvWithTfConfig(R"({"cluster": {"worker": ["worker0:2222"]}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "");
}

// TensorFlow counts a task's devices in a session; we count the host's GPUs.
TEST(TFConfigClusterResolverTest, NumAcceleratorsCountsTheEnvironmentsGpus) {
  MapEnvironment env = EnvWithTfConfig(R"({
      "cluster": {"worker1": ["w10:2222"], "worker2": ["w21:2222", "w22:2222"]},
      "rpc_layer": "grpc", "task": {"type": "worker1", "index": "0"}})");
  env.set_gpus(2);
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.num_accelerators().value(), (AcceleratorMap{{"GPU", 2}}));
  EXPECT_EQ(resolver.num_accelerators("worker2", 1).value(), (AcceleratorMap{{"GPU", 2}}));
  env.set_gpus(0);
  EXPECT_TRUE(resolver.num_accelerators().value().empty());
  env.Set("TF_CONFIG", "{");
  EXPECT_THAT(resolver.num_accelerators(),
              StatusIs(Code::kInvalidArgument, HasSubstr("TF_CONFIG")));
}

// ---- The resolver beyond TensorFlow's tests ----

TEST(TFConfigClusterResolverTest, UnsetOrBlankTfConfigIsEmpty) {
  MapEnvironment env;
  TFConfigClusterResolver resolver({}, env);
  EXPECT_TRUE(resolver.cluster_spec().value().empty());
  EXPECT_EQ(resolver.master().value(), "");
  EXPECT_EQ(resolver.task_type(), std::nullopt);
  EXPECT_EQ(resolver.task_id(), std::nullopt);
  EXPECT_EQ(resolver.rpc_layer(), std::nullopt);
  env.Set("TF_CONFIG", "");
  EXPECT_TRUE(resolver.cluster_spec().value().empty());
  env.Set("TF_CONFIG", " \n\t");
  EXPECT_TRUE(resolver.cluster_spec().value().empty());
}

TEST(TFConfigClusterResolverTest, RereadsTfConfigOnEveryCall) {
  MapEnvironment env = EnvWithTfConfig(R"({"cluster": {"worker": ["a:1", "b:1"]},
                                           "task": {"type": "worker", "index": 0}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "a:1");
  env.Set("TF_CONFIG", R"({"cluster": {"worker": ["c:1", "d:1"]}, "rpc_layer": "grpc",
                           "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(resolver.cluster_spec().value().task_address("worker", 0).value(), "c:1");
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.master().value(), "grpc://d:1");
  env.Unset("TF_CONFIG");
  EXPECT_EQ(resolver.task_id(), std::nullopt);
}

TEST(TFConfigClusterResolverTest, MalformedTfConfigFailsTheFallibleCalls) {
  MapEnvironment env = EnvWithTfConfig(R"({"cluster": {"worker": "a:1"}, "task": {"type": "w"}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_THAT(
      resolver.cluster_spec(),
      StatusIs(Code::kWrongType, HasSubstr("TF_CONFIG: cluster: The tasks for job 'worker'")));
  EXPECT_THAT(resolver.master(), StatusIs(Code::kWrongType, HasSubstr("TF_CONFIG")));
  EXPECT_THAT(resolver.tf_config(), StatusIs(Code::kWrongType, ::testing::_));
  // As in TensorFlow, the task's own entries are read on their own: a broken
  // cluster does not hide them.
  EXPECT_EQ(resolver.task_type(), "w");
  EXPECT_EQ(resolver.task_id(), std::nullopt);
  resolver.set_task_type("ps");
  EXPECT_EQ(resolver.task_type(), "ps");
}

// Issue #15: TensorFlow's task_type / task_id properties raise ValueError for
// a TF_CONFIG that is not JSON or a task index that is not an integer.
TEST(TFConfigClusterResolverTest, ReadTaskFailsForMalformedEntries) {
  MapEnvironment env = EnvWithTfConfig("{not json");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_THAT(resolver.ReadTaskType(), StatusIs(Code::kInvalidArgument, HasSubstr("TF_CONFIG")));
  EXPECT_THAT(resolver.ReadTaskId(), StatusIs(Code::kInvalidArgument, HasSubstr("TF_CONFIG")));
  EXPECT_THAT(resolver.ReadRpcLayer(), StatusIs(Code::kInvalidArgument, HasSubstr("TF_CONFIG")));
  EXPECT_EQ(resolver.task_type(), std::nullopt);  // the infallible accessors say "unknown"
  env.Set("TF_CONFIG", "[1]");
  EXPECT_THAT(resolver.ReadTaskType(),
              StatusIs(Code::kInvalidArgument, HasSubstr("must be a JSON object")));
  env.Set("TF_CONFIG", R"({"task": {"type": "worker", "index": "one"}})");
  EXPECT_THAT(resolver.ReadTaskId(),
              StatusIs(Code::kInvalidArgument, HasSubstr("task.index must be an integer")));
  EXPECT_EQ(resolver.ReadTaskType().value(), "worker");
  env.Set("TF_CONFIG", R"({"task": "worker"})");
  EXPECT_THAT(resolver.ReadTaskType(),
              StatusIs(Code::kInvalidArgument, HasSubstr("task must be an object")));
  env.Set("TF_CONFIG", R"({"task": {"type": "worker", "index": "3"}, "rpc_layer": 7})");
  EXPECT_EQ(resolver.ReadTaskId().value(), 3);
  EXPECT_THAT(resolver.ReadRpcLayer(), StatusIs(Code::kInvalidArgument, HasSubstr("rpc_layer")));
  env.Unset("TF_CONFIG");
  EXPECT_EQ(resolver.ReadTaskType().value(), std::nullopt);
  EXPECT_EQ(resolver.ReadTaskId().value(), std::nullopt);
  // Overrides are not read from TF_CONFIG at all.
  env.Set("TF_CONFIG", "{not json");
  resolver.set_task_id(4);
  EXPECT_EQ(resolver.ReadTaskId().value(), 4);
}

TEST(TFConfigClusterResolverTest, MasterNeedsATask) {
  MapEnvironment env = EnvWithTfConfig(std::string("{") + kPsAndWorkers + "}");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_THAT(resolver.master(), StatusIs(Code::kInvalidArgument, HasSubstr("task.type")));
  EXPECT_THAT(resolver.master("worker", std::nullopt, std::nullopt),
              StatusIs(Code::kInvalidArgument, HasSubstr("task.index")));
  EXPECT_EQ(resolver.master("worker", 2, std::nullopt).value(), "worker2:2222");
  EXPECT_THAT(resolver.master("worker", 5, std::nullopt),
              StatusIs(Code::kNotFound, "No task with index 5 in job 'worker'"));
  EXPECT_THAT(resolver.master("chief", 0, std::nullopt),
              StatusIs(Code::kNotFound, "No such job in cluster: 'chief'"));
}

TEST(TFConfigClusterResolverTest, MasterRpcLayerPrecedence) {
  MapEnvironment env =
      EnvWithTfConfig(std::string("{") + kPsAndWorkers +
                      R"(, "rpc_layer": "grpc", "task": {"type": "ps", "index": 1}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master(std::nullopt, std::nullopt, "http").value(), "http://ps1:2222");
  // An explicit "" is not None in TensorFlow: no prefix at all.
  EXPECT_EQ(resolver.master(std::nullopt, std::nullopt, "").value(), "ps1:2222");
  TFConfigClusterResolver overridden({.rpc_layer = "udp"}, env);
  EXPECT_EQ(overridden.master().value(), "udp://ps1:2222");
}

TEST(TFConfigClusterResolverTest, SessionMasterIsVerbatim) {
  MapEnvironment env = EnvWithTfConfig(
      R"({"cluster": {"worker": ["a:1"]}, "session_master": "grpc://m:1", "rpc_layer": "http"})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "grpc://m:1");
  EXPECT_EQ(resolver.master("worker", 0, "udp").value(), "grpc://m:1");
}

TEST(TFConfigClusterResolverTest, LoneSparseTaskStillNeedsAMaster) {
  // job_tasks() of {3: ...} has four entries, so this is not "one task".
  MapEnvironment env = EnvWithTfConfig(
      R"({"cluster": {"worker": {"3": "w3:1"}}, "task": {"type": "worker", "index": 3}})");
  TFConfigClusterResolver resolver({}, env);
  EXPECT_EQ(resolver.master().value(), "w3:1");
  // A huge lone index must not allocate a list of that size.
  env.Set(
      "TF_CONFIG",
      R"({"cluster": {"worker": {"2147483647": "w:1"}}, "task": {"type": "worker", "index": 2147483647}})");
  EXPECT_EQ(resolver.master().value(), "w:1");
}

TEST(TFConfigClusterResolverTest, EnvironmentComesFromOptionsOnly) {
  MapEnvironment env = EnvWithTfConfig(R"({"environment": "cloud"})");
  EXPECT_EQ(TFConfigClusterResolver({}, env).environment(), "");
  EXPECT_EQ(TFConfigClusterResolver({.environment = "google"}, env).environment(), "google");
  EXPECT_EQ(TFConfigClusterResolver({}, env).tf_config().value().environment, "cloud");
}

// The Python module's TFConfigClusterResolver() is this one.
TEST(TFConfigClusterResolverTest, WithTheProcessEnvironmentItReadsTheRealTfConfig) {
  Environment& process = ProcessEnvironment();
  TFConfigClusterResolver resolver({}, process);
  std::optional<std::string> saved = process.Get("TF_CONFIG");
  process.Set("TF_CONFIG",
              R"({"cluster": {"worker": ["x:1", "y:1"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(resolver.master().value(), "y:1");
  if (saved.has_value()) {
    process.Set("TF_CONFIG", *saved);
  } else {
    process.Unset("TF_CONFIG");
  }
}

// ---- ParseTfConfig ----

TEST(ParseTfConfigTest, FullConfig) {
  ASSERT_OK_AND_ASSIGN(TfConfig config, ParseTfConfig(R"({
      "cluster": {"chief": ["c:1"], "worker": {"1": "w1:1"}},
      "task": {"type": "worker", "index": 1, "trial": "7"},
      "rpc_layer": "grpc", "session_master": "m:1", "environment": "cloud",
      "something_else": [1, 2, {"a": null}]})"));
  EXPECT_THAT(config.cluster.jobs(), ElementsAre("chief", "worker"));
  EXPECT_EQ(config.cluster.task_address("worker", 1).value(), "w1:1");
  EXPECT_EQ(config.task_type, "worker");
  EXPECT_EQ(config.task_id, 1);
  EXPECT_EQ(config.rpc_layer, "grpc");
  EXPECT_EQ(config.session_master, "m:1");
  EXPECT_EQ(config.environment, "cloud");
}

TEST(ParseTfConfigTest, EverythingIsOptional) {
  ASSERT_OK_AND_ASSIGN(TfConfig config, ParseTfConfig("{}"));
  EXPECT_TRUE(config.cluster.empty());
  EXPECT_EQ(config.task_type, std::nullopt);
  EXPECT_EQ(config.task_id, std::nullopt);
  EXPECT_EQ(config.rpc_layer, std::nullopt);
  EXPECT_EQ(config.session_master, std::nullopt);
  EXPECT_EQ(config.environment, std::nullopt);
  ASSERT_OK_AND_ASSIGN(TfConfig empty_task, ParseTfConfig(R"({"task": {}})"));
  EXPECT_EQ(empty_task.task_type, std::nullopt);
  ASSERT_OK_AND_ASSIGN(TfConfig nulls, ParseTfConfig(R"({"rpc_layer": null, "session_master": null,
                                         "environment": null})"));
  EXPECT_EQ(nulls.rpc_layer, std::nullopt);
  EXPECT_EQ(nulls.session_master, std::nullopt);
}

TEST(ParseTfConfigTest, TaskIndexForms) {
  const std::pair<const char*, int> cases[] = {
      {R"({"task": {"index": 3}})", 3},     {R"({"task": {"index": "3"}})", 3},
      {R"({"task": {"index": " 3 "}})", 3}, {R"({"task": {"index": "+3"}})", 3},
      {R"({"task": {"index": 3.0}})", 3},   {R"({"task": {"index": -1}})", -1},
      {R"({"task": {"index": "007"}})", 7}, {R"({"task": {"index": 2147483647}})", 2147483647},
  };
  for (const auto& [text, expected] : cases) {
    ASSERT_OK_AND_ASSIGN(TfConfig config, ParseTfConfig(text));
    EXPECT_EQ(config.task_id, expected) << text;
  }
}

TEST(ParseTfConfigTest, BadTaskIndex) {
  EXPECT_THAT(
      ParseTfConfig(R"({"task": {"index": "x"}})"),
      StatusIs(Code::kInvalidArgument, "TF_CONFIG: task.index must be an integer, got \"x\""));
  for (const char* text : {R"({"task": {"index": 1.5}})", R"({"task": {"index": true}})",
                           R"({"task": {"index": null}})", R"({"task": {"index": [0]}})",
                           R"({"task": {"index": "1.0"}})", R"({"task": {"index": ""}})"}) {
    EXPECT_THAT(ParseTfConfig(text),
                StatusIs(Code::kInvalidArgument, HasSubstr("task.index must be an integer, got ")))
        << text;
  }
  EXPECT_THAT(ParseTfConfig(R"({"task": {"index": [0]}})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("got a JSON array")));
  for (const char* text :
       {R"({"task": {"index": 2147483648}})", R"({"task": {"index": "-2147483649"}})",
        R"({"task": {"index": 1e10}})", R"({"task": {"index": 18446744073709551615}})"}) {
    EXPECT_THAT(ParseTfConfig(text), StatusIs(Code::kInvalidArgument, HasSubstr("does not fit")))
        << text;
  }
}

TEST(ParseTfConfigTest, BadTaskType) {
  EXPECT_THAT(
      ParseTfConfig(R"({"task": {"type": ["worker"]}})"),
      StatusIs(Code::kInvalidArgument, "TF_CONFIG: task.type must be a string, got a JSON array"));
  EXPECT_THAT(ParseTfConfig(R"({"task": {"type": null}})"),
              StatusIs(Code::kInvalidArgument, "TF_CONFIG: task.type must be a string, got null"));
  EXPECT_THAT(ParseTfConfig(R"({"task": {"type": 1.5}})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("got 1.5")));
}

TEST(ParseTfConfigTest, BadShapes) {
  EXPECT_THAT(ParseTfConfig("[]"), StatusIs(Code::kInvalidArgument,
                                            "TF_CONFIG: must be a JSON object, got a JSON array"));
  EXPECT_THAT(ParseTfConfig(R"("{}")"),
              StatusIs(Code::kInvalidArgument, HasSubstr("must be a JSON object, got \"{}\"")));
  EXPECT_THAT(
      ParseTfConfig(R"({"task": "worker:0"})"),
      StatusIs(Code::kInvalidArgument, "TF_CONFIG: task must be an object, got \"worker:0\""));
  EXPECT_THAT(ParseTfConfig(R"({"rpc_layer": 5})"),
              StatusIs(Code::kInvalidArgument, "TF_CONFIG: rpc_layer must be a string, got 5"));
  EXPECT_THAT(ParseTfConfig(R"({"session_master": {}})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("session_master must be a string")));
  EXPECT_THAT(ParseTfConfig(R"({"environment": false})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("environment must be a string")));
}

TEST(ParseTfConfigTest, BadJsonAndDuplicates) {
  EXPECT_THAT(ParseTfConfig(""),
              StatusIs(Code::kInvalidArgument, HasSubstr("TF_CONFIG: not valid JSON")));
  EXPECT_THAT(ParseTfConfig("{'cluster': {}}"),
              StatusIs(Code::kInvalidArgument, HasSubstr("TF_CONFIG: not valid JSON")));
  EXPECT_THAT(ParseTfConfig(R"({"task": {"index": 0}, "task": {"index": 1}})"),
              StatusIs(Code::kInvalidArgument,
                       "TF_CONFIG: duplicate key 'task' in the object at the top level"));
  EXPECT_THAT(
      ParseTfConfig(R"({"cluster": {"w": ["a"], "w": ["b"]}})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("duplicate key 'w' in the object at '/cluster'")));
}

TEST(ParseTfConfigTest, ClusterErrorsKeepTheirCodes) {
  EXPECT_THAT(
      ParseTfConfig(R"({"cluster": ["a:1"]})"),
      StatusIs(Code::kWrongType, HasSubstr("TF_CONFIG: cluster: `cluster` must be a dictionary")));
  EXPECT_THAT(ParseTfConfig(R"({"cluster": {"w": [1]}})"),
              StatusIs(Code::kWrongType, HasSubstr("job 'w'")));
  EXPECT_THAT(ParseTfConfig(R"({"cluster": {"w": {"-2": "a"}}})"),
              StatusIs(Code::kInvalidArgument,
                       HasSubstr("TF_CONFIG: cluster: Task index must be non-negative")));
  EXPECT_THAT(ParseTfConfig(R"({"cluster": null})"),
              StatusIs(Code::kWrongType, HasSubstr("got JSON null")));
}

TEST(ParseTfConfigTest, LongValuesAreShortened) {
  auto result = ParseTfConfig(R"({"task": {"index": ")" + std::string(200, 'x') + R"("}})");
  ASSERT_EQ(result.status().code(), Code::kInvalidArgument);
  EXPECT_LT(result.status().message().size(), 150u);
  EXPECT_THAT(result.status().message(), HasSubstr("xxx..."));
}

}  // namespace
}  // namespace drover

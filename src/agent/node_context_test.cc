#include "drover/node_context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "agent/test_util.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::HasSubstr;

NodeContext Sample() {
  NodeContext context;
  context.executor_id = "exec-1";
  context.job_name = "worker";
  context.task_index = 1;
  EXPECT_OK(context.cluster_spec.AddJob("chief", {"h:1"}));
  EXPECT_OK(context.cluster_spec.AddJob("worker", {"h:2", "h:3"}));
  context.cluster_id = "c1";
  context.port = 3;
  context.ports = {3, 4};
  context.working_dir = "/work/dir";
  context.log_dir = "/logs";
  context.restart_count = 2;
  context.restart_reason = "worker:0 on h: killed by SIGKILL";
  context.num_workers = 2;
  context.is_chief = false;
  return context;
}

TEST(NodeContextTest, RoundTripsThroughAFile) {
  TempDir dir;
  NodeContext context = Sample();
  std::string path = dir.File("ctx.json");
  drover::testing::WriteFile(path, context.ToJson(2));
  ASSERT_OK_AND_ASSIGN(NodeContext loaded, NodeContext::LoadFile(path));
  EXPECT_EQ(loaded.executor_id, "exec-1");
  EXPECT_EQ(loaded.job_name, "worker");
  EXPECT_EQ(loaded.task_index, 1);
  EXPECT_EQ(loaded.cluster_spec, context.cluster_spec);
  EXPECT_EQ(loaded.cluster_id, "c1");
  EXPECT_EQ(loaded.port, 3);
  EXPECT_EQ(loaded.ports, (std::vector<int>{3, 4}));
  EXPECT_EQ(loaded.default_fs, "file://");
  EXPECT_EQ(loaded.working_dir, "/work/dir");
  EXPECT_EQ(loaded.log_dir, "/logs");
  EXPECT_EQ(loaded.restart_count, 2);
  EXPECT_EQ(loaded.restart_reason, "worker:0 on h: killed by SIGKILL");
  EXPECT_EQ(loaded.num_workers, 2);
  EXPECT_FALSE(loaded.is_chief);

  MapEnvironment env(std::map<std::string, std::string>{{kContextFileVariable, path}});
  ASSERT_OK_AND_ASSIGN(NodeContext from_env, NodeContext::Load(env));
  EXPECT_EQ(from_env.executor_id, "exec-1");
}

TEST(NodeContextTest, AFirstRoundHasNoRestartReasonInTheFile) {
  NodeContext context = Sample();
  context.restart_count = 0;
  context.restart_reason.clear();
  EXPECT_EQ(context.ToJson().find("restart_reason"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(NodeContext loaded, NodeContext::FromJson(context.ToJson()));
  EXPECT_EQ(loaded.restart_reason, "");
}

TEST(NodeContextTest, LoadNamesTheVariableWhenUnsetOrEmpty) {
  MapEnvironment env;
  EXPECT_THAT(NodeContext::Load(env).status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("DROVER_CONTEXT_FILE")));
  env.Set(kContextFileVariable, "");
  EXPECT_THAT(NodeContext::Load(env).status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("DROVER_CONTEXT_FILE")));
}

TEST(NodeContextTest, BadFilesSayWhatIsWrong) {
  EXPECT_THAT(NodeContext::LoadFile("/nonexistent/ctx.json").status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("/nonexistent/ctx.json")));
  EXPECT_THAT(NodeContext::FromJson("[1]").status(),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("object")));
  EXPECT_THAT(NodeContext::FromJson(R"({"executor_id": 3})").status(),
              StatusIs(Status::Code::kWrongType, HasSubstr("executor_id")));
  EXPECT_THAT(NodeContext::FromJson(R"({"executor_id": "e"})").status(),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("job_name")));
}

TEST(NodeContextTest, AbsolutePathLikeTensorFlowOnSpark) {
  NodeContext context = Sample();
  EXPECT_EQ(context.absolute_path("data/x"), "file:///work/dir/data/x");
  EXPECT_EQ(context.absolute_path("/data/x"), "file:///data/x");
  EXPECT_EQ(context.absolute_path("hdfs://nn:8020/x"), "hdfs://nn:8020/x");
  EXPECT_EQ(context.absolute_path("file:///y"), "file:///y");
  context.default_fs = "hdfs://nn:8020";
  EXPECT_EQ(context.absolute_path("/data/x"), "hdfs://nn:8020/data/x");
  EXPECT_EQ(context.absolute_path("x"), "hdfs://nn:8020/work/dir/x");
}

}  // namespace
}  // namespace drover

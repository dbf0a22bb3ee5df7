#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "drover/cluster_spec.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Code = Status::Code;

TEST(ClusterSpecJsonTest, ParsesDenseAndSparseJobs) {
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromJson(R"({
      "worker": ["w0:2222", "w1:2222"],
      "ps": {"1": "ps1:2222", "3": "ps3:2222"},
      "chief": {"0": "c0:2222"},
      "evaluator": []
    })"));
  // Jobs keep document order (Python's dict order).
  EXPECT_THAT(spec.jobs(), ElementsAre("worker", "ps", "chief", "evaluator"));
  EXPECT_THAT(spec.task_indices("ps").value(), ElementsAre(1, 3));
  EXPECT_EQ(spec.task_address("ps", 3).value(), "ps3:2222");
  EXPECT_TRUE(spec.is_dense("chief"));
  EXPECT_EQ(spec.num_tasks("evaluator").value(), 0);
  EXPECT_EQ(spec.DebugString(),
            "ClusterSpec({'chief': ['c0:2222'], 'evaluator': {}, 'ps': {1: 'ps1:2222', 3: "
            "'ps3:2222'}, 'worker': ['w0:2222', 'w1:2222']})");
}

TEST(ClusterSpecJsonTest, IndicesParseAsPythonInt) {
  // TensorFlow does int(key): whitespace, a sign and leading zeros are fine.
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec,
                       ClusterSpec::FromJson(R"({"w": {" 2 ": "a", "+05": "b", "0": "c"}})"));
  EXPECT_THAT(spec.task_indices("w").value(), ElementsAre(0, 2, 5));
}

TEST(ClusterSpecJsonTest, EmptyObjectIsEmptySpec) {
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromJson(" {} "));
  EXPECT_TRUE(spec.empty());
  EXPECT_EQ(spec.ToJson(), "{}");
}

TEST(ClusterSpecJsonTest, ToJsonIsAsDict) {
  ClusterSpec spec;
  ASSERT_OK(spec.AddJob("worker", {"w0:1", "w1:1"}));
  ASSERT_OK(spec.AddSparseJob("ps", {{1, "p1:1"}, {10, "p10:1"}, {2, "p2:1"}}));
  ASSERT_OK(spec.AddJob("empty", {}));
  ASSERT_OK(spec.AddSparseJob("dense_map", {{0, "d:1"}}));
  // Insertion order; sparse indices in numeric (not string) order.
  EXPECT_EQ(spec.ToJson(), R"({"worker":["w0:1","w1:1"],"ps":{"1":"p1:1","2":"p2:1","10":"p10:1"},)"
                           R"("empty":{},"dense_map":["d:1"]})");
  EXPECT_EQ(nlohmann::json::parse(spec.ToJson(2)), nlohmann::json::parse(spec.ToJson()));
  EXPECT_NE(spec.ToJson(2).find("\n  \"worker\": ["), std::string::npos);
}

TEST(ClusterSpecJsonTest, RoundTrip) {
  ClusterSpec spec;
  ASSERT_OK(spec.AddJob("worker", {"w0:1", "w1:1"}));
  ASSERT_OK(spec.AddSparseJob("ps", {{7, "p7:1"}}));
  ASSERT_OK(spec.AddJob("empty", {}));
  ASSERT_OK(spec.AddJob("h\xc3\xb6st \"quoted\"\n", {"\\back:1", std::string("nul\0:1", 6)}));
  ASSERT_OK_AND_ASSIGN(ClusterSpec back, ClusterSpec::FromJson(spec.ToJson()));
  EXPECT_EQ(back, spec);
  EXPECT_EQ(back.jobs(), spec.jobs());
  EXPECT_EQ(back.ToJson(), spec.ToJson());
}

TEST(ClusterSpecJsonTest, BadJsonIsInvalidArgument) {
  for (const char* text : {"", "{", "{\"w\": [\"a\",]}", "{} {}", "nul", "{\"w\": [\"\xff\"]}"}) {
    EXPECT_THAT(ClusterSpec::FromJson(text),
                StatusIs(Code::kInvalidArgument, HasSubstr("not valid JSON")))
        << text;
  }
}

TEST(ClusterSpecJsonTest, DuplicateJobIsInvalidArgument) {
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": ["a:1"], "ps": [], "worker": ["b:1"]})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("duplicate key 'worker'")));
}

TEST(ClusterSpecJsonTest, DuplicateTaskIndexIsInvalidArgument) {
  EXPECT_THAT(
      ClusterSpec::FromJson(R"({"worker": {"1": "a:1", "1": "b:1"}})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("duplicate key '1' in the object at '/worker'")));
  // Different keys, same index.
  EXPECT_THAT(
      ClusterSpec::FromJson(R"({"worker": {"1": "a:1", "01": "b:1"}})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("Duplicate task index 1 in job 'worker'")));
}

TEST(ClusterSpecJsonTest, BadIndexIsInvalidArgument) {
  EXPECT_THAT(
      ClusterSpec::FromJson(R"({"worker": {"x": "a:1"}})"),
      StatusIs(Code::kInvalidArgument, HasSubstr("invalid literal for int() with base 10: 'x'")));
  for (const char* text : {R"({"worker": {"1.0": "a:1"}})", R"({"worker": {"": "a:1"}})",
                           R"({"worker": {"1 2": "a:1"}})", R"({"worker": {"0x1": "a:1"}})"}) {
    EXPECT_THAT(ClusterSpec::FromJson(text),
                StatusIs(Code::kInvalidArgument, HasSubstr("job 'worker'")))
        << text;
  }
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": {"-1": "a:1"}})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("non-negative, got -1 in job 'worker'")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": {"2147483648": "a:1"}})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("int32")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": {"99999999999999999999999": "a:1"}})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("job 'worker'")));
}

TEST(ClusterSpecJsonTest, EmptyJobNameIsInvalidArgument) {
  EXPECT_THAT(ClusterSpec::FromJson(R"({"": ["a:1"]})"),
              StatusIs(Code::kInvalidArgument, HasSubstr("empty")));
}

// TensorFlow raises TypeError for these.
TEST(ClusterSpecJsonTest, WrongTypesAreWrongType) {
  EXPECT_THAT(ClusterSpec::FromJson(R"(["a:1"])"),
              StatusIs(Code::kWrongType, HasSubstr("`cluster` must be a dictionary")));
  EXPECT_THAT(ClusterSpec::FromJson(R"("worker")"),
              StatusIs(Code::kWrongType, HasSubstr("got a JSON string")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": "a:1"})"),
              StatusIs(Code::kWrongType, HasSubstr("The tasks for job 'worker' must be a list or a "
                                                   "dictionary from integers to strings.")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": 3})"),
              StatusIs(Code::kWrongType, HasSubstr("got a JSON number")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": null})"),
              StatusIs(Code::kWrongType, HasSubstr("job 'worker'")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"worker": ["a:1", 2222]})"),
              StatusIs(Code::kWrongType,
                       HasSubstr("Task address 2222 must be bytes or unicode (task 1 of job "
                                 "'worker'")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"ps": {"0": null}})"),
              StatusIs(Code::kWrongType, HasSubstr("Task address None must be bytes or unicode "
                                                   "(task '0' of job 'ps'")));
  EXPECT_THAT(ClusterSpec::FromJson(R"({"ps": [["a", true]]})"),
              StatusIs(Code::kWrongType, HasSubstr("Task address ['a', True]")));
}

TEST(ClusterSpecJsonTest, LongValuesAreShortenedInMessages) {
  std::string text = R"({"w": [{"k": ")" + std::string(500, 'x') + R"("}]})";
  auto result = ClusterSpec::FromJson(text);
  ASSERT_EQ(result.status().code(), Code::kWrongType);
  EXPECT_LT(result.status().message().size(), 200u);
  EXPECT_THAT(result.status().message(), HasSubstr("..."));
}

TEST(ClusterSpecJsonTest, ErrorMessagesStayUtf8) {
  // A long multi-byte value is cut on a character boundary: the repr is
  // [[' then 56 a's, so its 60-byte cut falls inside the first é.
  std::string accents;
  for (int i = 0; i < 10; ++i) accents += "\xc3\xa9";
  std::string text = R"({"w": [[")" + std::string(56, 'a') + accents + R"("]]})";
  auto result = ClusterSpec::FromJson(text);
  ASSERT_EQ(result.status().code(), Code::kWrongType);
  EXPECT_NO_THROW((void)nlohmann::json(result.status().message()).dump());
}

TEST(ClusterSpecJsonTest, EmptyJobsRoundTripAsObjects) {
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_list, ClusterSpec::FromJson(R"({"w": []})"));
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_map, ClusterSpec::FromJson(R"({"w": {}})"));
  EXPECT_EQ(from_list, from_map);
  EXPECT_EQ(from_list.ToJson(), R"({"w":{}})");
  EXPECT_THAT(from_list.job_tasks("w").value(), IsEmpty());
}

}  // namespace
}  // namespace drover

#include "drover/cluster_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "spec/python_repr.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using Code = Status::Code;

ClusterSpec Dense(std::vector<std::pair<std::string, std::vector<std::string>>> jobs) {
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) EXPECT_OK(spec.AddJob(name, tasks));
  return spec;
}

ClusterSpec Sparse(std::string job, ClusterSpec::TaskMap tasks) {
  ClusterSpec spec;
  EXPECT_OK(spec.AddSparseJob(std::move(job), std::move(tasks)));
  return spec;
}

// ---- TensorFlow's ClusterSpecTest (server_lib_test.py), re-expressed ----

TEST(TensorFlowClusterSpecTest, StringConversion) {
  ClusterSpec spec = Dense({{"ps", {"ps0:1111"}}, {"worker", {"worker0:3333", "worker1:4444"}}});
  EXPECT_EQ(spec.DebugString(),
            "ClusterSpec({'ps': ['ps0:1111'], 'worker': ['worker0:3333', 'worker1:4444']})");
}

TEST(TensorFlowClusterSpecTest, ClusterSpecAccessors) {
  ClusterSpec spec = Dense({{"ps", {"ps0:2222", "ps1:2222"}},
                            {"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}});
  ASSERT_OK(spec.AddSparseJob("sparse", {{0, "sparse0:2222"}, {3, "sparse3:2222"}}));

  EXPECT_EQ(spec.num_tasks("ps").value(), 2);
  EXPECT_EQ(spec.num_tasks("worker").value(), 3);
  EXPECT_EQ(spec.num_tasks("sparse").value(), 2);
  EXPECT_THAT(spec.num_tasks("unknown"), StatusIs(Code::kNotFound, HasSubstr("unknown")));

  EXPECT_EQ(spec.task_address("ps", 0).value(), "ps0:2222");
  EXPECT_EQ(spec.task_address("sparse", 0).value(), "sparse0:2222");
  EXPECT_THAT(spec.task_address("unknown", 0), StatusIs(Code::kNotFound, ::testing::_));
  EXPECT_THAT(spec.task_address("sparse", 2), StatusIs(Code::kNotFound, ::testing::_));

  EXPECT_THAT(spec.task_indices("ps").value(), ElementsAre(0, 1));
  EXPECT_THAT(spec.task_indices("worker").value(), ElementsAre(0, 1, 2));
  EXPECT_THAT(spec.task_indices("sparse").value(), ElementsAre(0, 3));
  EXPECT_THAT(spec.task_indices("unknown"), StatusIs(Code::kNotFound, ::testing::_));

  EXPECT_THAT(spec.job_tasks("ps").value(), ElementsAre("ps0:2222", "ps1:2222"));
  EXPECT_THAT(spec.job_tasks("worker").value(),
              ElementsAre("worker0:2222", "worker1:2222", "worker2:2222"));
  EXPECT_THAT(spec.job_tasks("sparse").value(),
              ElementsAre("sparse0:2222", std::nullopt, std::nullopt, "sparse3:2222"));
  EXPECT_THAT(spec.job_tasks("unknown"), StatusIs(Code::kNotFound, ::testing::_));

  // as_dict() == original_dict: dense jobs are lists, the sparse one a map.
  EXPECT_TRUE(spec.is_dense("ps"));
  EXPECT_TRUE(spec.is_dense("worker"));
  EXPECT_FALSE(spec.is_dense("sparse"));
}

TEST(TensorFlowClusterSpecTest, EmptyClusterSpecIsFalse) {
  ClusterSpec spec;
  EXPECT_FALSE(spec);
  EXPECT_TRUE(spec.empty());
}

TEST(TensorFlowClusterSpecTest, NonEmptyClusterSpecIsTrue) {
  EXPECT_TRUE(Dense({{"job", {"host:port"}}}));
}

TEST(TensorFlowClusterSpecTest, Eq) {
  EXPECT_EQ(ClusterSpec(), ClusterSpec());
  EXPECT_EQ(Dense({{"job", {"host:2222"}}}), Dense({{"job", {"host:2222"}}}));
  EXPECT_EQ(Sparse("job", {{0, "host:2222"}}), Dense({{"job", {"host:2222"}}}));
}

TEST(TensorFlowClusterSpecTest, Ne) {
  EXPECT_NE(ClusterSpec(), Dense({{"job", {"host:2223"}}}));
  EXPECT_NE(Dense({{"job1", {"host:2222"}}}), Dense({{"job2", {"host:2222"}}}));
  EXPECT_NE(Dense({{"job", {"host:2222"}}}), Dense({{"job", {"host:2223"}}}));
  EXPECT_NE(Dense({{"job", {"host:2222", "host:2223"}}}),
            Dense({{"job", {"host:2223", "host:2222"}}}));
}

// server_lib_sparse_job_test.py: a job whose only task is index 37.
TEST(TensorFlowClusterSpecTest, SparseJob) {
  ClusterSpec spec = Sparse("local", {{37, "localhost:0"}});
  EXPECT_EQ(spec.task_address("local", 37).value(), "localhost:0");
  EXPECT_EQ(spec.num_tasks("local").value(), 1);
  EXPECT_EQ(spec.job_tasks("local")->size(), 38u);
  EXPECT_EQ(spec.DebugString(), "ClusterSpec({'local': {37: 'localhost:0'}})");
}

// ---- Construction ----

TEST(ClusterSpecTest, JobsKeepInsertionOrder) {
  ClusterSpec spec = Dense({{"worker", {"w:1"}}, {"chief", {"c:1"}}, {"ps", {"p:1"}}});
  EXPECT_THAT(spec.jobs(), ElementsAre("worker", "chief", "ps"));
  EXPECT_TRUE(spec.has_job("chief"));
  EXPECT_FALSE(spec.has_job("evaluator"));
}

TEST(ClusterSpecTest, AddJobRejectsDuplicateAndEmptyName) {
  ClusterSpec spec = Dense({{"worker", {"w:1"}}});
  EXPECT_THAT(spec.AddJob("worker", {"x:1"}),
              StatusIs(Code::kInvalidArgument, HasSubstr("Duplicate job in cluster: 'worker'")));
  EXPECT_THAT(spec.AddSparseJob("worker", {}),
              StatusIs(Code::kInvalidArgument, HasSubstr("'worker'")));
  EXPECT_THAT(spec.AddJob("", {"x:1"}), StatusIs(Code::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(spec.AddSparseJob("", {}), StatusIs(Code::kInvalidArgument, HasSubstr("empty")));
  // The failed calls changed nothing.
  EXPECT_EQ(spec, Dense({{"worker", {"w:1"}}}));
}

TEST(ClusterSpecTest, NegativeIndexIsInvalid) {
  ClusterSpec spec;
  EXPECT_THAT(spec.AddSparseJob("worker", {{-1, "a:1"}}),
              StatusIs(Code::kInvalidArgument, HasSubstr("-1")));
  EXPECT_THAT(spec.SetTask("worker", -5, "a:1"),
              StatusIs(Code::kInvalidArgument, HasSubstr("non-negative")));
  EXPECT_TRUE(spec.empty());
}

TEST(ClusterSpecTest, RejectsInvalidUtf8) {
  ClusterSpec spec;
  EXPECT_THAT(spec.AddJob("work\xff", {"a:1"}),
              StatusIs(Code::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_THAT(spec.AddJob("worker", {"a\xc0\xaf"
                                     "b"}),
              StatusIs(Code::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_THAT(spec.SetTask("worker", 0, "\xed\xa0\x80"),  // a UTF-16 surrogate
              StatusIs(Code::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_TRUE(spec.empty());
  EXPECT_OK(spec.AddJob("wörker", {"höst:1"}));
}

TEST(ClusterSpecTest, SetTaskCreatesJobAndOverwrites) {
  ClusterSpec spec;
  ASSERT_OK(spec.SetTask("worker", 2, "w2:1"));
  ASSERT_OK(spec.SetTask("worker", 0, "w0:1"));
  ASSERT_OK(spec.SetTask("ps", 0, "p0:1"));
  ASSERT_OK(spec.SetTask("worker", 2, "w2:2"));
  EXPECT_THAT(spec.jobs(), ElementsAre("worker", "ps"));
  EXPECT_THAT(spec.task_indices("worker").value(), ElementsAre(0, 2));
  EXPECT_EQ(spec.task_address("worker", 2).value(), "w2:2");
  EXPECT_FALSE(spec.is_dense("worker"));
  ASSERT_OK(spec.SetTask("worker", 1, "w1:1"));
  EXPECT_TRUE(spec.is_dense("worker"));
  EXPECT_THAT(spec.SetTask("", 0, "a:1"), StatusIs(Code::kInvalidArgument, HasSubstr("empty")));
}

// ---- Accessors ----

TEST(ClusterSpecTest, ErrorMessagesMatchTensorFlow) {
  ClusterSpec spec = Dense({{"worker", {"w0:1"}}});
  EXPECT_EQ(spec.num_tasks("ps").status().message(), "No such job in cluster: 'ps'");
  EXPECT_EQ(spec.task_indices("ps").status().message(), "No such job in cluster: 'ps'");
  EXPECT_EQ(spec.job_tasks("ps").status().message(), "No such job in cluster: 'ps'");
  EXPECT_EQ(spec.job_task_map("ps").status().message(), "No such job in cluster: 'ps'");
  EXPECT_EQ(spec.task_address("ps", 0).status().message(), "No such job in cluster: 'ps'");
  EXPECT_EQ(spec.task_address("worker", 3).status().message(),
            "No task with index 3 in job 'worker'");
  // %r quoting, as Python writes it.
  EXPECT_EQ(spec.num_tasks("it's").status().message(), "No such job in cluster: \"it's\"");
}

TEST(ClusterSpecTest, EmptyJob) {
  ClusterSpec spec = Dense({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {}}});
  EXPECT_TRUE(spec);
  EXPECT_EQ(spec.num_tasks("worker").value(), 0);
  EXPECT_THAT(spec.task_indices("worker").value(), IsEmpty());
  // TensorFlow raises on max() of an empty job here; we return [].
  EXPECT_THAT(spec.job_tasks("worker").value(), IsEmpty());
  EXPECT_THAT(spec.job_task_map("worker").value(), IsEmpty());
  // as_dict() shows an empty job as {}.
  EXPECT_FALSE(spec.is_dense("worker"));
  EXPECT_EQ(spec.DebugString(), "ClusterSpec({'ps': ['ps0:2222', 'ps1:2222'], 'worker': {}})");
  // An empty job differs from a missing one.
  EXPECT_NE(spec, Dense({{"ps", {"ps0:2222", "ps1:2222"}}}));
}

TEST(ClusterSpecTest, JobTaskMapAndTotals) {
  ClusterSpec spec = Dense({{"ps", {"p0:1"}}});
  ASSERT_OK(spec.AddSparseJob("worker", {{1, "w1:1"}, {4, "w4:1"}}));
  EXPECT_EQ(spec.job_task_map("worker").value(), (ClusterSpec::TaskMap{{1, "w1:1"}, {4, "w4:1"}}));
  EXPECT_EQ(spec.total_tasks(), 3);
  EXPECT_EQ(ClusterSpec().total_tasks(), 0);
  EXPECT_FALSE(spec.is_dense("nonexistent"));
}

TEST(ClusterSpecTest, SparseJobWithDenseIndicesIsDense) {
  ClusterSpec spec = Sparse("worker", {{1, "b"}, {0, "a"}});
  EXPECT_TRUE(spec.is_dense("worker"));
  EXPECT_EQ(spec.DebugString(), "ClusterSpec({'worker': ['a', 'b']})");
}

// ---- Equality ----

TEST(ClusterSpecTest, EqualityIgnoresJobOrder) {
  ClusterSpec a = Dense({{"ps", {"p:1"}}, {"worker", {"w:1"}}});
  ClusterSpec b = Dense({{"worker", {"w:1"}}, {"ps", {"p:1"}}});
  EXPECT_EQ(a, b);
  EXPECT_NE(a.jobs(), b.jobs());
  EXPECT_NE(a, Dense({{"ps", {"p:1"}}}));
  EXPECT_NE(Dense({{"ps", {"p:1"}}}), a);
  EXPECT_NE(Sparse("job", {{1, "host:2222"}}), Dense({{"job", {"host:2222"}}}));
}

// ---- DebugString ----

TEST(ClusterSpecTest, DebugStringSortsJobsAndShowsSparseJobsAsDicts) {
  ClusterSpec spec = Dense({{"worker", {"w0:2222"}}});
  ASSERT_OK(spec.AddJob("ps", {"ps0:2222"}));
  ASSERT_OK(spec.AddSparseJob("chief", {{1, "w1:2222"}, {3, "w3:2222"}}));
  EXPECT_EQ(spec.DebugString(),
            "ClusterSpec({'chief': {1: 'w1:2222', 3: 'w3:2222'}, 'ps': ['ps0:2222'], "
            "'worker': ['w0:2222']})");
  EXPECT_EQ(ClusterSpec().DebugString(), "ClusterSpec({})");
}

TEST(ClusterSpecTest, DebugStringSortsByCodePoint) {
  // Python sorts str by code point: 'B' < 'a' < 'é'.
  ClusterSpec spec = Dense({{"\xc3\xa9", {"e:1"}}, {"a", {"a:1"}}, {"B", {"b:1"}}});
  EXPECT_EQ(spec.DebugString(), "ClusterSpec({'B': ['b:1'], 'a': ['a:1'], '\xc3\xa9': ['e:1']})");
}

// ---- PythonRepr ----

TEST(PythonReprTest, QuotesLikePython) {
  EXPECT_EQ(PythonRepr(""), "''");
  EXPECT_EQ(PythonRepr("worker"), "'worker'");
  EXPECT_EQ(PythonRepr("it's"), "\"it's\"");
  EXPECT_EQ(PythonRepr("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(PythonRepr("it's \"x\""), "'it\\'s \"x\"'");
  EXPECT_EQ(PythonRepr("a\\b"), "'a\\\\b'");
}

TEST(PythonReprTest, EscapesControlAndNonPrintable) {
  EXPECT_EQ(PythonRepr("a\tb\nc\rd"), "'a\\tb\\nc\\rd'");
  EXPECT_EQ(PythonRepr(std::string("\0\x1f\x7f", 3)), "'\\x00\\x1f\\x7f'");
  EXPECT_EQ(PythonRepr("\xc2\x85"), "'\\x85'");  // U+0085, a C1 control
  EXPECT_EQ(PythonRepr("a\xc2\xa0"
                       "b"),
            "'a\\xa0b'");                                      // no-break space
  EXPECT_EQ(PythonRepr("\xe2\x80\x8b"), "'\\u200b'");          // zero-width space
  EXPECT_EQ(PythonRepr("\xef\xbb\xbf"), "'\\ufeff'");          // BOM
  EXPECT_EQ(PythonRepr("\xf3\xb0\x80\x80"), "'\\U000f0000'");  // private use
}

TEST(PythonReprTest, KeepsPrintableUnicodeAndEscapesBrokenBytes) {
  EXPECT_EQ(PythonRepr("h\xc3\xb6st"), "'h\xc3\xb6st'");
  EXPECT_EQ(PythonRepr("\xe6\x97\xa5\xf0\x9f\x98\x80"), "'\xe6\x97\xa5\xf0\x9f\x98\x80'");
  EXPECT_EQ(PythonRepr("a\xff"
                       "b"),
            "'a\\xffb'");
  EXPECT_EQ(PythonRepr("\xc3"), "'\\xc3'");  // truncated sequence
}

TEST(PythonReprTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xed\xbf\xbf"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\x80"));              // stray continuation
  EXPECT_EQ(EscapeInvalidUtf8("ok \xc3\xa9 \xff"), "ok \xc3\xa9 \\xff");
}

}  // namespace
}  // namespace drover

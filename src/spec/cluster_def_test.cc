// ClusterDef encoding: TensorFlow's ServerDefTest and ClusterSpecTest proto
// cases, byte-exact determinism, and decoding of hand-written encodings.

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cluster.pb.h"
#include "drover/cluster_spec.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Code = Status::Code;

// ---- A tiny protobuf encoder, independent of libprotobuf ----

std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}
std::string Tag(int field, int wire_type) {
  return Varint(static_cast<uint64_t>(field) << 3 | wire_type);
}
std::string VarintField(int field, uint64_t value) {
  return Tag(field, 0) + Varint(value);
}
std::string LenField(int field, const std::string& payload) {
  return Tag(field, 2) + Varint(payload.size()) + payload;
}
// JobDef.tasks entry: key = 1 (int32 varint), value = 2 (string).
std::string Entry(int32_t key, const std::string& value) {
  return LenField(
      2, VarintField(1, static_cast<uint64_t>(static_cast<int64_t>(key))) + LenField(2, value));
}
std::string JobDef(const std::string& name, const std::vector<std::string>& entries) {
  std::string payload = LenField(1, name);
  for (const std::string& entry : entries) payload += entry;
  return LenField(1, payload);  // ClusterDef.job = 1
}

ClusterSpec Dense(std::vector<std::pair<std::string, std::vector<std::string>>> jobs) {
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) EXPECT_OK(spec.AddJob(name, tasks));
  return spec;
}

// assertProtoEquals(expected_text, bytes).
void ExpectProtoEquals(const std::string& expected_text, const std::string& bytes) {
  tf::ClusterDef expected;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(expected_text, &expected));
  tf::ClusterDef actual;
  ASSERT_TRUE(actual.ParseFromString(bytes));
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(expected, actual)) << diff;
}

// TensorFlow's _verifyClusterSpecEquality: the proto, a copy, a proto round
// trip and a dict (JSON) round trip all give the same ClusterDef.
void VerifyClusterSpecEquality(const ClusterSpec& spec, const std::string& expected_text) {
  ExpectProtoEquals(expected_text, spec.AsClusterDef());
  ClusterSpec copy = spec;
  ExpectProtoEquals(expected_text, copy.AsClusterDef());
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_def, ClusterSpec::FromClusterDef(spec.AsClusterDef()));
  ExpectProtoEquals(expected_text, from_def.AsClusterDef());
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_dict, ClusterSpec::FromJson(spec.ToJson()));
  ExpectProtoEquals(expected_text, from_dict.AsClusterDef());
}

// ---- TensorFlow's ServerDefTest (server_lib_test.py) ----

TEST(TensorFlowServerDefTest, LocalServer) {
  VerifyClusterSpecEquality(Dense({{"local", {"localhost:2222"}}}),
                            "job { name: 'local' tasks { key: 0 value: 'localhost:2222' } }");
}

TEST(TensorFlowServerDefTest, TwoProcesses) {
  VerifyClusterSpecEquality(Dense({{"local", {"localhost:2222", "localhost:2223"}}}),
                            "job { name: 'local' tasks { key: 0 value: 'localhost:2222' }"
                            "                    tasks { key: 1 value: 'localhost:2223' } }");
}

TEST(TensorFlowServerDefTest, TwoJobs) {
  VerifyClusterSpecEquality(
      Dense({{"ps", {"ps0:2222", "ps1:2222"}},
             {"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}}),
      "job { name: 'ps' tasks { key: 0 value: 'ps0:2222' } tasks { key: 1 value: 'ps1:2222' } }"
      "job { name: 'worker' tasks { key: 0 value: 'worker0:2222' }"
      "                     tasks { key: 1 value: 'worker1:2222' }"
      "                     tasks { key: 2 value: 'worker2:2222' } }");
}

TEST(TensorFlowServerDefTest, DenseAndSparseJobs) {
  ClusterSpec spec = Dense({{"ps", {"ps0:2222", "ps1:2222"}}});
  ASSERT_OK(spec.AddSparseJob("worker", {{0, "worker0:2222"}, {2, "worker2:2222"}}));
  VerifyClusterSpecEquality(
      spec,
      "job { name: 'ps' tasks { key: 0 value: 'ps0:2222' } tasks { key: 1 value: 'ps1:2222' } }"
      "job { name: 'worker' tasks { key: 0 value: 'worker0:2222' }"
      "                     tasks { key: 2 value: 'worker2:2222' } }");
}

// ---- TensorFlow's ClusterSpecTest proto cases ----

TEST(TensorFlowClusterSpecTest, ProtoDictDefEquivalences) {
  VerifyClusterSpecEquality(
      Dense({{"ps", {"ps0:2222", "ps1:2222"}},
             {"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}}),
      "job { name: 'ps' tasks { key: 0 value: 'ps0:2222' } tasks { key: 1 value: 'ps1:2222' } }"
      "job { name: 'worker' tasks { key: 0 value: 'worker0:2222' }"
      "                     tasks { key: 1 value: 'worker1:2222' }"
      "                     tasks { key: 2 value: 'worker2:2222' } }");
}

TEST(TensorFlowClusterSpecTest, ProtoDictDefEquivalencesWithZeroWorker) {
  VerifyClusterSpecEquality(
      Dense({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {}}}),
      "job { name: 'ps' tasks { key: 0 value: 'ps0:2222' } tasks { key: 1 value: 'ps1:2222' } }"
      "job { name: 'worker' }");
}

// ---- Encoding ----

TEST(ClusterDefTest, BytesAreExactlyTheDocumentedEncoding) {
  ClusterSpec spec = Dense({{"worker", {"w0:1", "w1:1"}}, {"ps", {}}});
  ASSERT_OK(spec.AddSparseJob("chief", {{3, "c:1"}}));
  // Jobs by name; tasks by index; each entry writes key then value.
  const std::string expected = JobDef("chief", {Entry(3, "c:1")}) + JobDef("ps", {}) +
                               JobDef("worker", {Entry(0, "w0:1"), Entry(1, "w1:1")});
  EXPECT_EQ(spec.AsClusterDef(), expected);
}

TEST(ClusterDefTest, LiteralBytesOfOneTask) {
  ClusterSpec spec = Dense({{"local", {"localhost:2222"}}});
  const std::string expected(
      "\x0a\x1b"                 // job, 27 bytes
      "\x0a\x05local"            //   name
      "\x12\x12"                 //   tasks entry, 18 bytes
      "\x08\x00"                 //     key 0
      "\x12\x0elocalhost:2222",  //     value
      29);
  EXPECT_EQ(spec.AsClusterDef(), expected);
}

TEST(ClusterDefTest, DefaultKeyAndEmptyValueAreStillWritten) {
  ClusterSpec spec = Dense({{"j", {""}}});
  EXPECT_EQ(spec.AsClusterDef(), JobDef("j", {Entry(0, "")}));
}

TEST(ClusterDefTest, EmptySpecIsEmptyBytes) {
  EXPECT_EQ(ClusterSpec().AsClusterDef(), "");
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(""));
  EXPECT_TRUE(spec.empty());
}

TEST(ClusterDefTest, EqualSpecsGiveIdenticalBytes) {
  // The same cluster built in two different orders, with enough tasks that a
  // hash map would iterate out of order.
  std::vector<int> order(300);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 random(42);
  std::shuffle(order.begin(), order.end(), random);

  ClusterSpec a;
  ClusterSpec b;
  for (int i : order) ASSERT_OK(a.SetTask("worker", i * 7, "w" + std::to_string(i) + ":1"));
  ASSERT_OK(a.AddJob("ps", {"p0:1", "p1:1"}));
  ASSERT_OK(b.AddJob("ps", {"p0:1", "p1:1"}));
  for (int i = 0; i < 300; ++i)
    ASSERT_OK(b.SetTask("worker", i * 7, "w" + std::to_string(i) + ":1"));
  ASSERT_EQ(a, b);
  const std::string bytes = a.AsClusterDef();
  EXPECT_EQ(bytes, b.AsClusterDef());
  EXPECT_EQ(bytes, a.AsClusterDef());  // and stable across calls

  std::vector<std::string> entries;
  for (int i = 0; i < 300; ++i) entries.push_back(Entry(i * 7, "w" + std::to_string(i) + ":1"));
  EXPECT_EQ(bytes, JobDef("ps", {Entry(0, "p0:1"), Entry(1, "p1:1")}) + JobDef("worker", entries));
}

TEST(ClusterDefTest, RoundTripKeepsEverything) {
  ClusterSpec spec = Dense({{"worker", {"w0:1", "w1:1"}}, {"empty", {}}});
  ASSERT_OK(spec.AddSparseJob("sparse", {{5, "s5:1"}, {2147483647, "big:1"}}));
  ASSERT_OK(spec.AddJob("h\xc3\xb6st", {"\xe6\x97\xa5:1"}));
  ASSERT_OK_AND_ASSIGN(ClusterSpec back, ClusterSpec::FromClusterDef(spec.AsClusterDef()));
  EXPECT_EQ(back, spec);
  EXPECT_EQ(back.AsClusterDef(), spec.AsClusterDef());
  // Decoded jobs come in ClusterDef (sorted) order.
  EXPECT_THAT(back.jobs(), ElementsAre("empty", "h\xc3\xb6st", "sparse", "worker"));
  EXPECT_TRUE(back.is_dense("worker"));
  EXPECT_FALSE(back.is_dense("empty"));
}

// ---- Decoding hand-written encodings ----

TEST(ClusterDefDecodeTest, TaskEntriesInReverseOrder) {
  const std::string bytes =
      JobDef("worker", {Entry(2, "w2:1"), Entry(1, "w1:1"), Entry(0, "w0:1")});
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(bytes));
  EXPECT_EQ(spec, Dense({{"worker", {"w0:1", "w1:1", "w2:1"}}}));
}

TEST(ClusterDefDecodeTest, FieldsOutOfOrder) {
  // JobDef with tasks before name; a map entry with value before key.
  std::string entry = LenField(2, LenField(2, "w3:1") + VarintField(1, 3));
  std::string job = LenField(1, entry + Entry(0, "w0:1") + LenField(1, "worker"));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(job));
  EXPECT_THAT(spec.task_indices("worker").value(), ElementsAre(0, 3));
  EXPECT_EQ(spec.task_address("worker", 3).value(), "w3:1");
}

TEST(ClusterDefDecodeTest, UnknownFieldsAreSkipped) {
  std::string unknown =
      VarintField(7, 12345) + LenField(9, "junk") + Tag(5, 5) + "abcd" + Tag(6, 1) + "12345678";
  std::string entry = LenField(2, VarintField(1, 1) + VarintField(3, 99) + LenField(2, "w1:1"));
  std::string job = LenField(1, LenField(1, "worker") + LenField(4, "x") + entry);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(unknown + job + unknown));
  EXPECT_EQ(spec.jobs(), std::vector<std::string>{"worker"});
  EXPECT_EQ(spec.job_task_map("worker").value(), (ClusterSpec::TaskMap{{1, "w1:1"}}));
}

TEST(ClusterDefDecodeTest, DuplicateMapKeyLastWins) {
  const std::string bytes = JobDef("worker", {Entry(0, "old:1"), Entry(0, "new:1")});
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(bytes));
  EXPECT_EQ(spec.task_address("worker", 0).value(), "new:1");
  EXPECT_EQ(spec.num_tasks("worker").value(), 1);
}

TEST(ClusterDefDecodeTest, MissingKeyOrValueTakesTheDefault) {
  std::string no_key = LenField(2, LenField(2, "zero:1"));
  std::string no_value = LenField(2, VarintField(1, 1));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(
                                             LenField(1, LenField(1, "j") + no_key + no_value)));
  EXPECT_EQ(spec.job_task_map("j").value(), (ClusterSpec::TaskMap{{0, "zero:1"}, {1, ""}}));
}

TEST(ClusterDefDecodeTest, JobNamedTwiceKeepsLastTasksAtFirstPosition) {
  const std::string bytes = JobDef("worker", {Entry(0, "old:1"), Entry(1, "old:2")}) +
                            JobDef("ps", {Entry(0, "p:1")}) + JobDef("worker", {Entry(5, "new:1")});
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(bytes));
  EXPECT_THAT(spec.jobs(), ElementsAre("worker", "ps"));
  EXPECT_EQ(spec.job_task_map("worker").value(), (ClusterSpec::TaskMap{{5, "new:1"}}));
}

TEST(ClusterDefDecodeTest, ConcatenatedMessagesMerge) {
  // Protobuf semantics: concatenation is a merge, so jobs accumulate.
  const std::string bytes =
      Dense({{"ps", {"p:1"}}}).AsClusterDef() + Dense({{"worker", {"w:1"}}}).AsClusterDef();
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, ClusterSpec::FromClusterDef(bytes));
  EXPECT_EQ(spec, Dense({{"ps", {"p:1"}}, {"worker", {"w:1"}}}));
}

TEST(ClusterDefDecodeTest, RejectsGarbage) {
  const std::string valid = Dense({{"worker", {"w0:2222"}}}).AsClusterDef();
  const std::vector<std::string> garbage = {
      valid.substr(0, valid.size() - 1),           // truncated
      std::string("\x0a\xff\xff\xff\xff\x0f", 6),  // length far past the end
      std::string("\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12),  // 11-byte varint
      std::string("\x0c", 1),  // end-group with no start
      std::string("\x0f", 1),  // wire type 7
      std::string("\x00", 1),  // field number 0
      "hello, world",
  };
  for (const std::string& bytes : garbage) {
    EXPECT_THAT(ClusterSpec::FromClusterDef(bytes),
                StatusIs(Code::kInvalidArgument, HasSubstr("not a serialized")))
        << ::testing::PrintToString(bytes);
  }
}

TEST(ClusterDefDecodeTest, RejectsInvalidUtf8) {
  EXPECT_THAT(ClusterSpec::FromClusterDef(JobDef("w\xff", {Entry(0, "a:1")})),
              StatusIs(Code::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ClusterSpec::FromClusterDef(JobDef("w", {Entry(0, "a\xff:1")})),
              StatusIs(Code::kInvalidArgument, ::testing::_));
}

TEST(ClusterDefDecodeTest, RejectsNegativeIndexAndEmptyName) {
  EXPECT_THAT(ClusterSpec::FromClusterDef(JobDef("worker", {Entry(-1, "a:1")})),
              StatusIs(Code::kInvalidArgument, HasSubstr("negative task index -1")));
  EXPECT_THAT(ClusterSpec::FromClusterDef(JobDef("", {Entry(0, "a:1")})),
              StatusIs(Code::kInvalidArgument, HasSubstr("empty name")));
}

}  // namespace
}  // namespace drover

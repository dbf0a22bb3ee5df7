#include "drover/hostlist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Hosts(std::string_view input) {
  Result<std::vector<std::string>> hosts = ExpandHostlist(input);
  EXPECT_OK(hosts) << input;
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

std::vector<int> Counts(std::string_view input) {
  Result<std::vector<int>> counts = ExpandTasksPerNode(input);
  EXPECT_OK(counts) << input;
  return counts.ok() ? *counts : std::vector<int>{};
}

// TensorFlow's test_expand_hostlist.
TEST(ExpandHostlistTest, TensorFlowCases) {
  EXPECT_THAT(Hosts("n1"), ElementsAre("n1"));
  EXPECT_THAT(Hosts("n[1,3]"), ElementsAre("n1", "n3"));
  EXPECT_THAT(Hosts("n[1-3]"), ElementsAre("n1", "n2", "n3"));
  EXPECT_THAT(Hosts("n[1-2],m5,o[3-4,6,7-9]"),
              ElementsAre("n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"));
  EXPECT_THAT(Hosts("n[0001-0003],m5,o[009-011]"),
              ElementsAre("n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"));
}

TEST(ExpandHostlistTest, ZeroPaddingFollowsTheLowBound) {
  EXPECT_THAT(Hosts("n[1-3,05-07],m[01-02]"),
              ElementsAre("n1", "n2", "n3", "n05", "n06", "n07", "m01", "m02"));
  EXPECT_THAT(Hosts("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(Hosts("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(Hosts("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(Hosts("n[0-1]"), ElementsAre("n0", "n1"));
}

TEST(ExpandHostlistTest, SeveralGroupsAreACartesianProduct) {
  EXPECT_THAT(Hosts("a[1-2]b[3-4]"), ElementsAre("a1b3", "a1b4", "a2b3", "a2b4"));
  EXPECT_THAT(Hosts("rack[1-2]-n[01,03]"),
              ElementsAre("rack1-n01", "rack1-n03", "rack2-n01", "rack2-n03"));
  EXPECT_THAT(Hosts("n[8-10]-ib"), ElementsAre("n8-ib", "n9-ib", "n10-ib"));
  EXPECT_THAT(Hosts("[1-2]"), ElementsAre("1", "2"));
}

TEST(ExpandHostlistTest, OrderIsKeptAndNothingIsDeduplicated) {
  EXPECT_THAT(Hosts("n10,n2,n1,n2"), ElementsAre("n10", "n2", "n1", "n2"));
}

TEST(ExpandHostlistTest, WhitespaceSeparatesAndIsTrimmed) {
  EXPECT_THAT(Hosts("  n1, n2\tn[3-4]\n"), ElementsAre("n1", "n2", "n3", "n4"));
  EXPECT_THAT(Hosts("n1 , n2"), ElementsAre("n1", "n2"));
  EXPECT_THAT(Hosts(""), IsEmpty());
  EXPECT_THAT(Hosts("   "), IsEmpty());
}

TEST(ExpandHostlistTest, HostNamesKeepOtherCharacters) {
  EXPECT_THAT(Hosts("node-1.cluster.local,10.0.0.[1-2]"),
              ElementsAre("node-1.cluster.local", "10.0.0.1", "10.0.0.2"));
}

TEST(ExpandHostlistTest, MalformedInputNamesTheInputAndPosition) {
  struct Case {
    const char* input;
    const char* message;
  };
  const Case cases[] = {
      {"n[1-3", "position 5: unclosed '['"},
      {"n[1-", "position 4: expected a number, got the end of the input"},
      {"n[]", "position 2: expected a number, got ']'"},
      {"n[a]", "position 2: expected a number, got 'a'"},
      {"n[1-2[3]]", "position 5: nested '['"},
      {"n[1;2]", "position 3: expected ',', '-' or ']'"},
      {"n1]", "position 2: ']' without '['"},
      {"n[5-3]", "position 2: range 5-3 ends below its start"},
      {"n1,,n2", "position 3: empty host name"},
      {",n1", "position 0: empty host name"},
      {"n1,", "position 3: empty host name after ','"},
      {"n[1234567890123456789]", "position 2: number longer than 18 digits"},
      {"n[1 - 2]", "position 3"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(
        ExpandHostlist(c.input),
        StatusIs(Status::Code::kInvalidArgument,
                 AllOf(HasSubstr(std::string("\"") + c.input + "\""), HasSubstr(c.message))))
        << c.input;
  }
}

TEST(ExpandHostlistTest, HugeExpansionsFailInsteadOfExhaustingMemory) {
  EXPECT_THAT(ExpandHostlist("n[0-999999999]"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("more than 1048576 hosts")));
  // Each group is small; their product is not.
  EXPECT_THAT(ExpandHostlist("a[0-999]b[0-999]c[0-999]"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("more than 1048576 hosts")));
  // The limit counts across entries.
  EXPECT_THAT(ExpandHostlist("a[0-599999],b[0-599999]"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("position 12")));
  // Under the host limit, over the byte limit.
  std::string long_name(100, 'x');
  EXPECT_THAT(ExpandHostlist(long_name + "[0-999999]"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("bytes of host names")));
}

TEST(ExpandHostlistTest, ExactlyTheLimitIsAccepted) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> hosts, ExpandHostlist("[0-1048575]"));
  EXPECT_EQ(hosts.size(), kMaxHostlistEntries);
  EXPECT_EQ(hosts.back(), "1048575");
  EXPECT_THAT(ExpandHostlist("[0-1048576]"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("hosts")));
}

// TensorFlow's test_expand_tasks_per_node.
TEST(ExpandTasksPerNodeTest, TensorFlowCases) {
  EXPECT_THAT(Counts("2"), ElementsAre(2));
  EXPECT_THAT(Counts("2,1,3"), ElementsAre(2, 1, 3));
  EXPECT_THAT(Counts("3(x2),2,1"), ElementsAre(3, 3, 2, 1));
  EXPECT_THAT(Counts("3(x2),2,11(x4)"), ElementsAre(3, 3, 2, 11, 11, 11, 11));
  EXPECT_THAT(Counts("13(x10)"), ElementsAre(13, 13, 13, 13, 13, 13, 13, 13, 13, 13));
}

TEST(ExpandTasksPerNodeTest, BriefExampleAndWhitespace) {
  EXPECT_THAT(Counts("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(Counts(" 2(x2) , 1 "), ElementsAre(2, 2, 1));
  EXPECT_THAT(Counts("0,1"), ElementsAre(0, 1));
}

TEST(ExpandTasksPerNodeTest, MalformedInputNamesTheInputAndPosition) {
  struct Case {
    const char* input;
    const char* message;
  };
  const Case cases[] = {
      {"", "position 0: empty"},
      {"a", "position 0: expected a number"},
      {"2,", "position 2: expected a number"},
      {"2(3)", "position 2: expected 'x' after '('"},
      {"2(x)", "position 3: expected a number"},
      {"2(x3", "position 4: expected ')'"},
      {"2(x0)", "position 1: repeat count (x0) must be positive"},
      {"2 3", "position 2: expected ',' or '(x<repeat>)', got '3'"},
      {"-1", "position 0: expected a number"},
      {"99999999999", "number too large"},
      {"1(x1048577)", "more than 1048576 nodes"},
      {"1(x1048576),1", "more than 1048576 nodes"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(
        ExpandTasksPerNode(c.input),
        StatusIs(Status::Code::kInvalidArgument,
                 AllOf(HasSubstr(std::string("\"") + c.input + "\""), HasSubstr(c.message))))
        << c.input;
  }
}

}  // namespace
}  // namespace drover

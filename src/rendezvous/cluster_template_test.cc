#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "drover/rendezvous.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ClusterTemplateTest, SlotsFollowTensorFlowOnSparkOrder) {
  ClusterTemplate t{.num_nodes = 6, .num_ps = 2, .master_node = "chief", .eval_node = true};
  ASSERT_OK(t.Validate());
  std::vector<std::pair<std::string, int>> slots;
  for (int i = 0; i < t.num_nodes; ++i) slots.push_back(t.Slot(i));
  EXPECT_EQ(
      slots,
      (std::vector<std::pair<std::string, int>>{
          {"ps", 0}, {"ps", 1}, {"chief", 0}, {"evaluator", 0}, {"worker", 0}, {"worker", 1}}));
}

TEST(ClusterTemplateTest, WorkersOnlyByDefault) {
  ClusterTemplate t{.num_nodes = 3};
  ASSERT_OK(t.Validate());
  EXPECT_EQ(t.Slot(2), std::make_pair(std::string("worker"), 2));
}

TEST(ClusterTemplateTest, RejectsRolesThatDoNotFit) {
  EXPECT_THAT((ClusterTemplate{.num_nodes = 2, .num_ps = 2, .master_node = "chief"}.Validate()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("2 nodes cannot hold 2 ps")));
  EXPECT_THAT((ClusterTemplate{.num_nodes = 0}.Validate()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("at least one node")));
  EXPECT_THAT((ClusterTemplate{.num_nodes = 2, .master_node = "boss"}.Validate()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("boss")));
}

class ClusterTokenTest : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("drover-token-test-" + std::to_string(::getpid()) + "-" +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
};

TEST_F(ClusterTokenTest, WritesA0600FileAndReadsItBack) {
  ASSERT_OK_AND_ASSIGN(ClusterToken token, ClusterToken::Generate());
  EXPECT_EQ(token.bytes.size(), 32u);
  std::string path = (dir_ / "token").string();
  ASSERT_OK(token.WriteFile(path));
  auto perms = std::filesystem::status(path).permissions();
  EXPECT_EQ(perms & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ASSERT_OK_AND_ASSIGN(ClusterToken read, ClusterToken::ReadFile(path));
  EXPECT_EQ(read.bytes, token.bytes);
}

TEST_F(ClusterTokenTest, TwoTokensDiffer) {
  ASSERT_OK_AND_ASSIGN(ClusterToken a, ClusterToken::Generate());
  ASSERT_OK_AND_ASSIGN(ClusterToken b, ClusterToken::Generate());
  EXPECT_NE(a.bytes, b.bytes);
}

TEST_F(ClusterTokenTest, RefusesAFileOthersCanRead) {
  std::string path = (dir_ / "open").string();
  std::ofstream(path) << std::string(64, 'a') << "\n";
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                std::filesystem::perms::group_read | std::filesystem::perms::others_read);
  EXPECT_THAT(ClusterToken::ReadFile(path),
              StatusIs(Status::Code::kPermissionDenied, HasSubstr("chmod 600 " + path)));
}

TEST_F(ClusterTokenTest, MissingAndMalformedFilesNameThePath) {
  std::string missing = (dir_ / "missing").string();
  EXPECT_THAT(ClusterToken::ReadFile(missing),
              StatusIs(Status::Code::kNotFound, HasSubstr(missing)));
  std::string bad = (dir_ / "bad").string();
  std::ofstream(bad) << "not hex at all";
  std::filesystem::permissions(
      bad, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_THAT(ClusterToken::ReadFile(bad),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr(bad)));
}

TEST_F(ClusterTokenTest, HexRoundTrip) {
  ASSERT_OK_AND_ASSIGN(ClusterToken token, ClusterToken::FromHex(std::string(62, '0') + "ff"));
  EXPECT_EQ(token.bytes.back(), 0xff);
  EXPECT_THAT(ClusterToken::FromHex("abc"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("64")));
  EXPECT_THAT(ClusterToken::FromHex(std::string(64, 'z')),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("hex")));
}

}  // namespace
}  // namespace drover

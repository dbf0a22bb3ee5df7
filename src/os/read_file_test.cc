#include "os/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover::os {
namespace {

using ::drover::testing::StatusIs;
using ::drover::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.File(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadFileCappedTest, ReadsAFileUpToTheCap) {
  TempDir dir;
  const std::string text(100'000, 'x');  // more than one read
  ASSERT_OK_AND_ASSIGN(std::string read,
                       ReadFileCapped(Write(dir, "a", text), text.size(), "hosts file"));
  EXPECT_EQ(read, text);
  ASSERT_OK_AND_ASSIGN(read, ReadFileCapped(Write(dir, "empty", ""), 0, "hosts file"));
  EXPECT_EQ(read, "");
}

TEST(ReadFileCappedTest, ALargerFileIsRefusedNamingItAndTheCap) {
  TempDir dir;
  const std::string path = Write(dir, "big", std::string(101, 'x'));
  EXPECT_THAT(ReadFileCapped(path, 100, "resource spec"),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("resource spec '" + path + "' is larger than 100 bytes")));
}

TEST(ReadFileCappedTest, AnEndlessFileStopsAtTheCap) {
  EXPECT_THAT(ReadFileCapped("/dev/zero", 1 << 20, "hosts file"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("larger than 1048576 bytes")));
}

TEST(ReadFileCappedTest, MissingAndUnreadableFilesAreIoErrors) {
  EXPECT_THAT(ReadFileCapped("/nonexistent/spec.yml", 100, "resource spec"),
              StatusIs(Status::Code::kIoError,
                       AllOf(HasSubstr("cannot open resource spec '/nonexistent/spec.yml'"),
                             HasSubstr("No such file"))));
  TempDir dir;
  EXPECT_THAT(ReadFileCapped(dir.path(), 100, "hosts file"),
              StatusIs(Status::Code::kIoError, HasSubstr("cannot read hosts file")));
}

}  // namespace
}  // namespace drover::os

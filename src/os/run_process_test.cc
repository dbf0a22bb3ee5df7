#include "os/run_process.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "testing/status_matchers.h"

namespace drover::os {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;

// A command that answers before it reads its input must not deadlock with
// the writer: a megabyte each way, both larger than a pipe.
TEST(RunProcessTest, InputAndOutputMoveTogether) {
  const std::string input(1 << 20, 'i');
  ASSERT_OK_AND_ASSIGN(
      CommandResult result,
      RunProcess({"sh", "-c", "head -c 1048576 /dev/zero; wc -c; echo done >&2"}, input, 60));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output.size(), (1u << 20) + std::string("1048576\n").size());
  EXPECT_EQ(result.output.substr(1 << 20), "1048576\n");
  EXPECT_EQ(result.error, "done\n");
}

TEST(RunProcessTest, CommandThatReadsNothingStillEnds) {
  ASSERT_OK_AND_ASSIGN(CommandResult result,
                       RunProcess({"sh", "-c", "exit 3"}, std::string(1 << 20, 'x'), 60));
  EXPECT_EQ(result.exit_code, 3);
}

TEST(RunProcessTest, AKilledCommandHasTheShellsExitCode) {
  ASSERT_OK_AND_ASSIGN(CommandResult result, RunProcess({"sh", "-c", "kill -KILL $$"}, "", 60));
  EXPECT_EQ(result.exit_code, 128 + 9);
}

TEST(RunProcessTest, MissingProgramIsAnIoErrorNamingIt) {
  EXPECT_THAT(RunProcess({"/no/such/program"}, "", 10),
              StatusIs(Status::Code::kIoError, HasSubstr("/no/such/program")));
}

TEST(RunProcessTest, ACommandPastItsTimeIsADeadlineNamingIt) {
  EXPECT_THAT(RunProcess({"sleep", "30"}, "", 1),
              StatusIs(Status::Code::kDeadlineExceeded, HasSubstr("sleep gave no answer in 1 s")));
}

}  // namespace
}  // namespace drover::os

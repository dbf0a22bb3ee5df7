#include "os/shell_quote.h"

#include <gtest/gtest.h>

#include <string>

#include "os/run_process.h"
#include "testing/status_matchers.h"

namespace drover::os {
namespace {

// What `sh -c` prints for `command`.
std::string ThroughShell(const std::string& command) {
  Result<CommandResult> result = RunProcess({"sh", "-c", command}, "", 60);
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? result->output : "";
}

TEST(ShellQuoteTest, PlainWordsStayAsTheyAre) {
  EXPECT_EQ(ShellQuote("train.py"), "train.py");
  EXPECT_EQ(ShellQuote("/usr/bin/python3"), "/usr/bin/python3");
  EXPECT_EQ(ShellQuote("--lr=3e-3"), "--lr=3e-3");
}

TEST(ShellQuoteTest, EveryOtherWordReachesTheProgramUnchanged) {
  for (std::string word : {std::string(""), std::string("it's"), std::string("a b"),
                           std::string("$HOME `id` $(id) \"q\" \\ * ? ~ ; | &"),
                           std::string("line\nbreak"), std::string("'''")}) {
    EXPECT_EQ(ThroughShell("printf %s " + ShellQuote(word)), word) << word;
  }
}

TEST(ShellJoinTest, JoinsQuotedWords) {
  EXPECT_EQ(ShellJoin({"python3", "-c", "print('hi')"}), "python3 -c 'print('\\''hi'\\'')'");
}

}  // namespace
}  // namespace drover::os

#include "agent/output_tail.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace drover {
namespace {

using ::testing::ElementsAre;

TEST(OutputTailTest, KeepsTheLastLinesAcrossChunksAndStreams) {
  OutputTail tail(3, 100);
  tail.Append(0, "one\ntw");
  tail.Append(1, "err1\n");
  tail.Append(0, "o\nthree\nfour\npartial");
  EXPECT_THAT(tail.Lines(), ElementsAre("two", "three", "four"));
  tail.Finish(0);
  EXPECT_THAT(tail.Lines(), ElementsAre("three", "four", "partial"));
}

TEST(OutputTailTest, CutsLongLinesAndCarriageReturns) {
  OutputTail tail(5, 4);
  tail.Append(0, "abcdefgh\r\nxy\r\n");
  EXPECT_THAT(tail.Lines(), ElementsAre("abcd", "xy"));
}

}  // namespace
}  // namespace drover

#include "driver/line_splitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drover {
namespace {

using Lines = std::vector<std::string>;

// Feeds `chunks` one after the other, then ends the stream.
LineSplitter::Output Split(const std::vector<std::string>& chunks, size_t max = 16) {
  LineSplitter splitter(max);
  LineSplitter::Output out;
  for (const std::string& chunk : chunks) splitter.Feed(chunk, &out);
  splitter.Finish(&out);
  return out;
}

TEST(LineSplitterTest, KeepsThePartialLineAcrossReads) {
  LineSplitter splitter;
  LineSplitter::Output out;
  splitter.Feed("a\nb", &out);
  EXPECT_EQ(out.lines, (Lines{"a"}));
  splitter.Feed("c\r\n\n", &out);
  EXPECT_EQ(out.lines, (Lines{"a", "bc", ""}));
  EXPECT_EQ(out.log, "a\nbc\n\n");
  splitter.Feed("unterminated", &out);
  splitter.Finish(&out);
  EXPECT_EQ(out.lines.back(), "unterminated");
  EXPECT_EQ(out.log, "a\nbc\n\nunterminated\n");
}

TEST(LineSplitterTest, CarriageReturnEndsAProgressBarRedraw) {
  // tqdm: "\r" before every redraw, "\n" after the last.
  LineSplitter::Output out = Split({"\r 10%|#", "    |\r 20%|##   |\r", "100%|#####|\n", "done\n"});
  EXPECT_EQ(out.lines, (Lines{" 10%|#    |", " 20%|##   |", "100%|#####|", "done"}));
  EXPECT_EQ(out.log, " 10%|#    |\n 20%|##   |\n100%|#####|\ndone\n");
}

TEST(LineSplitterTest, CrlfIsOneLineEndEvenWhenSplitBetweenReads) {
  EXPECT_EQ(Split({"a\r", "\nb\r\n"}).lines, (Lines{"a", "b"}));
  // Blank CRLF lines stay; a "\r" after a redraw adds none.
  EXPECT_EQ(Split({"a\r\n\r\nb\r\n"}).lines, (Lines{"a", "", "b"}));
  EXPECT_EQ(Split({"\r\n"}).lines, (Lines{""}));
  EXPECT_EQ(Split({"a\r\r\n"}).lines, (Lines{"a"}));
  EXPECT_EQ(Split({"\r\r\r"}).lines, Lines{});
}

TEST(LineSplitterTest, LongLineIsCutAndMarkedAndTheLogGetsAllOfIt) {
  const std::string mark = LineSplitter::CutMark(16);
  EXPECT_EQ(mark, "\u2026[line cut at 16 bytes]");
  // Shown as soon as it passes the cap, not when (if ever) it ends.
  LineSplitter splitter(16);
  LineSplitter::Output out;
  splitter.Feed("0123456789", &out);
  EXPECT_TRUE(out.lines.empty());
  splitter.Feed("abcdefghij", &out);
  EXPECT_EQ(out.lines, (Lines{"0123456789abcdef" + mark}));
  splitter.Feed(std::string(1000, 'x'), &out);
  splitter.Feed("y\nnext\n", &out);
  EXPECT_EQ(out.lines, (Lines{"0123456789abcdef" + mark, "next"}));
  EXPECT_EQ(out.log, "0123456789abcdefghij" + std::string(1000, 'x') + "y\nnext\n");
}

TEST(LineSplitterTest, ExactlyTheCapIsNotCut) {
  EXPECT_EQ(Split({std::string(16, 'a') + "\n"}).lines, (Lines{std::string(16, 'a')}));
  const std::string mark = LineSplitter::CutMark(16);
  EXPECT_EQ(Split({std::string(17, 'a') + "\n"}).lines, (Lines{std::string(16, 'a') + mark}));
  // A cut line ended by "\r" (a redraw that never ends its line) and the next.
  EXPECT_EQ(Split({std::string(40, 'a') + "\rb\n"}).lines,
            (Lines{std::string(16, 'a') + mark, "b"}));
}

TEST(LineSplitterTest, ManyBytesWithoutANewlineShowOneLineAndLogEveryByte) {
  LineSplitter splitter(1024);
  LineSplitter::Output out;
  const std::string chunk(65536, 'z');
  size_t logged = 0;
  for (int i = 0; i < 256; ++i) {  // 16 MiB
    splitter.Feed(chunk, &out);
    logged += out.log.size();
    out.log.clear();
  }
  EXPECT_EQ(out.lines.size(), 1u);
  EXPECT_EQ(logged, 256u * chunk.size());
  splitter.Finish(&out);
  EXPECT_EQ(out.log, "\n");
}

}  // namespace
}  // namespace drover

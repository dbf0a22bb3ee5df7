#include "driver/progress_line.h"

#include <gtest/gtest.h>

#include <sstream>

namespace drover {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(ProgressLineTest, TerminalRedrawsInPlaceAndErasesBeforeOtherOutput) {
  std::ostringstream out, err;
  ProgressOptions options;
  options.mode = ProgressMode::kTerminal;
  options.terminal_columns = 40;
  ProgressLine line(out, err, options);
  line.Show("1/2 nodes registered", Clock::now());
  EXPECT_EQ(err.str(), "\r\033[K1/2 nodes registered");
  line.out() << "[worker:0] hello\n" << std::flush;
  EXPECT_EQ(err.str(), "\r\033[K1/2 nodes registered\r\033[K");
  EXPECT_EQ(out.str(), "[worker:0] hello\n");
  line.err() << "drover run: note\n";
  line.err().flush();
  // Erased once: nothing was drawn again since.
  EXPECT_EQ(err.str(), "\r\033[K1/2 nodes registered\r\033[Kdrover run: note\n");
}

TEST(ProgressLineTest, TerminalCutsLinesToTheWidth) {
  std::ostringstream out, err;
  ProgressLine line(out, err, {ProgressMode::kTerminal, milliseconds(0), 12});
  line.Show("0123456789abcdef", Clock::now());
  EXPECT_EQ(err.str(), "\r\033[K01234567...");
  line.Clear();
  EXPECT_EQ(err.str(), "\r\033[K01234567...\r\033[K");
}

TEST(ProgressLineTest, PlainPrintsChangedTextOncePerIntervalAfterTheFirst) {
  std::ostringstream out, err;
  ProgressLine line(out, err, {ProgressMode::kPlain, milliseconds(1000), 0});
  Clock::time_point start = Clock::now();
  line.Show("a", start);  // too early: the work just began
  line.Show("b", start + milliseconds(1000));
  line.Show("c", start + milliseconds(1500));  // too soon after b
  line.Show("b", start + milliseconds(2500));  // the same text
  line.Show("d", start + milliseconds(2600));
  line.Show("", start + milliseconds(4000));  // nothing to say
  EXPECT_EQ(err.str(), "b\nd\n");
  EXPECT_EQ(&line.out(), &out);
  EXPECT_EQ(&line.err(), &err);
}

TEST(ProgressLineTest, OffPrintsNothing) {
  std::ostringstream out, err;
  ProgressLine line(out, err, {});
  line.Show("a", Clock::now());
  EXPECT_EQ(err.str(), "");
}

}  // namespace
}  // namespace drover

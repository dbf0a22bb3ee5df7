#include "feed/ingest_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace drover::feed {
namespace {

using Clock = IngestChoice::Clock;
using std::chrono::microseconds;

TEST(ConsumptionClockTest, ASegmentIsTimedFromItsFirstReleaseToItsLast) {
  ConsumptionClock clock;
  const Clock::time_point t0 = Clock::now();
  clock.Mark(100, 1000, 0);
  clock.Mark(200, 2000, 0);
  clock.Mark(300, 3000, 0);
  EXPECT_FALSE(clock.Done(0));
  clock.Observe(100, t0);  // the program starts: queued before it does not count
  clock.Observe(300, t0 + microseconds(2000));
  EXPECT_FALSE(clock.Done(0));  // no later segment yet: more of this one may come
  clock.Mark(400, 5000, 1);
  EXPECT_TRUE(clock.Done(0));
  ASSERT_TRUE(clock.Rate(0).has_value());
  EXPECT_DOUBLE_EQ(*clock.Rate(0), 2000 / 0.002);
  EXPECT_FALSE(clock.Done(1));
  EXPECT_FALSE(clock.Rate(1).has_value());
  clock.Mark(500, 6000, 2);
  clock.Observe(500, t0 + microseconds(3000));  // phase 1 in one release: not timed
  EXPECT_TRUE(clock.Done(1));
  EXPECT_FALSE(clock.Rate(1).has_value());
}

TEST(ConsumptionClockTest, MarksThatDoNotMoveOnAreIgnored) {
  ConsumptionClock clock;
  const Clock::time_point t0 = Clock::now();
  clock.Mark(100, 1000, 0);
  clock.Mark(100, 1500, 0);  // nothing new published
  clock.Mark(200, 2000, 0);
  clock.Mark(300, 2500, 1);
  clock.Observe(100, t0);
  clock.Observe(200, t0 + microseconds(1000));
  ASSERT_TRUE(clock.Rate(0).has_value());
  EXPECT_DOUBLE_EQ(*clock.Rate(0), 1000 / 0.001);
}

// The program's rates, in bytes a second, for the records of each way.
struct ProgramRates {
  double copied;
  double in_place;
  double read_by_program;
};

// A program that takes each published batch at once, at `program`'s rate
// for the way it came, and a feeder that takes every way at the rates
// given. Returns the choice's name once `total` bytes went.
std::string Simulate(ProgramRates program, double map_rate, double read_rate,
                     size_t total = 20'000) {
  IngestChoice choice(Ingest::kMeasure, 1000);
  Clock::time_point now = Clock::now();
  uint64_t position = 0, bytes = 0;
  for (size_t fed = 0; fed < total; fed += 100) {
    const Ingest way = choice.way();
    const double feeder = way == Ingest::kMap ? map_rate : way == Ingest::kRead ? read_rate : 1e12;
    choice.Took(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(100 / feeder)),
        100);
    const uint64_t released = position;  // the program took everything before this batch
    position += 128;
    bytes += 100;
    const double rate = way == Ingest::kExtent       ? program.in_place
                        : way == Ingest::kExtentRead ? program.read_by_program
                                                     : program.copied;
    now += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(100 / rate));
    choice.Published(position, bytes, released, now);
  }
  return choice.Name();
}

TEST(IngestChoiceTest, TheFasterCopyThenExtentsWhenTheProgramTakesThemFaster) {
  EXPECT_EQ(Simulate({.copied = 1e9, .in_place = 2e9, .read_by_program = 1e9}, /*map=*/5e9,
                     /*read=*/4e9),
            "extent");
  EXPECT_EQ(Simulate({1e9, 2e9, 1e9}, 4e9, 5e9), "extent");
}

TEST(IngestChoiceTest, RecordsTheProgramReadsItselfWhenItTakesThemFastest) {
  EXPECT_EQ(Simulate({.copied = 1e9, .in_place = 0.5e9, .read_by_program = 1.5e9}, 5e9, 4e9),
            "extent-read");
  // Both of the program's own ways clearly faster than the copy: the faster.
  EXPECT_EQ(Simulate({1e9, 1.5e9, 2e9}, 5e9, 4e9), "extent-read");
  EXPECT_EQ(Simulate({1e9, 2e9, 1.5e9}, 5e9, 4e9), "extent");
}

TEST(IngestChoiceTest, TheCopyStaysWhenExtentsAreNotClearlyFaster) {
  // A program busy between batches takes both alike: the copy is done on
  // the feeder's core, so it stays.
  EXPECT_EQ(Simulate({1e9, 1.05e9, 1.05e9}, /*map=*/5e9, /*read=*/4e9), "map");
  EXPECT_EQ(Simulate({1e9, 0.5e9, 0.9e9}, 4e9, 5e9), "read");
}

TEST(IngestChoiceTest, NothingIsChosenBeforeTheProbesAreTaken) {
  EXPECT_EQ(Simulate({1e9, 2e9, 2e9}, 5e9, 4e9, /*total=*/10'000), "");
  IngestChoice choice(Ingest::kMeasure, 1000);
  EXPECT_EQ(choice.way(), Ingest::kMap);
  choice.Took(microseconds(1), 1000);
  EXPECT_EQ(choice.way(), Ingest::kRead);
  choice.Took(microseconds(2), 1000);
  // Then in place, read by the program and copied by turns, the copy the
  // faster way.
  for (int round = 0; round < IngestChoice::kRounds; ++round) {
    EXPECT_EQ(choice.way(), Ingest::kExtent);
    choice.Took(microseconds(1), 1000);
    EXPECT_EQ(choice.way(), Ingest::kExtentRead);
    choice.Took(microseconds(1), 1000);
    EXPECT_EQ(choice.way(), Ingest::kMap);
    choice.Took(microseconds(1), 1000);
  }
  // Until the program took the last probe: copied.
  EXPECT_EQ(choice.way(), Ingest::kMap);
  EXPECT_EQ(choice.Name(), "");
}

// One probe slowed by something else on the host does not decide.
TEST(IngestChoiceTest, OneSlowProbeDoesNotDecide) {
  IngestChoice choice(Ingest::kMeasure, 1000);
  Clock::time_point now = Clock::now();
  uint64_t position = 0, bytes = 0;
  int in_place_probes = 0;
  for (size_t fed = 0; fed < 20'000; fed += 100) {
    const Ingest way = choice.way();
    choice.Took(microseconds(1), 100);
    const uint64_t released = position;
    position += 128;
    bytes += 100;
    double rate = way == Ingest::kExtent ? 2e9 : 1e9;
    // The first in-place probe crawls.
    if (way == Ingest::kExtent && fed % 1000 == 0) ++in_place_probes;
    if (way == Ingest::kExtent && in_place_probes == 1) rate = 1e7;
    now += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(100 / rate));
    choice.Published(position, bytes, released, now);
  }
  EXPECT_EQ(choice.Name(), "extent");
  ASSERT_TRUE(choice.in_place_rate().has_value());
  ASSERT_TRUE(choice.copied_rate().has_value());
  EXPECT_GT(*choice.in_place_rate(), 1.5e9);
  EXPECT_LT(*choice.copied_rate(), 1.5e9);
  EXPECT_THAT(choice.Describe(),
              ::testing::HasSubstr("records go in place (the program took them"));
}

TEST(IngestChoiceTest, AForcedWayIsKept) {
  for (Ingest ingest : {Ingest::kMap, Ingest::kRead, Ingest::kExtent, Ingest::kExtentRead}) {
    IngestChoice choice(ingest, 1000);
    choice.Took(microseconds(1), 100'000);
    choice.Published(1 << 20, 100'000, 1 << 20, Clock::now());
    EXPECT_EQ(choice.way(), ingest);
    EXPECT_EQ(choice.Name(), IngestName(ingest));
  }
}

// A feeder whose windows cost `map_ns` and `read_ns` of CPU time a byte
// (the first mapped window `first_map_ns`, as a cold one might), mapped
// windows of `map_window` bytes and read ones of `read_window`; returns the
// ways its windows took, in order, until the choice (or `windows` of them).
std::vector<WindowWay> SimulateWindows(WindowChoice& choice, std::chrono::nanoseconds* cpu,
                                       double map_ns, double read_ns, double first_map_ns = -1,
                                       uint64_t map_window = 32 << 20,
                                       uint64_t read_window = 4 << 20, int windows = 1000) {
  std::vector<WindowWay> ways;
  while (choice.chosen() == Ingest::kMeasure && static_cast<int>(ways.size()) < windows) {
    const WindowWay way = choice.BeginWindow();
    const bool mapped = way == WindowWay::kMap;
    const uint64_t bytes = mapped ? map_window : read_window;
    double ns = mapped ? map_ns : read_ns;
    if (mapped && first_map_ns >= 0 && std::count(ways.begin(), ways.end(), WindowWay::kMap) == 0) {
      ns = first_map_ns;
    }
    *cpu += std::chrono::nanoseconds(static_cast<int64_t>(ns * static_cast<double>(bytes)));
    choice.EndWindow(bytes);
    ways.push_back(way);
  }
  return ways;
}

// A CPU clock the test moves.
WindowChoice::CpuClock ClockAt(std::chrono::nanoseconds* cpu) {
  return [cpu] { return *cpu; };
}

TEST(WindowChoiceTest, ProbesOfEachWayTakeTurnsByBytesMappedFirst) {
  std::chrono::nanoseconds cpu{0};
  WindowChoice choice(Ingest::kMeasure, 32 << 20, ClockAt(&cpu));
  EXPECT_EQ(choice.Name(), "");
  const std::vector<WindowWay> ways = SimulateWindows(choice, &cpu, 0.2, 0.25);
  // One mapped window of 32 MiB, then read ones of 4 MiB up to seven
  // eighths of that (a real window takes in a little less than its size),
  // three times.
  std::vector<WindowWay> expected;
  for (int round = 0; round < WindowChoice::kRounds; ++round) {
    expected.push_back(WindowWay::kMap);
    expected.insert(expected.end(), 7, WindowWay::kRead);
  }
  EXPECT_EQ(ways, expected);
  EXPECT_EQ(choice.Name(), "map");
  ASSERT_TRUE(choice.mapped_rate().has_value());
  ASSERT_TRUE(choice.read_rate().has_value());
  EXPECT_NEAR(*choice.mapped_rate(), 5e9, 1e7);
  EXPECT_NEAR(*choice.read_rate(), 4e9, 1e7);
  EXPECT_THAT(choice.Describe(),
              ::testing::HasSubstr("files are mapped a window at a time (a second of the "
                                   "feeder's CPU time took in 5.0 GB from mapped windows, 4.0 GB "
                                   "from read ones)"));
  // Chosen: every later window goes that way, untimed.
  EXPECT_EQ(choice.BeginWindow(), WindowWay::kMap);
  choice.EndWindow(1 << 20);
  EXPECT_EQ(choice.Name(), "map");
}

TEST(WindowChoiceTest, ReadIsKeptOnlyWhenAtLeastATenthCheaper) {
  struct Case {
    double map_ns, read_ns;
    const char* chosen;
  };
  // A host where page faults are dear (mapping a fifth of read's rate);
  // one where read is a little cheaper; one where mapping is.
  for (const Case& c : {Case{1.0, 0.25, "read"}, Case{0.25, 0.24, "map"}, Case{0.2, 0.25, "map"},
                        Case{0.3, 0.26, "read"}}) {
    SCOPED_TRACE(std::to_string(c.map_ns) + " " + std::to_string(c.read_ns));
    std::chrono::nanoseconds cpu{0};
    WindowChoice choice(Ingest::kMeasure, 1 << 20, ClockAt(&cpu));
    SimulateWindows(choice, &cpu, c.map_ns, c.read_ns, -1, 1 << 20, 1 << 20);
    EXPECT_EQ(choice.Name(), c.chosen);
  }
}

TEST(WindowChoiceTest, OneSlowProbeDoesNotDecide) {
  // The first mapped window crawls (a cold page cache, a busy host): the
  // median of three still finds mapping cheaper.
  std::chrono::nanoseconds cpu{0};
  WindowChoice choice(Ingest::kMeasure, 1 << 20, ClockAt(&cpu));
  SimulateWindows(choice, &cpu, 0.2, 0.25, /*first_map_ns=*/5.0, 1 << 20, 1 << 20);
  EXPECT_EQ(choice.Name(), "map");
}

TEST(WindowChoiceTest, TooFewBytesLeaveItUnchosen) {
  std::chrono::nanoseconds cpu{0};
  WindowChoice choice(Ingest::kMeasure, 32 << 20, ClockAt(&cpu));
  const std::vector<WindowWay> ways =
      SimulateWindows(choice, &cpu, 0.2, 0.25, -1, 32 << 20, 4 << 20, /*windows=*/12);
  EXPECT_EQ(ways.size(), 12u);
  EXPECT_EQ(choice.chosen(), Ingest::kMeasure);
  EXPECT_EQ(choice.Name(), "");
  EXPECT_FALSE(choice.read_rate().has_value());  // one read probe so far
}

TEST(WindowChoiceTest, AForcedWayIsKeptAndUntimed) {
  for (Ingest ingest : {Ingest::kMap, Ingest::kRead}) {
    int clock_reads = 0;
    WindowChoice choice(ingest, 1, [&] {
      ++clock_reads;
      return std::chrono::nanoseconds(0);
    });
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(choice.BeginWindow(), ingest == Ingest::kRead ? WindowWay::kRead : WindowWay::kMap);
      choice.EndWindow(1 << 20);
    }
    EXPECT_EQ(choice.Name(), IngestName(ingest));
    EXPECT_EQ(clock_reads, 0);
  }
  // An end without a beginning (a reader that never filled) is no window.
  std::chrono::nanoseconds cpu{0};
  WindowChoice measuring(Ingest::kMeasure, 1, ClockAt(&cpu));
  measuring.EndWindow(1 << 20);
  EXPECT_EQ(measuring.BeginWindow(), WindowWay::kMap);
}

TEST(WindowChoiceTest, TheThreadsCpuClockMovesWithWorkNotWithSleep) {
  const std::chrono::nanoseconds before = WindowChoice::ThreadCpuTime();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::chrono::nanoseconds slept = WindowChoice::ThreadCpuTime() - before;
  volatile uint64_t sum = 0;
  for (int i = 0; i < 100'000'000; ++i) sum = sum + 1;
  const std::chrono::nanoseconds worked = WindowChoice::ThreadCpuTime() - before - slept;
  // Sleeping took next to no CPU time; the loop (tens of ms) took more.
  EXPECT_GT(worked, 10 * slept);
}

}  // namespace
}  // namespace drover::feed

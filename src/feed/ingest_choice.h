// IngestChoice: which way a feeder brings fixed-size raw records to the
// program (`drover run --feed-ingest`, FeedPlan::ingest), and how it
// measures which way is fastest on the host it runs on; WindowChoice: the
// same for the windows of the files it parses (CSV, JSONL, TFRecord) and
// whole files (docs/feed.md, "How it works").

#ifndef DROVER_FEED_INGEST_CHOICE_H_
#define DROVER_FEED_INGEST_CHOICE_H_

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "feed/feed_plan.h"
#include "feed/record_io.h"

namespace drover::feed {

// How fast the program took its records while the feeder fed them one way
// or another, in segments (IngestChoice's probes): the feeder marks the
// queue position where what it published so far ends, with the record bytes
// before it and the segment they belong to, and notes the time whenever it
// sees the program release up to a mark. A segment's rate runs from the
// first mark of it released to its last, so the time the program took to
// start, and the records queued before it started, do not count.
class ConsumptionClock {
 public:
  using Clock = std::chrono::steady_clock;

  // What was published so far ends at queue `position`, with `record_bytes`
  // record bytes before it, the last of them published in `segment`
  // (segments only grow; negative: not timed).
  void Mark(uint64_t position, uint64_t record_bytes, int segment);
  // The program had released everything before `released` at `now`.
  void Observe(uint64_t released, Clock::time_point now);
  // Whether the program released every mark of `segment` and a later one
  // began: its rate will not change.
  bool Done(int segment) const;
  // Record bytes a second, once Done(segment); nullopt before, or when too
  // little of it was seen to time (two releases at least).
  std::optional<double> Rate(int segment) const;

 private:
  struct Point {
    uint64_t position;
    uint64_t record_bytes;
    int segment;
  };
  struct Span {
    bool seen = false;
    Clock::time_point first, last;
    uint64_t first_bytes = 0, last_bytes = 0;
  };
  std::vector<Point> marks_;
  size_t next_ = 0;          // the first mark not yet released
  std::vector<Span> spans_;  // by segment
};

// To measure (Ingest::kMeasure), the first probe bytes go through a mapping
// (32 MiB by default: one mapped window), the next through read(2), and the
// faster of the two, timed in the feeder, is the way to copy. Then probes of
// three ways follow by turns, kRounds of each: records in place (the program
// reads them from its own mapping of the file), records the program reads
// itself (pread(2) into memory it reuses), and records copied. Whichever
// way the program took fastest is kept (the median of each way's probes,
// timed by ConsumptionClock: one probe slowed by something else on the host
// does not decide), but the program's own ways only when they were at least
// 10% faster than the copy: they put the work on the program's core, where
// the copy is on the feeder's, so a program that computes between batches
// is better off with the copy on a tie. All probes read bytes not read
// before, so a cold page cache slows them alike.
class IngestChoice {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kRounds = 3;

  IngestChoice(Ingest ingest, size_t probe_bytes)
      : ingest_(ingest), probe_bytes_(std::max<size_t>(probe_bytes, 1)) {}

  // The way the next records go: kMap, kRead, kExtent or kExtentRead.
  Ingest way() const;
  // The feeder took `bytes` the way way() said in `spent`.
  void Took(Clock::duration spent, size_t bytes);
  // What the feeder published so far ends at queue `position`, with
  // `record_bytes` record bytes before it; the program had released up to
  // `released` at `now`. Decides once the program took every probe.
  void Published(uint64_t position, uint64_t record_bytes, uint64_t released,
                 Clock::time_point now);
  // The way chosen (or forced); kMeasure while the probes go on.
  Ingest chosen() const { return ingest_; }
  // "map", "read", "extent" or "extent-read" once chosen (or forced), else
  // "".
  std::string Name() const;
  // After a measured choice: what was chosen, on what figures, for the log.
  std::string Describe() const;
  // The median rate, in bytes a second, at which the program took the
  // records of each way's probes: copied, in place from its mapping, read
  // by itself; nullopt where fewer than two probes were timed.
  std::optional<double> copied_rate() const { return Median(kCopied); }
  std::optional<double> in_place_rate() const { return Median(kInPlace); }
  std::optional<double> read_by_program_rate() const { return Median(kReadByProgram); }

 private:
  // The ways the rounds' probes take, in each round's order.
  enum Way { kInPlace = 0, kReadByProgram = 1, kCopied = 2, kWays = 3 };
  // The probe the next records belong to: 0 map, 1 read, then 2 + kWays *
  // i + way for round i; LastSegment() + 1 while waiting for the program
  // to take the last probe.
  int Segment() const;
  static constexpr int LastSegment() { return 1 + kWays * kRounds; }
  double FeederRate(int segment) const;
  // The median over the rounds' probes of one way.
  std::optional<double> Median(Way way) const;
  // The Ingest a probe of `way` is fed by: kExtent, kExtentRead or copy_.
  Ingest IngestOf(Way way) const;
  // The fastest way once every probe was taken: kExtent, kExtentRead or copy_.
  Ingest Fastest() const;

  Ingest ingest_;
  const size_t probe_bytes_;
  Ingest copy_ = Ingest::kMeasure;  // map or read, once the first two probes chose
  std::array<size_t, 2> copy_probe_bytes_{};
  std::array<Clock::duration, 2> copy_probe_times_{};
  size_t round_bytes_ = 0;  // taken since copy_ was chosen
  ConsumptionClock clock_;
};

// Which way a feeder takes in the windows of CSV, JSONL and TFRecord files
// and whole-file raw records (WindowWay), as the plan's ingest says: map, read, or
// measure (the default). To measure, windows of each way follow by turns,
// mapped first, about probe_bytes of each way at a time, kRounds times;
// each window is charged the CPU time the feeder's thread spent from its
// fill to the next (filling it, parsing its records, copying them into the
// queue; thread CPU time, so sleeping for room in the queue does not count,
// and the brief spin before it costs either way alike),
// and the way with the lower median cost a byte is kept, read only when
// at least 10% lower: a mapped byte is copied once, a read one twice, so on
// a tie a mapping leaves more of the memory bus to the program. Not the
// fill alone: where page faults are cheap, read(2) fills a window faster
// than a mapping while the whole window costs less mapped (bench/
// RESULTS.md). Used by one thread, the feeder's.
class WindowChoice final : public WindowPolicy {
 public:
  using CpuClock = std::function<std::chrono::nanoseconds()>;
  static constexpr int kRounds = 3;

  // `cpu_clock`: the CPU time of the calling thread (tests give their own).
  WindowChoice(Ingest ingest, size_t probe_bytes, CpuClock cpu_clock = ThreadCpuTime);
  static std::chrono::nanoseconds ThreadCpuTime();

  WindowWay BeginWindow() override;
  void EndWindow(uint64_t bytes) override;
  // kMap or kRead once chosen (or forced); kMeasure while the probes go on.
  Ingest chosen() const { return ingest_; }
  // "map" or "read" once chosen (or forced), else "".
  std::string Name() const;
  // After a measured choice: what was chosen, on what figures, for the log.
  std::string Describe() const;
  // Bytes taken in a second of the feeder's CPU time, the median over each
  // way's probes; nullopt before two of them were timed.
  std::optional<double> mapped_rate() const { return Median(WindowWay::kMap); }
  std::optional<double> read_rate() const { return Median(WindowWay::kRead); }

 private:
  struct Probe {
    uint64_t bytes = 0;
    std::chrono::nanoseconds cpu{0};
  };
  static constexpr int kProbes = 2 * kRounds;
  // Probe i takes windows mapped when i is even, read when odd.
  static WindowWay WayOf(int probe) { return probe % 2 == 0 ? WindowWay::kMap : WindowWay::kRead; }
  std::optional<double> Median(WindowWay way) const;

  Ingest ingest_;
  const uint64_t probe_bytes_;
  const CpuClock cpu_clock_;
  std::array<Probe, kProbes> probes_{};
  int probe_ = 0;             // the one windows go to now
  bool window_open_ = false;  // begun while measuring and not yet ended
  std::chrono::nanoseconds window_began_{0};
};

}  // namespace drover::feed

#endif  // DROVER_FEED_INGEST_CHOICE_H_

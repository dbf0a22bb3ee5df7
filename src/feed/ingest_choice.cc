#include "feed/ingest_choice.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

namespace drover::feed {
namespace {

// The median of `rates`; nullopt for fewer than two (one says too little).
std::optional<double> MedianOfTwoOrMore(std::vector<double> rates) {
  if (rates.size() < 2) return std::nullopt;
  std::sort(rates.begin(), rates.end());
  const size_t middle = rates.size() / 2;
  return rates.size() % 2 == 1 ? rates[middle] : (rates[middle - 1] + rates[middle]) / 2;
}

}  // namespace

void ConsumptionClock::Mark(uint64_t position, uint64_t record_bytes, int segment) {
  if (segment < 0 || (!marks_.empty() && marks_.back().position >= position)) return;
  if (!marks_.empty()) segment = std::max(segment, marks_.back().segment);
  marks_.push_back({position, record_bytes, segment});
  const auto index = static_cast<size_t>(segment);
  if (spans_.size() <= index) spans_.resize(index + 1);
}

void ConsumptionClock::Observe(uint64_t released, Clock::time_point now) {
  for (; next_ < marks_.size() && marks_[next_].position <= released; ++next_) {
    const Point& mark = marks_[next_];
    Span& span = spans_[static_cast<size_t>(mark.segment)];
    if (!span.seen) {
      span = {true, now, now, mark.record_bytes, mark.record_bytes};
    } else {
      span.last = now;
      span.last_bytes = mark.record_bytes;
    }
  }
}

bool ConsumptionClock::Done(int segment) const {
  if (next_ < marks_.size()) return marks_[next_].segment > segment;
  return next_ > 0 && marks_[next_ - 1].segment > segment;
}

std::optional<double> ConsumptionClock::Rate(int segment) const {
  if (segment < 0 || static_cast<size_t>(segment) >= spans_.size() || !Done(segment)) {
    return std::nullopt;
  }
  const Span& span = spans_[static_cast<size_t>(segment)];
  if (!span.seen || span.last_bytes <= span.first_bytes || span.last <= span.first) {
    return std::nullopt;
  }
  return static_cast<double>(span.last_bytes - span.first_bytes) /
         std::chrono::duration<double>(span.last - span.first).count();
}

int IngestChoice::Segment() const {
  if (copy_ == Ingest::kMeasure) return copy_probe_bytes_[0] < probe_bytes_ ? 0 : 1;
  return 2 + static_cast<int>(std::min<size_t>(round_bytes_ / probe_bytes_, kWays * kRounds));
}

Ingest IngestChoice::way() const {
  if (ingest_ != Ingest::kMeasure) return ingest_;
  const int segment = Segment();
  if (segment < 2) return segment == 0 ? Ingest::kMap : Ingest::kRead;
  if (segment > LastSegment()) return copy_;  // the probes are over: the safe way meanwhile
  return IngestOf(static_cast<Way>((segment - 2) % kWays));
}

Ingest IngestChoice::IngestOf(Way way) const {
  switch (way) {
    case kInPlace:
      return Ingest::kExtent;
    case kReadByProgram:
      return Ingest::kExtentRead;
    default:
      return copy_;
  }
}

double IngestChoice::FeederRate(int segment) const {
  return static_cast<double>(copy_probe_bytes_[static_cast<size_t>(segment)]) /
         std::chrono::duration<double>(copy_probe_times_[static_cast<size_t>(segment)]).count();
}

void IngestChoice::Took(Clock::duration spent, size_t bytes) {
  if (ingest_ != Ingest::kMeasure) return;
  const int segment = Segment();
  if (segment >= 2) {
    round_bytes_ += bytes;
    return;
  }
  copy_probe_bytes_[static_cast<size_t>(segment)] += bytes;
  copy_probe_times_[static_cast<size_t>(segment)] += spent;
  if (segment == 1 && copy_probe_bytes_[1] >= probe_bytes_) {
    copy_ = FeederRate(1) > FeederRate(0) ? Ingest::kRead : Ingest::kMap;
  }
}

void IngestChoice::Published(uint64_t position, uint64_t record_bytes, uint64_t released,
                             Clock::time_point now) {
  if (ingest_ != Ingest::kMeasure) return;
  clock_.Mark(position, record_bytes, Segment());
  clock_.Observe(released, now);
  if (clock_.Done(LastSegment())) ingest_ = Fastest();
}

Ingest IngestChoice::Fastest() const {
  const std::optional<double> copied = copied_rate();
  if (!copied) return copy_;
  Ingest fastest = copy_;
  double best = 1.1 * *copied;
  for (Way way : {kInPlace, kReadByProgram}) {
    const std::optional<double> rate = Median(way);
    if (rate && *rate >= best) {
      fastest = IngestOf(way);
      best = *rate;
    }
  }
  return fastest;
}

std::optional<double> IngestChoice::Median(Way way) const {
  std::vector<double> rates;
  for (int round = 0; round < kRounds; ++round) {
    if (std::optional<double> rate = clock_.Rate(2 + kWays * round + way)) rates.push_back(*rate);
  }
  return MedianOfTwoOrMore(std::move(rates));
}

std::string IngestChoice::Name() const {
  return ingest_ == Ingest::kMeasure ? "" : std::string(IngestName(ingest_));
}

namespace {

std::string Gigabytes(const std::optional<double>& rate) {
  if (!rate) return "an untimed rate";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GB/s", *rate / 1e9);
  return text;
}

}  // namespace

std::string IngestChoice::Describe() const {
  const std::string copy = copy_ == Ingest::kRead ? "read(2)" : "a mapping";
  const std::string figures = " (the program took them at " + Gigabytes(in_place_rate()) +
                              " in place, from its own mapping of the file, at " +
                              Gigabytes(read_by_program_rate()) +
                              " when it read them itself, and at " + Gigabytes(copied_rate()) +
                              " copied from " + copy + ")";
  switch (ingest_) {
    case Ingest::kExtent:
      return "records go in place" + figures;
    case Ingest::kExtentRead:
      return "the program reads the records itself" + figures;
    default:
      return "records are copied from " + copy + figures;
  }
}

WindowChoice::WindowChoice(Ingest ingest, size_t probe_bytes, CpuClock cpu_clock)
    : ingest_(ingest == Ingest::kRead      ? Ingest::kRead
              : ingest == Ingest::kMeasure ? Ingest::kMeasure
                                           : Ingest::kMap),
      probe_bytes_(std::max<size_t>(probe_bytes, 1)),
      cpu_clock_(std::move(cpu_clock)) {}

std::chrono::nanoseconds WindowChoice::ThreadCpuTime() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

WindowWay WindowChoice::BeginWindow() {
  if (ingest_ != Ingest::kMeasure) {
    return ingest_ == Ingest::kRead ? WindowWay::kRead : WindowWay::kMap;
  }
  window_open_ = true;
  window_began_ = cpu_clock_();
  return WayOf(probe_);
}

void WindowChoice::EndWindow(uint64_t bytes) {
  if (!window_open_) return;
  window_open_ = false;
  Probe& probe = probes_[static_cast<size_t>(probe_)];
  probe.bytes += bytes;
  probe.cpu += cpu_clock_() - window_began_;
  // Seven eighths will do: a window takes in a little less than its size
  // (the record cut at its end goes to the next), and a probe of one 32 MiB
  // mapping should not need a second for that.
  if (probe.bytes < probe_bytes_ - probe_bytes_ / 8 || ++probe_ < kProbes) return;
  const std::optional<double> mapped = mapped_rate();
  const std::optional<double> read = read_rate();
  ingest_ = mapped && read && *read * 0.9 >= *mapped ? Ingest::kRead : Ingest::kMap;
}

std::optional<double> WindowChoice::Median(WindowWay way) const {
  std::vector<double> rates;
  for (int i = 0; i < probe_; ++i) {
    const Probe& probe = probes_[static_cast<size_t>(i)];
    if (WayOf(i) != way || probe.bytes == 0 || probe.cpu.count() <= 0) continue;
    rates.push_back(static_cast<double>(probe.bytes) /
                    std::chrono::duration<double>(probe.cpu).count());
  }
  return MedianOfTwoOrMore(std::move(rates));
}

std::string WindowChoice::Name() const {
  return ingest_ == Ingest::kMeasure ? "" : std::string(IngestName(ingest_));
}

std::string WindowChoice::Describe() const {
  auto per_cpu_second = [](const std::optional<double>& rate) {
    if (!rate) return std::string("an untimed amount");
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f GB", *rate / 1e9);
    return std::string(text);
  };
  return std::string(ingest_ == Ingest::kRead ? "files are read(2) a window at a time"
                                              : "files are mapped a window at a time") +
         " (a second of the feeder's CPU time took in " + per_cpu_second(mapped_rate()) +
         " from mapped windows, " + per_cpu_second(read_rate()) + " from read ones)";
}

}  // namespace drover::feed

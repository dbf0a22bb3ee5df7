// Feeder: the work of `drover feeder`, the process an agent starts to fill
// its node's input queue (docs/feed.md). It joins the agent's feed socket as
// the writer, works out where the previous feeder stopped from the queue's
// commit point (or, on a new queue, where the plan says the share resumes:
// its program's last DataFeed::Commit in an earlier round), and feeds the
// node's share of the plan, epoch by epoch, a batch at a time. It is a separate process so that
// killing it (as a test does, at random points) loses nothing: what it published stays queued, what
// it did not is fed again by the next feeder, from the first record after the last published batch.

#ifndef DROVER_FEED_FEEDER_H_
#define DROVER_FEED_FEEDER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "drover/status.h"
#include "feed/feed_plan.h"

namespace drover::feed {

struct FeederOptions {
  std::string socket_path;
  FeedPlan plan;
  int share = 0;
  int shares = 1;
  std::string task;  // "worker:0", for messages
  // Payload bytes per batch (clamped to what the queue takes).
  size_t batch_bytes = 1 << 20;
  // Records come in as plan.ingest says; Ingest::kMeasure feeds this many
  // bytes each way first (fixed-size raw records: IngestChoice; the windows
  // of CSV, JSONL, TFRecord and whole files: WindowChoice).
  size_t ingest_probe_bytes = 32 << 20;
  // Told, once, which way records go when the feeder measured it
  // (Ingest::kMeasure), and why; may be empty.
  std::function<void(const std::string&)> notice;
};

struct FeederReport {
  uint64_t records = 0;  // fed by this process
  uint64_t bytes = 0;
  bool resumed = false;     // started after a commit point, the queue's or the plan's
  bool terminated = false;  // the program called terminate()
  bool finished = false;    // every feed of the share was published
  // How records came in, as chosen or pinned: fixed-size records "map",
  // "read", "extent" or "extent-read"; the windows of CSV, JSONL, TFRecord
  // and whole-file raw records "map" or "read"; "" before the choice (too
  // few bytes to measure).
  std::string ingest;
};

// Feeds until the share is done, the program terminates the feed, or an
// error: a bad record (kInvalidArgument naming the partition and offset), the
// feed timeout (kDeadlineExceeded: the program took nothing for
// plan.feed_timeout_ms), a stopped channel (kUnavailable).
Result<FeederReport> RunFeeder(const FeederOptions& options);

}  // namespace drover::feed

#endif  // DROVER_FEED_FEEDER_H_

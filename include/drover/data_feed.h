// DataFeed: how a program started by `drover run --input ...` reads the
// records drover feeds it, and returns inference results (docs/feed.md).
// This is TensorFlowOnSpark's TFNode.DataFeed for any program; Python's
// drover.DataFeed wraps this type.
//
// The agent of a fed node (chief, master or worker) owns a shared-memory
// channel with an input and an output queue (docs/shm_queue_format.md) and
// serves its file descriptor on a Unix socket named by DROVER_FEED_SOCKET.
// Connect() takes the descriptor, maps it and becomes the queue's one reader.
//
//   auto feed = drover::DataFeed::Connect(drover::ProcessEnvironment()).value();
//   while (!feed->ShouldStop()) {
//     drover::RecordBatch batch = feed->NextBatch(100).value();
//     if (batch.records.empty()) break;   // the feed is over
//     train(batch.records);               // views, valid until the next call
//   }
//
// Records of one NextBatch call come from one epoch: a call returns fewer
// than asked at the end of an epoch and at the end of the feed, and none once
// the feed is over (or terminated). In inference mode every NextBatch must be
// answered by BatchResults with one result per record, in order, before the
// next NextBatch; the results are written per partition in input order.
//
// A node fed from outside (drover.Cluster.train / inference: an external
// feed, docs/feed.md) works the same, but the program picks train_mode, a
// NextBatch call does not wait for records past the end of a partition, and
// results go back to the writer through the queue, so they may hold any
// bytes.
//
// Not thread-safe: one thread reads a feed (as with TensorFlowOnSpark).

#ifndef DROVER_DATA_FEED_H_
#define DROVER_DATA_FEED_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

// The environment variable naming the agent's feed socket.
inline constexpr char kFeedSocketVariable[] = "DROVER_FEED_SOCKET";

struct DataFeedOptions {
  // "" : the value of DROVER_FEED_SOCKET in the environment Connect gets.
  std::string socket_path;
  // TensorFlowOnSpark's train_mode: false for inference (results expected).
  // Must match `drover run --mode`; a mismatch is kInvalidArgument. An
  // external feed takes either.
  bool train_mode = true;
  // How long NextBatch waits for records before kDeadlineExceeded; 0: the
  // run's --feed-timeout.
  std::chrono::milliseconds timeout{0};
};

// How far a program had consumed its node's share when it committed
// (Commit): every feed before `feed` (a share is fed as a numbered list of
// partitions, epoch after epoch: `drover run --dry-run` lists a share's
// partitions), and in feed `feed` the records of its partition before index
// `record` (all of them when `done`).
struct FeedPosition {
  uint32_t feed = 0;
  uint64_t record = 0;
  bool done = false;
  friend bool operator==(const FeedPosition&, const FeedPosition&) = default;
};

struct RecordBatch {
  // Each record's bytes (for CSV and JSONL, one line without its newline):
  // views into the queue or, for raw records fed in place (`--feed-ingest`,
  // docs/feed.md), into a read-only mapping of the input file. Valid until
  // the next NextBatch, BatchResults or Terminate call.
  std::vector<std::string_view> records;
  int epoch = 0;  // 0-based epoch these records belong to
};

class DataFeed {
 public:
  // kNotFound when the variable is unset (not started by `drover run
  // --input`, or a node that is not fed, such as a ps); kUnavailable when the
  // agent cannot be reached; kAlreadyExists when another process already
  // reads this node's feed; kInvalidArgument for a train_mode mismatch.
  // `env` gives DROVER_FEED_SOCKET (a program passes ProcessEnvironment()).
  static Result<std::unique_ptr<DataFeed>> Connect(const Environment& env,
                                                   DataFeedOptions options = {});
  virtual ~DataFeed() = default;

  // Up to `max_records` records (see above). kDeadlineExceeded when nothing
  // arrived within the timeout; kUnavailable (with the agent's reason) when
  // feeding failed; kInvalidArgument in inference mode when the previous
  // batch has not been answered.
  Result<RecordBatch> NextBatch(size_t max_records);
  // The same into *batch, replacing what it held (nothing on an error): a
  // loop that passes the same RecordBatch reuses its storage, so small
  // batches cost no allocation.
  virtual Status NextBatch(size_t max_records, RecordBatch* batch) = 0;

  // Inference: one result per record of the last NextBatch, in order.
  // kInvalidArgument naming the partition when the count is wrong; a result
  // may not contain '\n' (results are written one per line), except in an
  // external feed.
  virtual Status BatchResults(const std::vector<std::string_view>& results) = 0;

  // Training from files (`drover run --input`): records in the driver that
  // the program has consumed every record NextBatch returned so far. Call it
  // when the model is checkpointed: after a failure, the next round
  // (--max-restarts) feeds this node's share from just after its last
  // commit, so no record before it is fed again and every record after it
  // is fed again once. Returns the position now on record; nullopt when
  // nothing was committed or read (the share starts from the beginning).
  // Blocks until the driver has it (a round trip through the agent).
  // kFailedPrecondition in inference and for an external feed;
  // kUnavailable when the agent or the driver cannot record it.
  virtual Result<std::optional<FeedPosition>> Commit() = 0;

  // True once the feed is over (every epoch read), terminated, or stopped.
  // When feeding failed, true only after NextBatch or BatchResults returned
  // the failure: a `while (!ShouldStop())` loop makes the call that reports
  // it, rather than ending as if every record had been read.
  virtual bool ShouldStop() const = 0;

  // Stops feeding this node now: the feeder stops at its next batch, queued
  // records are dropped, NextBatch returns nothing from now on. Returns at
  // once (TensorFlowOnSpark sleeps 5 s here).
  virtual void Terminate() = 0;

  // Records returned by NextBatch so far.
  virtual uint64_t records_read() const = 0;
  // The run's --format: "csv", "jsonl", "tfrecord" or "raw"; "pickle" for an
  // external feed.
  virtual std::string format() const = 0;
  // The run's --record-bytes (raw fixed-length records; 0 otherwise).
  virtual uint64_t record_bytes() const = 0;
};

}  // namespace drover

#endif  // DROVER_DATA_FEED_H_

// PartitionWriter: feeds a node's queue from outside its agent ("external
// feeding", docs/feed.md). The Python driver API (drover.Cluster.train and
// inference) runs one feeding task per data-engine partition on the host of
// the node that partition goes to; the task joins the agent's feed socket as
// its writer and pushes the partition's records through the same shared-
// memory channel `drover feeder` uses. This is TensorFlowOnSpark's
// TFSparkNode.train / inference, without the multiprocessing queue.
//
// The agent serves an external feed (FeedPlan::external) to one writer at a
// time; writers come and go, one per partition, and the feed only ends when
// one of them calls EndFeed (Cluster.shutdown); a writer destroyed without
// it leaves the feed open for the next. Batches carry the caller's partition
// and epoch numbers, so the program sees them in RecordBatch::epoch and
// results are matched to their partition (and to the writer's feed number,
// a count that goes on across writers, so an earlier writer's leftovers are
// skipped).
//
// Not thread-safe: one thread uses a writer (Feed starts and joins its own
// result-reading thread in inference).

#ifndef DROVER_FEED_PARTITION_WRITER_H_
#define DROVER_FEED_PARTITION_WRITER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover::feed {

struct PartitionWriterOptions {
  std::string socket_path;  // the node's feed socket (NodeInfo::feed_socket)
  // How long Connect waits for the socket to appear (the agent starts serving
  // it once the cluster has formed) and for the agent's answer.
  std::chrono::milliseconds connect_timeout{30'000};
  // How long the program may take no records (or, in inference, return no
  // results) before Feed gives up: TensorFlowOnSpark's feed_timeout.
  std::chrono::milliseconds feed_timeout{600'000};
  // Payload bytes per batch (clamped to what the queue takes: a quarter of
  // it, as the feeder, so the program can hold a batch while the next is
  // written; a larger record goes in a batch of its own).
  size_t batch_bytes = 1 << 20;
};

class PartitionWriter {
 public:
  // Joins the feed as its writer. kUnavailable naming the socket when nobody
  // serves it in time; kAlreadyExists while another writer holds the feed;
  // kFailedPrecondition when the agent feeds from a plan (drover run
  // --input), not from outside, or when a writer has ended the feed.
  static Result<std::unique_ptr<PartitionWriter>> Connect(PartitionWriterOptions options);
  virtual ~PartitionWriter() = default;

  // The node this writer feeds ("worker:1").
  virtual const std::string& task() const = 0;

  // Pushes `records` as partition `partition` of epoch `epoch` (0-based),
  // the last batch flagged as the end of the partition. A record may hold
  // any bytes. With `results` non-null (inference) it also reads the
  // program's results for this partition, concurrently, and returns them in
  // input order, one per record.
  // Errors: kDeadlineExceeded naming the node when the program took no
  // records (or returned no results) for feed_timeout; kUnavailable with the
  // agent's reason when feeding stopped (the program or its node failed);
  // kInvalidArgument for a record larger than half the queue (or 1 GiB),
  // before anything is fed, and for a result count that does not match;
  // kFailedPrecondition after EndFeed.
  // When the program has terminated the feed (DataFeed::Terminate), training
  // records are dropped, as TensorFlowOnSpark does, and terminated() turns
  // true; inference returns kCancelled.
  virtual Status Feed(uint32_t partition, uint32_t epoch,
                      const std::vector<std::string_view>& records,
                      std::vector<std::string>* results = nullptr) = 0;

  // Waits until the program has taken every record queued so far
  // (TensorFlowOnSpark's queue.join()): Ok at once when it terminated the
  // feed; kDeadlineExceeded when it took nothing for feed_timeout;
  // kUnavailable when feeding stopped. A DataFeed gives a batch's queue space
  // back at its next NextBatch call, so this returns once the program has
  // asked for more after the last records.
  virtual Status WaitConsumed() = 0;

  // Ends the node's feed (closes its input ring): its DataFeed returns what
  // is still queued, then empty batches (should_stop() turns true). Later
  // writers are refused; this one's Feed returns kFailedPrecondition.
  virtual Status EndFeed() = 0;

  // The program called DataFeed::Terminate.
  virtual bool terminated() const = 0;
};

}  // namespace drover::feed

#endif  // DROVER_FEED_PARTITION_WRITER_H_

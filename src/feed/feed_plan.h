// FeedPlan: what `drover run --input ...` decided, handed to every agent and
// feeder as a JSON file (docs/feed.md). It names the partitions, how many
// epochs to feed, and which share of the partitions each fed node gets.
//
// An external plan (drover.Cluster.train / inference) names no files: the
// agent serves its node's queue to writers from outside (PartitionWriter,
// feed/partition_writer.h) and runs no feeder; only the format, the feed
// timeout and the queue size matter. It goes to the agents inline
// (`drover agent --feed-plan-json`).
//
// JSON: {"mode": "train"|"inference", "format": "csv"|..., "record_bytes": N,
//        "epochs": E, "feed_timeout_ms": T, "queue_bytes": Q, "output_dir": str,
//        "external": bool, "partitions": [{"path": str, "begin": N, "end": N,
//        "records": N}, ...], "shares": [[partition, ...], ...],
//        "starts": [null | {"feed": N, "record": N, "done": bool}, ...],
//        "balance": "equal"|"dynamic", "queue": [[epoch, partition, record], ...],
//        "ingest": "measure"|"map"|"read"|"extent"|"extent-read"}
// ("external" is written only when true, "balance" only when dynamic,
// "ingest" only when not measure, "records", "shares", "starts" and "queue"
// only when set.)

#ifndef DROVER_FEED_FEED_PLAN_H_
#define DROVER_FEED_FEED_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/data_feed.h"
#include "drover/status.h"
#include "feed/record_io.h"

namespace drover::feed {

enum class FeedMode { kTrain, kInference };

// How partitions reach the fed nodes (`drover run --balance`): laid out
// before the run (equal shares, or round-robin in a plan written by hand),
// or handed out on demand by the driver, one at a time to whichever node's
// feeder has room (docs/feed.md, "Dynamic balance").
enum class Balance { kEqual, kDynamic };

// How fixed-size raw records reach the program (`drover run --feed-ingest`):
// the feeder copies them into the queue from a mapping of the file, or
// read(2)s them into it; or it queues only where they are in the file
// (kExtent) and the program reads them in place from its own mapping, or
// reads them itself with pread(2) into memory it reuses (kExtentRead).
// kMeasure feeds a probe each way and keeps the fastest, since which wins
// depends on the host (bench/RESULTS.md).
enum class Ingest { kMeasure, kMap, kRead, kExtent, kExtentRead };
// "measure", "map", "read", "extent", "extent-read"; kInvalidArgument naming them otherwise.
Result<Ingest> ParseIngest(std::string_view name);
std::string_view IngestName(Ingest ingest);
// "measure, map, read, extent or extent-read": every name, for messages.
std::string IngestNames();
// Ingest as the queue's ring header carries it (RingWriter::SayIngest,
// docs/shm_queue_format.md): the value plus one, 0 when not said.
uint32_t IngestWord(Ingest ingest);
// nullopt for 0 and for words out of range.
std::optional<Ingest> IngestOfWord(uint32_t word);

// FeedPosition (include/drover/data_feed.h): how far a program had consumed
// its share when it committed.
using ::drover::FeedPosition;
// {"feed": N, "record": N, "done": bool}
std::string FeedPositionToJson(const FeedPosition& position);
// kInvalidArgument naming the field for anything else (fuzzed).
Result<FeedPosition> FeedPositionFromJson(std::string_view json);
// Where every key of the feed's state in the rendezvous KV store starts (an
// elastic driver deletes them between rounds).
inline constexpr char kFeedKeyPrefix[] = "drover/feed/";
// The rendezvous KV key under which a share's last commit is recorded for
// the driver: "drover/feed/commit/<share>".
std::string CommitKey(int share);
// Dynamic balance: the counter every claim adds one to (the n-th claim of
// the round takes the queue's entry n - 1), and the key recording which
// queue entry share `share` took as its feed `seq` (the value: the index,
// in decimal), for the driver to work out the next round's queue.
std::string ClaimCounterKey();
std::string ClaimKey(int share, uint32_t seq);

// One unit of feeding: a partition in an epoch, from its record
// `first_record` (not 0 only for a partition a dynamic queue resumes after a
// commit). A node's feeds are numbered 0, 1, ... in the order they are fed
// (its `feed_seq`).
struct FeedUnit {
  int epoch = 0;      // 0-based
  int partition = 0;  // index into FeedPlan::partitions
  uint64_t first_record = 0;
  friend bool operator==(const FeedUnit&, const FeedUnit&) = default;
};

struct FeedPlan {
  FeedMode mode = FeedMode::kTrain;
  PlanOptions read;  // format, record_bytes (split_bytes is not stored)
  int epochs = 1;
  int64_t feed_timeout_ms = 600'000;
  uint64_t queue_bytes = 64ull << 20;  // per direction
  std::string output_dir;              // inference only; absolute
  // Fed from outside the agent (external feeding); `partitions` may be empty
  // and mode does not matter (the program picks train or inference).
  bool external = false;
  std::vector<Partition> partitions;
  // Which partitions each fed node is fed every epoch, in order: shares[k]
  // for the k-th fed node in cluster order (feed/share_layout.h). Empty: the
  // partitions are dealt round-robin (partition i to node i mod n), as in a
  // plan written by hand.
  std::vector<std::vector<uint32_t>> shares;
  // Where each share's feeding starts in this round: its program's last
  // commit in an earlier round (docs/feed.md, "Commit points"); nullopt or
  // an empty vector: from the start.
  std::vector<std::optional<FeedPosition>> starts;
  // kDynamic: no shares; the fed nodes claim the entries of `queue` in
  // order, each as its next feed. An unset queue is every partition of every
  // epoch, epoch by epoch (DynamicQueue).
  Balance balance = Balance::kEqual;
  // Fixed-size raw records: any (IngestChoice); CSV, JSONL, TFRecord and
  // whole-file raw: kMeasure, kMap or kRead, the way of their windows
  // (WindowChoice).
  Ingest ingest = Ingest::kMeasure;
  std::optional<std::vector<FeedUnit>> queue;

  friend bool operator==(const FeedPlan&, const FeedPlan&) = default;

  std::string ToJson() const;
  // kInvalidArgument naming the field for anything malformed (fuzzed): a
  // wrong type, a negative or out-of-range number, an unknown mode, format or
  // field, a repeated key, a relative path, a partition with begin > end, the
  // pickle format in a plan that is not external.
  // Shares or starts in a dynamic plan, or a queue in an equal one, or a
  // queue entry naming an epoch or partition the plan does not have.
  // "mode", "format" and "partitions" are required ("partitions" not in an
  // external plan); the rest default as above.
  static Result<FeedPlan> FromJson(std::string_view json);
  static Result<FeedPlan> ReadFile(const std::string& path);
  // Writes ToJson() and a newline to `path` (replacing it); kIoError naming
  // the path.
  Status WriteFile(const std::string& path) const;
};

// The feeds of share `share` of `shares` (the fed nodes, in cluster order),
// epoch by epoch: the plan's shares[share], or without a layout partitions p
// with p % shares == share, in plan order. Empty for an external plan.
// kInvalidArgument unless 0 <= share < shares, or when the plan was laid out
// for another number of fed nodes (a cluster that changed size), or for a
// dynamic plan (its feeds are claimed as it goes).
Result<std::vector<FeedUnit>> FeedsOfShare(const FeedPlan& plan, int share, int shares);

// A dynamic plan's queue: plan.queue, or every partition of every epoch.
std::vector<FeedUnit> DynamicQueue(const FeedPlan& plan);

// The queue of the next round of a dynamic feed, from this round's `queue`,
// which entries each share claimed (claims[share][seq]: an index into
// `queue`) and each share's last commit in this round. An entry a share
// consumed before its commit leaves the queue; the entry its commit falls in
// stays from the record after it; every other entry stays as it was, in
// queue order: claimed but uncommitted ones are fed again (to whoever claims
// them), as are those never claimed. Claims or commits naming what does not
// exist are ignored (they come from the programs' side of the store).
std::vector<FeedUnit> QueueAfterRound(const std::vector<FeedUnit>& queue,
                                      const std::vector<std::vector<uint64_t>>& claims,
                                      const std::vector<std::optional<FeedPosition>>& commits);

}  // namespace drover::feed

#endif  // DROVER_FEED_FEED_PLAN_H_

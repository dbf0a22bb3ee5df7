// FeedRequest: what a user asks to feed (`drover run --input` and the flags
// that go with it), and PlanFeed, the policy that turns it into a FeedPlan:
// the format from the first input's extension unless given, train or
// inference, an output directory that holds no earlier results, partitions
// planned over the inputs and laid out in equal shares for the fed nodes. Error messages name the
// `drover run` flags, the one front end that asks this way.
//
// Values and a function of the request and the files; thread-safe.

#ifndef DROVER_FEED_FEED_REQUEST_H_
#define DROVER_FEED_FEED_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"
#include "feed/feed_plan.h"

namespace drover::feed {

struct FeedRequest {
  std::vector<std::string> inputs;  // files or glob patterns; empty: no feeding
  std::string format;               // "" : from the first input's extension
  uint64_t record_bytes = 0;        // --format raw only
  int epochs = 1;
  double feed_timeout_seconds = 600;
  std::string mode = "train";  // or "inference"
  std::string output;          // inference: the results' directory
  uint64_t queue_bytes = 0;    // 0: DefaultQueueBytes
  uint64_t split_bytes = 64ull << 20;
  // Training: what equal shares do with the records left over when they do
  // not divide evenly: "pad" (the default; "" means it) or "drop"
  // (feed/share_layout.h).
  std::string remainder;
  // "equal" (the default; "" means it): shares laid out before the run;
  // "dynamic": partitions handed out on demand (FeedPlan::balance).
  std::string balance;
  // "measure" (the default; "" means it), "map", "read"; fixed-size raw
  // records "extent" and "extent-read" too (FeedPlan::ingest).
  std::string ingest;
  // The fed nodes (chief/master and workers) the shares are laid out for.
  int fed_nodes = 1;
};

// The queue a feed gets when --queue-bytes is not given: 4 MiB for raw
// records of up to 256 KiB, else 64 MiB (records of unknown size may be
// large). Small records stream 2-4x faster through the small ring: its pages
// stay in the TLB and its lines in the cache between the feeder's write and
// the program's read, where a 64 MiB ring is long evicted
// (bench/RESULTS.md, "A small queue for small records").
uint64_t DefaultQueueBytes(const PlanOptions& read);

// The format a file name's extension implies ("csv", "jsonl", "tfrecord"),
// "" when it implies none.
std::string FormatOfExtension(const std::string& pattern);

// The plan for `request`; nullopt when it has no inputs (and nothing that
// goes with them). kInvalidArgument for a bad combination, kAlreadyExists
// for an output directory that already holds results, what
// PlanPartitions returns for unreadable inputs.
Result<std::optional<FeedPlan>> PlanFeed(const FeedRequest& request);

}  // namespace drover::feed

#endif  // DROVER_FEED_FEED_REQUEST_H_

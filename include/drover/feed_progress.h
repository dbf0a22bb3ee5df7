// FeedProgress: how far a fed node's input has gone, one type from the queue
// to the status page. The node's queue counts the first part (what the
// program has been handed, how full the queue is: feed/shm_channel.h's
// ReadRingProgress), its agent adds what it knows of the plan and the feeder,
// and the heartbeat carries it to the driver (docs/protocol.md), which sums
// the nodes' for the run (FeedTotals, driver/run_status.h).
//
// A plain value; thread-compatible.

#ifndef DROVER_FEED_PROGRESS_H_
#define DROVER_FEED_PROGRESS_H_

#include <cstdint>
#include <string>

namespace drover {

struct FeedProgress {
  // Read off the queue:
  uint64_t records = 0;          // records handed to the program
  uint64_t bytes = 0;            // their bytes, without length prefixes
  uint32_t partitions_done = 0;  // partitions (x epochs) read to their end
  uint32_t epoch = 0;            // 0-based, of the last batch read
  // How far the feeder is ahead: bytes in the queue not yet released by the
  // program or, with records queued as file extents, their bytes not yet
  // handed out (whichever is more).
  uint64_t queue_bytes = 0;
  uint64_t queue_capacity = 0;
  // Added by the node's agent:
  uint32_t partitions_total = 0;  // the share x epochs; 0: unknown (external feeds)
  uint64_t share_bytes = 0;       // the share's input bytes per epoch; 0: unknown
  uint32_t epochs = 0;
  uint32_t feeder_restarts = 0;
  uint64_t results = 0;  // inference results handed back (the output queue's records)
  // How the feeder takes fixed-size raw records in (`--feed-ingest`): "map",
  // "read", "extent" or "extent-read", "measure" while it measures; "" for
  // other formats and external feeds.
  std::string ingest;
  friend bool operator==(const FeedProgress&, const FeedProgress&) = default;
};

}  // namespace drover

#endif  // DROVER_FEED_PROGRESS_H_

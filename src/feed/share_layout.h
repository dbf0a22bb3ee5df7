// Equal shares (`drover run --balance equal`, docs/feed.md): every fed node
// is fed the same number of records in every epoch, so a synchronous program
// (DDP, Horovod, MultiWorkerMirroredStrategy) reaches the end of an epoch on
// every node at the same step and needs no torch Join.
//
// The planner counts the records of every partition, splits the epoch's
// record sequence (the partitions in plan order) into n contiguous shares and
// cuts partitions on record boundaries where a share begins or ends, so each
// share is a list of whole partitions (FeedPlan::shares). In training, n
// shares of q records each: q = ceil(N / n) with Remainder::kPad (the last
// shares wrap around to the first records again, as PyTorch's
// DistributedSampler pads), q = floor(N / n) with Remainder::kDrop (the last
// N mod n records are fed to nobody, as its drop_last). In inference every
// record is fed exactly once: share k gets records [k*N/n, (k+1)*N/n), so
// shares differ by at most one record.
//
// A function of the plan and its files; thread-safe.

#ifndef DROVER_FEED_SHARE_LAYOUT_H_
#define DROVER_FEED_SHARE_LAYOUT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "drover/status.h"
#include "feed/feed_plan.h"

namespace drover::feed {

enum class Remainder { kPad, kDrop };

// "pad" or "drop"; kInvalidArgument naming both.
Result<Remainder> ParseRemainder(std::string_view name);

// `plan` with its partitions cut and counted and its shares laid out for
// `fed_nodes` fed nodes. With one fed node nothing is counted: its share is
// every partition. kInvalidArgument for fewer than one fed node or an external
// plan; a record reader's error for a bad record met while counting.
Result<FeedPlan> LayOutEqualShares(FeedPlan plan, int fed_nodes, Remainder remainder);

// A piece of a share: records [begin, end) of partition `partition`.
struct ShareSlice {
  uint32_t partition = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  friend bool operator==(const ShareSlice&, const ShareSlice&) = default;
};

// The same shares over partitions whose records were counted elsewhere
// (drover.Cluster.train's collection: partitions[i] records in partition i),
// as slices per share, in feeding order: a share is a contiguous run of the
// epoch's records, and with kPad the last shares wrap around to the first
// records. Empty partitions appear in no slice. kInvalidArgument for fewer
// than one share.
Result<std::vector<std::vector<ShareSlice>>> EqualShareSlices(
    const std::vector<uint64_t>& partitions, int shares, FeedMode mode, Remainder remainder);

}  // namespace drover::feed

#endif  // DROVER_FEED_SHARE_LAYOUT_H_

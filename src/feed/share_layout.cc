#include "feed/share_layout.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "feed/record_index.h"

namespace drover::feed {
namespace {

// A share's records: [begin, end) of the epoch's record sequence; with
// padding `end` may pass the total, and the share wraps to its start.
struct RecordRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::vector<RecordRange> ShareRanges(uint64_t total, uint64_t shares, FeedMode mode,
                                     Remainder remainder) {
  std::vector<RecordRange> ranges;
  if (mode == FeedMode::kInference) {
    for (uint64_t k = 0; k < shares; ++k) {
      ranges.push_back({k * total / shares, (k + 1) * total / shares});
    }
    return ranges;
  }
  const uint64_t each =
      remainder == Remainder::kPad ? (total + shares - 1) / shares : total / shares;
  for (uint64_t k = 0; k < shares; ++k) ranges.push_back({k * each, (k + 1) * each});
  return ranges;
}

// Where partitions must be cut so that every range is whole partitions:
// each range's ends, taken modulo the total (a padded range wraps once at
// most, as it is no longer than the total).
std::set<uint64_t> CutPoints(const std::vector<RecordRange>& ranges, uint64_t total) {
  std::set<uint64_t> cuts;
  if (total == 0) return cuts;
  for (const RecordRange& range : ranges) {
    cuts.insert(range.begin % total);
    cuts.insert(range.end % total);
  }
  return cuts;
}

// `partition` cut at the given record indexes (ascending, inside it), each
// piece counted.
Status CutPartition(const Partition& partition, const PlanOptions& options,
                    const std::vector<uint64_t>& cuts, std::vector<Partition>* out) {
  DROVER_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, RecordOffsets(partition, options, cuts));
  uint64_t begin = partition.begin;
  uint64_t first = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    out->push_back(Partition{partition.path, begin, offsets[i], cuts[i] - first});
    begin = offsets[i];
    first = cuts[i];
  }
  out->push_back(Partition{partition.path, begin, partition.end, *partition.records - first});
  return Status::Ok();
}

}  // namespace

Result<Remainder> ParseRemainder(std::string_view name) {
  if (name == "pad") return Remainder::kPad;
  if (name == "drop") return Remainder::kDrop;
  return Status::InvalidArgument("the remainder is pad or drop, not '" + std::string(name) + "'");
}

Result<FeedPlan> LayOutEqualShares(FeedPlan plan, int fed_nodes, Remainder remainder) {
  if (plan.external) return Status::InvalidArgument("an external plan has no partitions to share");
  if (fed_nodes < 1) {
    return Status::InvalidArgument("equal shares need at least one fed node (chief or worker)");
  }
  plan.shares.assign(static_cast<size_t>(fed_nodes), {});
  if (fed_nodes == 1) {
    for (size_t p = 0; p < plan.partitions.size(); ++p) {
      plan.shares[0].push_back(static_cast<uint32_t>(p));
    }
    return plan;
  }
  uint64_t total = 0;
  for (Partition& partition : plan.partitions) {
    DROVER_ASSIGN_OR_RETURN(partition.records, CountRecords(partition, plan.read));
    total += *partition.records;
  }
  const std::vector<RecordRange> ranges =
      ShareRanges(total, static_cast<uint64_t>(fed_nodes), plan.mode, remainder);
  const std::set<uint64_t> cuts = CutPoints(ranges, total);

  // Cut, and note where each piece with records begins in the sequence.
  std::vector<Partition> pieces;
  std::map<uint64_t, uint32_t> piece_at;  // first record -> piece index
  uint64_t base = 0;
  for (const Partition& partition : plan.partitions) {
    const uint64_t count = *partition.records;
    std::vector<uint64_t> inside;
    for (auto cut = cuts.upper_bound(base); cut != cuts.end() && *cut < base + count; ++cut) {
      inside.push_back(*cut - base);
    }
    const size_t first_piece = pieces.size();
    DROVER_RETURN_IF_ERROR(CutPartition(partition, plan.read, inside, &pieces));
    uint64_t at = base;
    for (size_t i = first_piece; i < pieces.size(); ++i) {
      if (*pieces[i].records > 0) piece_at.emplace(at, static_cast<uint32_t>(i));
      at += *pieces[i].records;
    }
    base += count;
  }
  plan.partitions = std::move(pieces);

  for (size_t k = 0; k < ranges.size(); ++k) {
    for (uint64_t at = ranges[k].begin; at < ranges[k].end;) {
      const uint32_t piece = piece_at.at(at % total);
      plan.shares[k].push_back(piece);
      at += *plan.partitions[piece].records;
    }
  }
  return plan;
}

Result<std::vector<std::vector<ShareSlice>>> EqualShareSlices(
    const std::vector<uint64_t>& partitions, int shares, FeedMode mode, Remainder remainder) {
  if (shares < 1) return Status::InvalidArgument("equal shares need at least one share");
  std::vector<uint64_t> starts;  // each partition's first record in the epoch
  uint64_t total = 0;
  for (uint64_t count : partitions) {
    starts.push_back(total);
    total += count;
  }
  std::vector<std::vector<ShareSlice>> slices(static_cast<size_t>(shares));
  if (total == 0) return slices;
  const std::vector<RecordRange> ranges =
      ShareRanges(total, static_cast<uint64_t>(shares), mode, remainder);
  for (size_t k = 0; k < ranges.size(); ++k) {
    for (uint64_t at = ranges[k].begin; at < ranges[k].end;) {
      const uint64_t in_epoch = at % total;
      // The partition holding record in_epoch: the last that starts at or
      // before it and is not empty.
      const size_t p = static_cast<size_t>(
          std::upper_bound(starts.begin(), starts.end(), in_epoch) - starts.begin() - 1);
      const uint64_t begin = in_epoch - starts[p];
      const uint64_t end = std::min(partitions[p], begin + (ranges[k].end - at));
      if (end == begin) {  // an empty partition at the same start: skip it
        ++at;
        continue;
      }
      slices[k].push_back(ShareSlice{static_cast<uint32_t>(p), begin, end});
      at += end - begin;
    }
  }
  return slices;
}

}  // namespace drover::feed

// Counting a partition's records and finding where record k begins: what
// equal shares (feed/share_layout.h) need to cut partitions on record
// boundaries. Fixed-size raw records are arithmetic; every other format is
// read with a RecordReader, so a record here is exactly what a feeder feeds
// (empty lines skipped, TFRecord CRCs checked).
//
// Functions of the files; thread-safe.

#ifndef DROVER_FEED_RECORD_INDEX_H_
#define DROVER_FEED_RECORD_INDEX_H_

#include <cstdint>
#include <vector>

#include "drover/status.h"
#include "feed/record_io.h"

namespace drover::feed {

// The number of records in `partition`; errors as RecordReader's.
Result<uint64_t> CountRecords(const Partition& partition, const PlanOptions& options);

// For each record index in `indexes` (ascending, each at most the partition's
// record count), the file offset where that record's range begins: a reader
// opened there yields records index, index + 1, ... For index == the count,
// just past the last record. kInvalidArgument for an index past the count or out
// of order.
Result<std::vector<uint64_t>> RecordOffsets(const Partition& partition, const PlanOptions& options,
                                            const std::vector<uint64_t>& indexes);

}  // namespace drover::feed

#endif  // DROVER_FEED_RECORD_INDEX_H_

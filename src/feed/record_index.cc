#include "feed/record_index.h"

#include <memory>
#include <string>
#include <string_view>

namespace drover::feed {
namespace {

bool FixedSize(const PlanOptions& options) {
  return options.format == RecordFormat::kRaw && options.record_bytes > 0;
}

}  // namespace

Result<uint64_t> CountRecords(const Partition& partition, const PlanOptions& options) {
  if (FixedSize(options)) return (partition.end - partition.begin) / options.record_bytes;
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader,
                          RecordReader::Open(partition, options, partition.begin));
  uint64_t count = 0;
  std::string_view record;
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(bool more, reader->Next(&record));
    if (!more) return count;
    ++count;
  }
}

Result<std::vector<uint64_t>> RecordOffsets(const Partition& partition, const PlanOptions& options,
                                            const std::vector<uint64_t>& indexes) {
  std::vector<uint64_t> offsets;
  offsets.reserve(indexes.size());
  auto past_the_end = [&](uint64_t index) {
    return Status::InvalidArgument(partition.Name() + " has no record " + std::to_string(index));
  };
  for (size_t i = 1; i < indexes.size(); ++i) {
    if (indexes[i] < indexes[i - 1]) {
      return Status::InvalidArgument("record indexes must ascend");
    }
  }
  if (FixedSize(options)) {
    const uint64_t count = (partition.end - partition.begin) / options.record_bytes;
    for (uint64_t index : indexes) {
      if (index > count) return past_the_end(index);
      offsets.push_back(partition.begin + index * options.record_bytes);
    }
    return offsets;
  }
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader,
                          RecordReader::Open(partition, options, partition.begin));
  uint64_t read = 0;
  // The offset after the last record read: where record `read` begins
  // (skipped empty lines before it are the next reader's to skip).
  uint64_t boundary = partition.begin;
  std::string_view record;
  for (uint64_t index : indexes) {
    while (read < index) {
      DROVER_ASSIGN_OR_RETURN(bool more, reader->Next(&record));
      if (!more) return past_the_end(index);
      ++read;
      boundary = reader->next_offset();
    }
    offsets.push_back(index == 0 ? partition.begin : boundary);
  }
  return offsets;
}

}  // namespace drover::feed

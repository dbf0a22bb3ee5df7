#include "feed/record_index.h"

#include <fcntl.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "os/unique_fd.h"

namespace drover::feed {
namespace {

bool FixedSize(const PlanOptions& options) {
  return options.format == RecordFormat::kRaw && options.record_bytes > 0;
}

// The lines of a chunk that are records, as LineReader yields them: every
// '\n' ends a line, and a line that is empty, or only "\r", is skipped.
// `data[-2]` and `data[-1]` are the two bytes before the chunk ('\n' at the
// partition's begin, which is a line boundary): the records are the
// newlines less the empty lines.
uint64_t CountLineEnds(const unsigned char* data, size_t size) {
  uint64_t newlines = 0;
  uint64_t empty = 0;
  size_t i = 0;
#ifdef __SSE2__
  // 16 bytes at a time (SSE2 is every x86-64's): the same masks, counted in
  // byte lanes (a match is -1) and summed every 255 blocks.
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i carriage = _mm_set1_epi8('\r');
  const __m128i zero = _mm_setzero_si128();
  auto load = [&](size_t at) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + at));
  };
  auto total = [&](__m128i lanes) {
    const __m128i sums = _mm_sad_epu8(lanes, zero);
    return static_cast<uint64_t>(_mm_cvtsi128_si32(sums)) +
           static_cast<uint64_t>(_mm_cvtsi128_si32(_mm_srli_si128(sums, 8)));
  };
  while (i + 16 <= size) {
    __m128i newline_lanes = zero;
    __m128i empty_lanes = zero;
    for (int block = 0; block < 255 && i + 16 <= size; ++block, i += 16) {
      const __m128i nl = _mm_cmpeq_epi8(load(i), newline);
      const __m128i before = load(i - 1);
      const __m128i after_nl = _mm_cmpeq_epi8(before, newline);
      const __m128i after_cr_line =
          _mm_and_si128(_mm_cmpeq_epi8(before, carriage), _mm_cmpeq_epi8(load(i - 2), newline));
      newline_lanes = _mm_sub_epi8(newline_lanes, nl);
      empty_lanes =
          _mm_sub_epi8(empty_lanes, _mm_and_si128(nl, _mm_or_si128(after_nl, after_cr_line)));
    }
    newlines += total(newline_lanes);
    empty += total(empty_lanes);
  }
#endif
  for (; i < size; ++i) {
    const unsigned nl = data[i] == '\n';
    newlines += nl;
    empty += nl & (data[i - 1] == '\n');
    empty += nl & (data[i - 1] == '\r') & (data[i - 2] == '\n');
  }
  return newlines - empty;
}

// CSV and JSONL: read in large chunks and counted without a reader's
// per-record work (planning equal shares reads the whole input once).
Result<uint64_t> CountLines(const Partition& partition) {
  const int fd = ::open(partition.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status::IoError("cannot open " + partition.path + ": " + std::strerror(errno));
  }
  const os::UniqueFd file(fd);
  constexpr size_t kChunk = 4 << 20;
  std::vector<unsigned char> buffer(2 + kChunk);
  buffer[0] = buffer[1] = '\n';
  uint64_t records = 0;
  uint64_t offset = partition.begin;
  bool trailing = false;  // bytes after the last '\n' read so far
  while (offset < partition.end) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, partition.end - offset));
    const ssize_t got = ::pread(fd, buffer.data() + 2, want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return Status::IoError("cannot read " + partition.path + ": " + std::strerror(errno));
    }
    if (got == 0) {
      return Status::InvalidArgument(partition.Name() + ": the file ends at " +
                                     std::to_string(offset) + ", before the partition does");
    }
    const size_t size = static_cast<size_t>(got);
    records += CountLineEnds(buffer.data() + 2, size);
    trailing = buffer[size + 1] != '\n';
    buffer[0] = buffer[size];
    buffer[1] = buffer[size + 1];
    offset += size;
  }
  return records + (trailing ? 1 : 0);
}

}  // namespace

Result<uint64_t> CountRecords(const Partition& partition, const PlanOptions& options) {
  if (FixedSize(options)) return (partition.end - partition.begin) / options.record_bytes;
  if (options.format == RecordFormat::kCsv || options.format == RecordFormat::kJsonl) {
    return CountLines(partition);
  }
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

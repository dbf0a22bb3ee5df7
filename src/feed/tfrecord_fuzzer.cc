// Writes each input to a memfd and reads it back as TFRecord, CSV and raw
// records, whole and through PlanPartitions with a small split size. The
// reader must never crash, never return a record from outside its partition,
// and fail only with kInvalidArgument; when the whole file reads cleanly, the
// split partitions must give exactly its records, and resuming from
// next_offset() must give the rest. Aborts on any violation.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "feed/record_io.h"

namespace {

using drover::Status;
using drover::feed::Partition;
using drover::feed::PlanOptions;
using drover::feed::RecordFormat;
using drover::feed::RecordReader;

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

void CheckError(const Status& status) {
  if (status.code() == Status::Code::kInvalidArgument) return;
  std::fprintf(stderr, "unexpected error: %s\n", status.ToString().c_str());
  std::abort();
}

struct ReadResult {
  Status status;
  std::vector<std::string> records;
};

// Reads [start, end) of `partition`, at most `limit` records.
ReadResult ReadPartition(const Partition& partition, const PlanOptions& options, uint64_t start,
                         size_t limit = SIZE_MAX, uint64_t* stopped_at = nullptr) {
  ReadResult result;
  auto reader = RecordReader::Open(partition, options, start);
  if (!reader.ok()) {
    result.status = reader.status();
    CheckError(result.status);
    return result;
  }
  uint64_t offset = (*reader)->next_offset();
  Check(offset == start, "next_offset() before the first record is not the start");
  while (result.records.size() < limit) {
    std::string_view record;
    auto more = (*reader)->Next(&record);
    if (!more.ok()) {
      result.status = more.status();
      CheckError(result.status);
      Check((*reader)->Next(&record).status() == result.status, "errors are not sticky");
      return result;
    }
    if (!*more) {
      Check((*reader)->next_offset() == partition.end, "the reader stopped before the end");
      break;
    }
    const uint64_t next = (*reader)->next_offset();
    Check(next > offset && next <= partition.end, "next_offset() moved wrongly");
    Check(record.size() <= next - offset, "a record is bigger than the bytes it consumed");
    if (options.format == RecordFormat::kCsv) {
      Check(!record.empty(), "an empty line came back as a record");
      Check(record.find('\n') == std::string_view::npos, "a line holds '\\n'");
    }
    offset = next;
    result.records.emplace_back(record);
  }
  if (stopped_at != nullptr) *stopped_at = offset;
  return result;
}

void CheckFormat(const std::string& path, uint64_t size, const PlanOptions& options) {
  const Partition whole{path, 0, size};
  const ReadResult all = ReadPartition(whole, options, 0);

  if (all.status.ok() && !all.records.empty()) {
    const size_t keep = size % all.records.size();
    uint64_t resume_at = 0;
    const ReadResult head = ReadPartition(whole, options, 0, keep, &resume_at);
    Check(head.status.ok() && head.records.size() == keep, "rereading the head failed");
    const ReadResult tail = ReadPartition(whole, options, resume_at);
    Check(tail.status.ok(), "resuming failed");
    Check(tail.records == std::vector<std::string>(all.records.begin() + static_cast<long>(keep),
                                                   all.records.end()),
          "resuming gave other records");
  }

  auto partitions = drover::feed::PlanPartitions({path}, options);
  if (!partitions.ok()) {
    CheckError(partitions.status());
    Check(options.format != RecordFormat::kCsv, "planning CSV failed");
    Check(!all.status.ok(), "planning failed on a file that reads cleanly");
    return;
  }
  std::vector<std::string> split_records;
  bool split_failed = false;
  uint64_t expected_begin = 0;
  for (const Partition& partition : *partitions) {
    Check(partition.path == path, "a partition names another file");
    Check(partition.begin == expected_begin && partition.begin < partition.end,
          "partitions do not tile the file");
    expected_begin = partition.end;
    (void)partition.Name();
    const ReadResult part = ReadPartition(partition, options, partition.begin);
    split_failed = split_failed || !part.status.ok();
    split_records.insert(split_records.end(), part.records.begin(), part.records.end());
  }
  Check(expected_begin == size, "partitions do not cover the file");
  if (all.status.ok()) {
    Check(!split_failed, "a partition failed where the whole file reads cleanly");
    Check(split_records == all.records, "split partitions gave other records");
  } else if (options.format == RecordFormat::kTfRecord) {
    Check(split_failed, "corruption went unnoticed in the split partitions");
  }
}

// The input lives in one memfd for the whole run, rewritten per input.
int InputFd() {
  static const int fd = memfd_create("tfrecord_fuzzer", MFD_CLOEXEC);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = InputFd();
  Check(fd >= 0, "memfd_create failed");
  Check(ftruncate(fd, 0) == 0, "ftruncate failed");
  size_t written = 0;
  while (written < size) {
    const ssize_t got = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    Check(got > 0, "pwrite failed");
    written += static_cast<size_t>(got);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const uint64_t split_bytes = size == 0 ? 1 : 1 + data[size - 1] % 32;

  PlanOptions options;
  options.split_bytes = split_bytes;
  options.format = RecordFormat::kTfRecord;
  CheckFormat(path, size, options);
  options.format = RecordFormat::kCsv;
  CheckFormat(path, size, options);

  options.format = RecordFormat::kRaw;
  options.record_bytes = size == 0 ? 1 : 1 + data[0] % 8;
  auto partitions = drover::feed::PlanPartitions({path}, options);
  if (size % options.record_bytes != 0) {
    Check(!partitions.ok(), "a raw size mismatch went unnoticed");
    CheckError(partitions.status());
  } else {
    Check(partitions.ok(), "planning whole raw records failed");
    std::string joined;
    for (const Partition& partition : *partitions) {
      const ReadResult part = ReadPartition(partition, options, partition.begin);
      Check(part.status.ok(), "reading raw records failed");
      for (const std::string& record : part.records) {
        Check(record.size() == options.record_bytes, "a raw record has the wrong size");
        joined += record;
      }
    }
    Check(joined == std::string_view(reinterpret_cast<const char*>(data), size),
          "raw records differ from the file");
  }
  return 0;
}

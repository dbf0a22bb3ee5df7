// The C++ programs of the feeding benchmark (bench/feed_bench.py).
//
//   feed_consumer [--batch K] [--out FILE]
//     Run by `drover run --input ...`: reads every record with
//     drover::DataFeed::NextBatch(K, &batch) (one RecordBatch, reused) and
//     copies each record into a reused batch buffer, as a consumer
//     assembling a contiguous batch does.
//
//   feed_consumer --in-place [--batch K] [--out FILE]
//     As the first form, but uses each record where it is, in the queue:
//     it reads every 8-byte word of it (an XOR), with no copy.
//
//   feed_consumer --memcpy FILE --record-bytes N [--batch K] [--passes P] [--out FILE]
//     The limit: FILE's bytes held in one buffer (make it larger than the
//     caches), copied batch by batch into the same kind of reused batch buffer
//     by the same code, record by record. P passes; the median pass counts.
//
//   feed_consumer --read-limit FILE --record-bytes N [--passes P] [--out FILE]
//     The file-read limit: read(2) of FILE (page-cached by a first pass that
//     does not count) in 16 MiB chunks into one reused buffer, which is what
//     any file-fed pipeline does at least once. The median of P passes.
//
//   feed_consumer --pipeline-limit FILE --record-bytes N [--batch K] [--passes P] [--out FILE]
//     The limit of a feeder and a consumer on two cores, with nothing of
//     drover between them: one thread pread(2)s FILE (page-cached first) in
//     runs of whole records of about 512 KiB into a 4 MiB shared-memory ring
//     (a memfd mapping, as drover's queue), the other copies the records out
//     into the same kind of reused batch buffer; slots change hands through
//     two atomic counters polled in a spin, so no wake-up is counted. The
//     median of P passes.
//
//   feed_consumer --one-thread-limit FILE --ingest read|map --record-bytes N [--batch K]
//                 [--passes P] [--out FILE]
//     The limit of a program that reads the file itself, with no feeder: one
//     thread takes FILE (page-cached first) in and copies its records into
//     the same kind of reused batch buffer. `read`: pread(2) in runs of whole
//     records of about 512 KiB into one reused buffer; `map`: a fresh
//     mapping of the whole file each pass, copied from as it faults in. The
//     median of P passes.
//
// All print one JSON line {"records":..,"bytes":..,"seconds":..} to stdout
// and, with --out, to FILE. The feed is timed from the first record received
// (the return of the first non-empty NextBatch) to the end of the feed (the
// empty NextBatch), so start-up is not counted.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drover/data_feed.h"

namespace {

using Clock = std::chrono::steady_clock;

// A reused destination for one batch: records are appended back to back.
class BatchBuffer {
 public:
  explicit BatchBuffer(size_t capacity) { Reserve(std::max<size_t>(capacity, 4096)); }

  void Clear() { size_ = 0; }
  void Append(std::string_view record) {
    if (size_ + record.size() > capacity_) Reserve(std::max(2 * capacity_, size_ + record.size()));
    std::memcpy(data_.get() + size_, record.data(), record.size());
    size_ += record.size();
  }
  // Stands for the consumer using the batch: the copies must happen.
  void Consume() const { asm volatile("" : : "r"(data_.get()) : "memory"); }
  size_t size() const { return size_; }

 private:
  void Reserve(size_t capacity) {
    auto bigger = std::make_unique<char[]>(capacity);  // zeroed: pages touched
    if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
  size_t size_ = 0;
};

struct Args {
  size_t batch = 100;
  std::string out;
  std::string memcpy_file;
  std::string read_limit_file;
  std::string pipeline_file;
  std::string one_thread_file;
  std::string ingest = "read";
  bool in_place = false;
  size_t record_bytes = 0;
  int passes = 3;
};

[[noreturn]] void Usage(const char* program, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--batch K] [--out FILE]\n"
               "       %s --memcpy FILE --record-bytes N [--batch K] [--passes P] [--out FILE]\n"
               "       %s --read-limit FILE --record-bytes N [--passes P] [--out FILE]\n"
               "       %s --pipeline-limit FILE --record-bytes N [--batch K] [--passes P] "
               "[--out FILE]\n"
               "       %s --one-thread-limit FILE --ingest read|map --record-bytes N [--batch K] "
               "[--passes P] [--out FILE]\n",
               program, problem.c_str(), program, program, program, program, program);
  std::exit(2);
}

size_t ParseCount(const char* program, const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value == 0) {
    Usage(program, flag + " wants a positive integer, got '" + text + "'");
  }
  return static_cast<size_t>(value);
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--in-place") {
      args.in_place = true;
      continue;
    }
    if (i + 1 >= argc) Usage(argv[0], "missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--batch") {
      args.batch = ParseCount(argv[0], flag, value);
    } else if (flag == "--out") {
      args.out = value;
    } else if (flag == "--memcpy") {
      args.memcpy_file = value;
    } else if (flag == "--read-limit") {
      args.read_limit_file = value;
    } else if (flag == "--pipeline-limit") {
      args.pipeline_file = value;
    } else if (flag == "--one-thread-limit") {
      args.one_thread_file = value;
    } else if (flag == "--ingest") {
      args.ingest = value;
      if (args.ingest != "read" && args.ingest != "map") {
        Usage(argv[0], "--ingest wants read or map, got '" + args.ingest + "'");
      }
    } else if (flag == "--record-bytes") {
      args.record_bytes = ParseCount(argv[0], flag, value);
    } else if (flag == "--passes") {
      args.passes = static_cast<int>(ParseCount(argv[0], flag, value));
    } else {
      Usage(argv[0], "unknown flag " + flag);
    }
  }
  return args;
}

int Report(const Args& args, uint64_t records, uint64_t bytes, double seconds) {
  char line[256];
  std::snprintf(line, sizeof line, "{\"records\": %llu, \"bytes\": %llu, \"seconds\": %.9f}\n",
                static_cast<unsigned long long>(records), static_cast<unsigned long long>(bytes),
                seconds);
  std::fputs(line, stdout);
  std::fflush(stdout);
  if (!args.out.empty()) {
    FILE* out = std::fopen(args.out.c_str(), "w");
    if (out == nullptr || std::fputs(line, out) < 0 || std::fclose(out) != 0) {
      std::fprintf(stderr, "cannot write %s: %s\n", args.out.c_str(), std::strerror(errno));
      return 1;
    }
  }
  return 0;
}

int OpenOrExit(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "cannot open %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  return fd;
}

// Reads the whole file into one buffer.
std::unique_ptr<char[]> ReadFile(const std::string& path, size_t* size) {
  const int fd = OpenOrExit(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::fprintf(stderr, "cannot open %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  *size = static_cast<size_t>(st.st_size);
  auto data = std::make_unique<char[]>(*size);
  size_t done = 0;
  while (done < *size) {
    ssize_t n = ::read(fd, data.get() + done, *size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "cannot read %s: %s\n", path.c_str(),
                   n == 0 ? "file shrank" : std::strerror(errno));
      std::exit(1);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return data;
}

// Runs `pass` `passes` times; the median pass's seconds.
template <typename Pass>
double MedianSeconds(int passes, Pass pass) {
  std::vector<double> seconds;
  for (int i = 0; i < passes; ++i) {
    const Clock::time_point start = Clock::now();
    pass();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

int RunMemcpy(const Args& args) {
  if (args.record_bytes == 0) Usage("feed_consumer", "--memcpy needs --record-bytes");
  size_t size = 0;
  std::unique_ptr<char[]> file = ReadFile(args.memcpy_file, &size);
  if (size % args.record_bytes != 0) {
    std::fprintf(stderr, "%s: %zu bytes is not a multiple of %zu\n", args.memcpy_file.c_str(), size,
                 args.record_bytes);
    return 1;
  }
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0 && size < 2 * static_cast<size_t>(l3)) {
    std::fprintf(stderr, "feed_consumer: warning: %zu bytes is less than twice the L3 (%ld)\n",
                 size, l3);
  }
  const uint64_t records = size / args.record_bytes;
  BatchBuffer batch(args.batch * args.record_bytes);
  const double seconds = MedianSeconds(args.passes, [&] {
    const char* next = file.get();
    const char* end = next + size;
    while (next < end) {
      batch.Clear();
      for (size_t i = 0; i < args.batch && next < end; ++i, next += args.record_bytes) {
        batch.Append(std::string_view(next, args.record_bytes));
      }
      batch.Consume();
    }
  });
  return Report(args, records, size, seconds);
}

// One pass of read(2) over the whole file into `buffer`; its size.
size_t ReadPass(const std::string& path, char* buffer, size_t buffer_bytes) {
  const int fd = OpenOrExit(path);
  size_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buffer, buffer_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "cannot read %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(1);
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  return total;
}

// Reads the file once, untimed, so the passes find it in the page cache; its size.
size_t PageCache(const std::string& path) {
  constexpr size_t kChunkBytes = 16 << 20;
  auto scratch = std::make_unique<char[]>(kChunkBytes);
  return ReadPass(path, scratch.get(), kChunkBytes);
}

// The bytes a feeder takes in at a time: whole records, about 512 KiB.
size_t RunBytes(size_t record_bytes) {
  return std::max<size_t>(1, (512 << 10) / record_bytes) * record_bytes;
}

int RunReadLimit(const Args& args) {
  if (args.record_bytes == 0) Usage("feed_consumer", "--read-limit needs --record-bytes");
  constexpr size_t kChunkBytes = 16 << 20;
  auto buffer = std::make_unique<char[]>(kChunkBytes);
  const size_t size = ReadPass(args.read_limit_file, buffer.get(), kChunkBytes);  // page-caches it
  const double seconds = MedianSeconds(
      args.passes, [&] { ReadPass(args.read_limit_file, buffer.get(), kChunkBytes); });
  return Report(args, size / args.record_bytes, size, seconds);
}

// Copies `size` bytes of whole records at `data` into `batch`, handing it
// on every `per_batch` records (`in_batch` carries the count across calls).
void CopyRecords(const char* data, size_t size, size_t record_bytes, size_t per_batch,
                 BatchBuffer& batch, size_t& in_batch) {
  for (size_t offset = 0; offset + record_bytes <= size; offset += record_bytes) {
    batch.Append(std::string_view(data + offset, record_bytes));
    if (++in_batch == per_batch) {
      batch.Consume();
      batch.Clear();
      in_batch = 0;
    }
  }
}

// A ring of equal slots in shared memory: the feeder fills slot i % slots
// once the consumer has emptied it.
class PipelineRing {
 public:
  PipelineRing(size_t ring_bytes, size_t slot_bytes)
      : slot_bytes_(slot_bytes), slots_(ring_bytes / slot_bytes), lengths_(slots_) {
    const int fd = ::memfd_create("feed-pipeline-limit", MFD_CLOEXEC);
    void* mapped = MAP_FAILED;
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(slots_ * slot_bytes_)) == 0) {
      mapped = ::mmap(nullptr, slots_ * slot_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (mapped == MAP_FAILED) {
      std::fprintf(stderr, "feed_consumer: cannot map a ring: %s\n", std::strerror(errno));
      std::exit(1);
    }
    if (fd >= 0) ::close(fd);
    data_ = static_cast<char*>(mapped);
    std::memset(data_, 0, slots_ * slot_bytes_);  // faulted in, as a queue in use is
  }
  ~PipelineRing() { ::munmap(data_, slots_ * slot_bytes_); }

  // One pass: the feeder on a thread of its own, the consumer here.
  void Pass(const std::string& path, BatchBuffer& batch, size_t record_bytes, size_t per_batch) {
    filled_ = 0;
    emptied_ = 0;
    ended_ = false;
    std::thread feeder([&] { Feed(path); });
    batch.Clear();  // a pass starts with an empty batch, as a feed does
    uint64_t next = 0;
    size_t in_batch = 0;
    for (;;) {
      uint64_t filled;
      while ((filled = filled_.load(std::memory_order_acquire)) == next) {
        if (ended_.load(std::memory_order_acquire) && filled_.load() == next) break;
        __builtin_ia32_pause();
      }
      if (filled == next) break;
      const char* slot = data_ + (next % slots_) * slot_bytes_;
      const size_t length = lengths_[next % slots_];
      CopyRecords(slot, length, record_bytes, per_batch, batch, in_batch);
      emptied_.store(++next, std::memory_order_release);
    }
    batch.Consume();
    feeder.join();
  }

 private:
  void Feed(const std::string& path) {
    const int fd = OpenOrExit(path);
    off_t offset = 0;
    for (uint64_t i = 0;; ++i) {
      while (i - emptied_.load(std::memory_order_acquire) >= slots_) __builtin_ia32_pause();
      ssize_t n = ::pread(fd, data_ + (i % slots_) * slot_bytes_, slot_bytes_, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      offset += n;
      lengths_[i % slots_] = static_cast<size_t>(n);
      filled_.store(i + 1, std::memory_order_release);
    }
    ::close(fd);
    ended_.store(true, std::memory_order_release);
  }

  const size_t slot_bytes_;
  const size_t slots_;
  std::vector<size_t> lengths_;
  char* data_ = nullptr;
  std::atomic<uint64_t> filled_{0};
  std::atomic<uint64_t> emptied_{0};
  std::atomic<bool> ended_{false};
};

int RunPipelineLimit(const Args& args) {
  if (args.record_bytes == 0) Usage("feed_consumer", "--pipeline-limit needs --record-bytes");
  constexpr size_t kRingBytes = 4 << 20;  // drover's queue for small fixed-size records
  const size_t slot_bytes = RunBytes(args.record_bytes);
  if (slot_bytes * 2 > kRingBytes) Usage("feed_consumer", "--record-bytes too large for the ring");
  const size_t size = PageCache(args.pipeline_file);
  PipelineRing ring(kRingBytes, slot_bytes);
  BatchBuffer batch(args.batch * args.record_bytes);
  const double seconds = MedianSeconds(
      args.passes, [&] { ring.Pass(args.pipeline_file, batch, args.record_bytes, args.batch); });
  return Report(args, size / args.record_bytes, size, seconds);
}

// One pass of the one-thread limit through pread(2) into `run`.
void OneThreadReadPass(const std::string& path, std::vector<char>& run, size_t record_bytes,
                       size_t per_batch, BatchBuffer& batch) {
  const int fd = OpenOrExit(path);
  batch.Clear();
  size_t in_batch = 0;
  off_t offset = 0;
  for (;;) {
    ssize_t n = ::pread(fd, run.data(), run.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    offset += n;
    CopyRecords(run.data(), static_cast<size_t>(n), record_bytes, per_batch, batch, in_batch);
  }
  batch.Consume();
  ::close(fd);
}

// One pass of the one-thread limit through a fresh mapping of the file.
void OneThreadMapPass(const std::string& path, size_t size, size_t record_bytes, size_t per_batch,
                      BatchBuffer& batch) {
  const int fd = OpenOrExit(path);
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) {
    std::fprintf(stderr, "cannot map %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  batch.Clear();
  size_t in_batch = 0;
  CopyRecords(static_cast<const char*>(mapped), size, record_bytes, per_batch, batch, in_batch);
  batch.Consume();
  ::munmap(mapped, size);
}

int RunOneThreadLimit(const Args& args) {
  if (args.record_bytes == 0) Usage("feed_consumer", "--one-thread-limit needs --record-bytes");
  const size_t size = PageCache(args.one_thread_file);
  std::vector<char> run(RunBytes(args.record_bytes));
  BatchBuffer batch(args.batch * args.record_bytes);
  const double seconds = MedianSeconds(args.passes, [&] {
    if (args.ingest == "map") {
      OneThreadMapPass(args.one_thread_file, size, args.record_bytes, args.batch, batch);
    } else {
      OneThreadReadPass(args.one_thread_file, run, args.record_bytes, args.batch, batch);
    }
  });
  return Report(args, size / args.record_bytes, size, seconds);
}

// Every whole 8-byte word of `record`, XORed: a read of all of it.
uint64_t XorWords(std::string_view record) {
  uint64_t sum = 0;
  for (size_t i = 0; i + 8 <= record.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, record.data() + i, 8);
    sum ^= word;
  }
  return sum;
}

int RunFeed(const Args& args) {
  drover::Result<std::unique_ptr<drover::DataFeed>> connected =
      drover::DataFeed::Connect(drover::ProcessEnvironment());
  if (!connected.ok()) {
    std::fprintf(stderr, "feed_consumer: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  drover::DataFeed& feed = **connected;
  BatchBuffer batch(args.batch * std::max<uint64_t>(feed.record_bytes(), 1));
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t sum = 0;
  Clock::time_point first;
  drover::RecordBatch next;  // reused: NextBatch allocates nothing
  for (;;) {
    if (drover::Status status = feed.NextBatch(args.batch, &next); !status.ok()) {
      std::fprintf(stderr, "feed_consumer: after %llu records: %s\n",
                   static_cast<unsigned long long>(records), status.ToString().c_str());
      return 1;
    }
    if (next.records.empty()) break;
    if (records == 0) first = Clock::now();
    records += next.records.size();
    if (args.in_place) {
      for (std::string_view record : next.records) {
        sum ^= XorWords(record);
        bytes += record.size();
      }
      continue;
    }
    batch.Clear();
    for (std::string_view record : next.records) batch.Append(record);
    batch.Consume();
    bytes += batch.size();
  }
  Clock::time_point end = Clock::now();
  asm volatile("" : : "r"(sum));  // the reads must happen
  if (records == 0) {
    std::fprintf(stderr, "feed_consumer: the feed ended without a record\n");
    return 1;
  }
  return Report(args, records, bytes, std::chrono::duration<double>(end - first).count());
}

}  // namespace

int main(int argc, char** argv) {
  Args args = ParseArgs(argc, argv);
  if (!args.memcpy_file.empty()) return RunMemcpy(args);
  if (!args.read_limit_file.empty()) return RunReadLimit(args);
  if (!args.pipeline_file.empty()) return RunPipelineLimit(args);
  if (!args.one_thread_file.empty()) return RunOneThreadLimit(args);
  return RunFeed(args);
}

#include "feed/record_io.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover::feed {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Code = Status::Code;
using ::drover::testing::TempDir;

// Changes the working directory for one test.
class ScopedChdir {
 public:
  explicit ScopedChdir(const std::string& dir) : old_(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~ScopedChdir() { std::filesystem::current_path(old_); }

 private:
  std::filesystem::path old_;
};

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

uint64_t FileSize(const std::string& path) {
  return std::filesystem::file_size(path);
}

PlanOptions Options(RecordFormat format, uint64_t split_bytes = 64ull << 20,
                    uint64_t record_bytes = 0) {
  PlanOptions options;
  options.format = format;
  options.split_bytes = split_bytes;
  options.record_bytes = record_bytes;
  return options;
}

// The records `reader` has left.
Result<std::vector<std::string>> Drain(RecordReader& reader) {
  std::vector<std::string> records;
  for (;;) {
    std::string_view record;
    DROVER_ASSIGN_OR_RETURN(bool more, reader.Next(&record));
    if (!more) return records;
    records.emplace_back(record);
  }
}

// Every record of `partition` from `start` (its begin by default).
Result<std::vector<std::string>> ReadAll(const Partition& partition, const PlanOptions& options,
                                         uint64_t start = UINT64_MAX,
                                         WindowWay windows = WindowWay::kMap) {
  if (start == UINT64_MAX) start = partition.begin;
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader,
                          RecordReader::Open(partition, options, start, windows));
  DROVER_ASSIGN_OR_RETURN(std::vector<std::string> records, Drain(*reader));
  if (reader->next_offset() != partition.end) {
    return Status::Internal("next_offset " + std::to_string(reader->next_offset()) +
                            " at the end, want " + std::to_string(partition.end));
  }
  return records;
}

Partition WholeFile(const std::string& path) {
  return Partition{path, 0, FileSize(path)};
}

std::string TfRecords(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& record : records) AppendTfRecord(record, &out);
  return out;
}

// ---- CRC-32C ----

uint32_t BitwiseCrc32c(const std::string& data) {
  uint32_t crc = ~0u;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
  }
  return ~crc;
}

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 random(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  return bytes;
}

TEST(Crc32cTest, KnownVectors) {
  for (auto* crc32c : {&Crc32c, &internal::Crc32cPortable}) {
    EXPECT_EQ(crc32c("123456789", 9, 0), 0xE3069283u);
    EXPECT_EQ(crc32c("", 0, 0), 0u);
    // RFC 3720 (iSCSI) B.4.
    const std::string zeros(32, '\0');
    const std::string ones(32, '\xff');
    std::string ascending(32, '\0');
    for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
    EXPECT_EQ(crc32c(zeros.data(), zeros.size(), 0), 0x8A9136AAu);
    EXPECT_EQ(crc32c(ones.data(), ones.size(), 0), 0x62A8AB43u);
    EXPECT_EQ(crc32c(ascending.data(), ascending.size(), 0), 0x46DD794Eu);
  }
}

TEST(Crc32cTest, MatchesBitwiseReferenceAcrossLengthsAndAlignments) {
  const std::string data = RandomBytes(200'000, 7);
  // Around the three-stream block sizes (3 x 256, 3 x 8192) and their tails.
  const std::vector<size_t> lengths = {0,     1,     7,     8,     9,       15,     63,    64,
                                       255,   767,   768,   769,   1000,    24575,  24576, 24577,
                                       24583, 49152, 50000, 99999, 150'000, 199'990};
  for (size_t length : lengths) {
    for (size_t offset = 0; offset < 8; ++offset) {
      const std::string slice = data.substr(offset, length);
      const uint32_t want = BitwiseCrc32c(slice);
      EXPECT_EQ(Crc32c(slice.data(), slice.size()), want) << length << " at " << offset;
      EXPECT_EQ(internal::Crc32cPortable(data.data() + offset, length), want)
          << length << " at " << offset;
    }
  }
}

TEST(Crc32cTest, ExtendsLikeConcatenation) {
  const std::string data = RandomBytes(60'000, 11);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{777}, size_t{30'000}, data.size()}) {
    EXPECT_EQ(Crc32c(data.data() + cut, data.size() - cut, Crc32c(data.data(), cut)), whole);
    EXPECT_EQ(internal::Crc32cPortable(data.data() + cut, data.size() - cut,
                                       internal::Crc32cPortable(data.data(), cut)),
              whole);
  }
}

TEST(Crc32cTest, MaskIsTensorFlows) {
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(MaskCrc(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TfRecordTest, AppendWritesTensorFlowFraming) {
  std::string out = "prefix";
  AppendTfRecord("hello", &out);
  ASSERT_EQ(out.size(), 6u + 8 + 4 + 5 + 4);
  const std::string length = out.substr(6, 8);
  EXPECT_EQ(length, std::string("\x05\0\0\0\0\0\0\0", 8));
  auto fixed32 = [&](size_t at) {
    uint32_t value = 0;
    for (int i = 3; i >= 0; --i) value = value << 8 | static_cast<unsigned char>(out[at + i]);
    return value;
  };
  EXPECT_EQ(fixed32(14), MaskCrc(Crc32c(length.data(), 8)));
  EXPECT_EQ(out.substr(18, 5), "hello");
  EXPECT_EQ(fixed32(23), MaskCrc(Crc32c("hello", 5)));
}

// ---- Formats ----

TEST(RecordFormatTest, ParsesTheFourNames) {
  for (RecordFormat format :
       {RecordFormat::kCsv, RecordFormat::kJsonl, RecordFormat::kTfRecord, RecordFormat::kRaw}) {
    ASSERT_OK_AND_ASSIGN(RecordFormat parsed, ParseRecordFormat(RecordFormatName(format)));
    EXPECT_EQ(parsed, format);
  }
  EXPECT_THAT(ParseRecordFormat("parquet"),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("parquet"), HasSubstr("csv"), HasSubstr("jsonl"),
                             HasSubstr("tfrecord"), HasSubstr("raw"))));
}

class RecordIoTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  std::string Write(const std::string& name, std::string_view bytes) {
    std::string path = dir_.File(name);
    WriteFile(path, bytes);
    return path;
  }

  TempDir dir_;
};

TEST_F(RecordIoTest, CsvLastLineWithAndWithoutNewline) {
  const PlanOptions csv = Options(RecordFormat::kCsv);
  EXPECT_THAT(ReadAll(WholeFile(Write("with.csv", "a,1\nb,2\n")), csv).value(),
              ElementsAre("a,1", "b,2"));
  EXPECT_THAT(ReadAll(WholeFile(Write("without.csv", "a,1\nb,2")), csv).value(),
              ElementsAre("a,1", "b,2"));
  EXPECT_THAT(ReadAll(WholeFile(Write("one.csv", "x")), csv).value(), ElementsAre("x"));
}

TEST_F(RecordIoTest, CrlfLosesCrAndEmptyLinesAreSkipped) {
  const std::string path = Write("crlf.csv", "\n\r\na\r\n\r\n\nb\r\n\n c \r\nlast\r");
  // A lone '\r' at the very end is data: only "\r\n" is a line ending.
  EXPECT_THAT(ReadAll(WholeFile(path), Options(RecordFormat::kJsonl)).value(),
              ElementsAre("a", "b", " c ", "last\r"));
}

TEST_F(RecordIoTest, OnlyEmptyLinesGiveNoRecordButReachTheEnd) {
  const std::string path = Write("blank.csv", "\n\n\r\n");
  EXPECT_THAT(ReadAll(WholeFile(path), Options(RecordFormat::kCsv)).value(), IsEmpty());
}

TEST_F(RecordIoTest, EmptyPartitionReadsNothing) {
  const std::string path = Write("empty.csv", "");
  for (RecordFormat format : {RecordFormat::kCsv, RecordFormat::kTfRecord, RecordFormat::kRaw}) {
    EXPECT_THAT(ReadAll(Partition{path, 0, 0}, Options(format, 0, 4)).value(), IsEmpty());
  }
}

TEST_F(RecordIoTest, RecordsAreViewsIntoTheBufferUntilNext) {
  const std::string path = Write("views.csv", "first\nsecond\n");
  ASSERT_OK_AND_ASSIGN(auto reader,
                       RecordReader::Open(WholeFile(path), Options(RecordFormat::kCsv), 0));
  std::string_view first;
  std::string_view second;
  ASSERT_TRUE(reader->Next(&first).value());
  EXPECT_EQ(first, "first");
  ASSERT_TRUE(reader->Next(&second).value());
  EXPECT_EQ(second, "second");
  // Both lie in one buffer, one after the other: no copy per record.
  EXPECT_EQ(second.data(), first.data() + 6);
}

TEST_F(RecordIoTest, LinesLongerThanTheReadBufferAreWhole) {
  std::string big(9 << 20, 'x');  // over two read chunks
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = 'a' + static_cast<char>(i % 26);
  const std::string content = "short\n" + big + "\r\nafter\n" + big;
  const std::string path = Write("long.csv", content);
  ASSERT_OK_AND_ASSIGN(auto records, ReadAll(WholeFile(path), Options(RecordFormat::kCsv)));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0], "short");
  EXPECT_TRUE(records[1] == big);
  EXPECT_EQ(records[2], "after");
  EXPECT_TRUE(records[3] == big);
}

TEST_F(RecordIoTest, StartOffsetOutsideThePartitionIsRejected) {
  const std::string path = Write("range.csv", "a\nb\nc\n");
  const Partition partition{path, 2, 4};
  EXPECT_THAT(RecordReader::Open(partition, Options(RecordFormat::kCsv), 1),
              StatusIs(Code::kInvalidArgument, HasSubstr("outside the partition")));
  EXPECT_THAT(RecordReader::Open(partition, Options(RecordFormat::kCsv), 5),
              StatusIs(Code::kInvalidArgument, HasSubstr("outside the partition")));
  EXPECT_THAT(RecordReader::Open(Partition{path, 4, 2}, Options(RecordFormat::kCsv), 4),
              StatusIs(Code::kInvalidArgument, HasSubstr(path)));
  EXPECT_THAT(ReadAll(partition, Options(RecordFormat::kCsv)).value(), ElementsAre("b"));
}

TEST_F(RecordIoTest, MissingFileIsNotFound) {
  EXPECT_THAT(
      RecordReader::Open(Partition{dir_.File("nope.csv"), 0, 10}, Options(RecordFormat::kCsv), 0),
      StatusIs(Code::kNotFound, HasSubstr("nope.csv")));
}

TEST_F(RecordIoTest, PartitionPastTheFileEndIsRejected) {
  const std::string path = Write("short.csv", "a\n");
  EXPECT_THAT(RecordReader::Open(Partition{path, 0, 100}, Options(RecordFormat::kCsv), 0),
              StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("100"))));
}

// ---- Splitting then reading: every record exactly once ----

struct Corpus {
  std::string bytes;
  std::vector<std::string> records;
};

// Lines of random length (some longer than the smaller split sizes), a mix of
// "\n" and "\r\n" endings, empty lines between, maybe no final newline.
Corpus MakeLines(size_t count, size_t max_length, uint32_t seed) {
  std::mt19937 random(seed);
  Corpus corpus;
  for (size_t i = 0; i < count; ++i) {
    if (random() % 7 == 0) corpus.bytes += random() % 2 ? "\n" : "\r\n";
    size_t length = 1 + random() % max_length;
    if (random() % 50 == 0) length = max_length * 20;  // far over small splits
    std::string line(length, '\0');
    for (char& c : line) c = static_cast<char>(' ' + random() % 94);
    corpus.records.push_back(line);
    corpus.bytes += line;
    if (i + 1 < count || random() % 2) corpus.bytes += random() % 3 == 0 ? "\r\n" : "\n";
  }
  return corpus;
}

Corpus MakeTfRecords(size_t count, size_t max_length, uint32_t seed) {
  std::mt19937 random(seed);
  Corpus corpus;
  for (size_t i = 0; i < count; ++i) {
    size_t length = random() % (max_length + 1);  // empty records are records
    if (random() % 50 == 0) length = max_length * 20;
    corpus.records.push_back(RandomBytes(length, static_cast<uint32_t>(random())));
  }
  corpus.bytes = TfRecords(corpus.records);
  return corpus;
}

Corpus MakeRaw(size_t count, size_t record_bytes, uint32_t seed) {
  Corpus corpus;
  corpus.bytes = RandomBytes(count * record_bytes, seed);
  for (size_t i = 0; i < count; ++i) {
    corpus.records.push_back(corpus.bytes.substr(i * record_bytes, record_bytes));
  }
  return corpus;
}

// Plans `path` with `options`, checks the partitions tile the file on the
// documented boundaries, and reads them all back.
void ExpectSplitReadsEveryRecordOnce(const std::string& path, const PlanOptions& options,
                                     const std::vector<std::string>& want) {
  SCOPED_TRACE(std::string(RecordFormatName(options.format)) +
               " split_bytes=" + std::to_string(options.split_bytes));
  ASSERT_OK_AND_ASSIGN(std::vector<Partition> partitions, PlanPartitions({path}, options));
  const uint64_t size = FileSize(path);
  std::vector<std::string> got;
  uint64_t expected_begin = 0;
  for (size_t i = 0; i < partitions.size(); ++i) {
    const Partition& partition = partitions[i];
    EXPECT_EQ(partition.path, path);
    EXPECT_EQ(partition.begin, expected_begin);
    EXPECT_LT(partition.begin, partition.end);
    if (i + 1 < partitions.size()) {
      EXPECT_GE(partition.end - partition.begin, options.split_bytes) << partition.Name();
    }
    expected_begin = partition.end;
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> records, ReadAll(partition, options));
    got.insert(got.end(), records.begin(), records.end());
  }
  EXPECT_EQ(expected_begin, size);
  if (options.split_bytes == 0 || size <= options.split_bytes) {
    EXPECT_EQ(partitions.size(), 1u);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(got[i] == want[i]) << "record " << i;
}

const std::vector<uint64_t> kSplitSizes = {1, 7, 100, 1000, 65536, 1 << 20, 0};

TEST_F(RecordIoTest, SplitCsvAndJsonlReadEveryRecordOnce) {
  const Corpus corpus = MakeLines(3000, 300, 1);
  const std::string path = Write("lines.csv", corpus.bytes);
  for (RecordFormat format : {RecordFormat::kCsv, RecordFormat::kJsonl}) {
    for (uint64_t split : kSplitSizes) {
      ExpectSplitReadsEveryRecordOnce(path, Options(format, split), corpus.records);
    }
  }
}

TEST_F(RecordIoTest, SplitTfRecordReadsEveryRecordOnce) {
  const Corpus corpus = MakeTfRecords(3000, 300, 2);
  const std::string path = Write("data.tfrecord", corpus.bytes);
  for (uint64_t split : kSplitSizes) {
    ExpectSplitReadsEveryRecordOnce(path, Options(RecordFormat::kTfRecord, split), corpus.records);
  }
}

TEST_F(RecordIoTest, SplitRawReadsEveryRecordOnce) {
  const Corpus corpus = MakeRaw(5000, 24, 3);
  const std::string path = Write("data.bin", corpus.bytes);
  for (uint64_t split : kSplitSizes) {
    ExpectSplitReadsEveryRecordOnce(path, Options(RecordFormat::kRaw, split, 24), corpus.records);
  }
  // Records larger than split_bytes: one record per partition.
  ExpectSplitReadsEveryRecordOnce(path, Options(RecordFormat::kRaw, 10, 24), corpus.records);
}

// ReadRunInto (pread into the caller's memory) and NextRun (a view of the
// mapping) read the same records and may take turns: the feeder switches
// from one to the other after measuring both.
TEST_F(RecordIoTest, RawRunsReadIntoMemoryOrMappedTakeTurns) {
  const Corpus corpus = MakeRaw(5000, 24, 5);
  const Partition partition = WholeFile(Write("turns.bin", corpus.bytes));
  const PlanOptions raw = Options(RecordFormat::kRaw, 0, 24);
  ASSERT_OK_AND_ASSIGN(auto reader, RecordReader::Open(partition, raw, 24 * 10));
  std::string got;
  std::vector<char> room(24 * 700);
  for (int turn = 0;; ++turn) {
    size_t count;
    if (turn % 3 == 0) {
      std::string_view run;
      ASSERT_OK_AND_ASSIGN(count, reader->NextRun(300 + turn, &run));
      got.append(run);
    } else {
      ASSERT_OK_AND_ASSIGN(count, reader->ReadRunInto(700, room.data()));
      got.append(room.data(), count * 24);
    }
    if (count == 0) break;
    EXPECT_EQ(reader->next_offset(), 24 * 10 + got.size());
  }
  EXPECT_EQ(got, corpus.bytes.substr(24 * 10));
  EXPECT_EQ(reader->next_offset(), corpus.bytes.size());
}

TEST_F(RecordIoTest, ReadRunIntoNamesATruncatedFileAndOtherFormatsRefuseIt) {
  const Corpus corpus = MakeRaw(100, 24, 6);
  const std::string path = Write("shrinks.bin", corpus.bytes);
  const Partition partition = WholeFile(path);
  ASSERT_OK_AND_ASSIGN(auto reader,
                       RecordReader::Open(partition, Options(RecordFormat::kRaw, 0, 24), 0));
  ASSERT_EQ(::truncate(path.c_str(), 24 * 40), 0);
  std::vector<char> room(24 * 100);
  EXPECT_THAT(reader->ReadRunInto(100, room.data()),
              StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("shrinks.bin ends at offset 960"),
                                                     HasSubstr("truncated after planning"))));
  // Sticky, as every reader error is.
  EXPECT_THAT(reader->ReadRunInto(1, room.data()), StatusIs(Code::kInvalidArgument, ::testing::_));

  ASSERT_OK_AND_ASSIGN(auto lines, RecordReader::Open(WholeFile(Write("l.csv", "a\n")),
                                                      Options(RecordFormat::kCsv), 0));
  EXPECT_THAT(lines->ReadRunInto(1, room.data()),
              StatusIs(Code::kFailedPrecondition, ::testing::_));
}

TEST_F(RecordIoTest, FilesBiggerThanTheReadBufferSplitAndReadBack) {
  // Over two 4 MiB buffers per partition, so records straddle refills.
  const Corpus lines = MakeLines(120'000, 150, 4);
  const std::string csv = Write("big.csv", lines.bytes);
  ExpectSplitReadsEveryRecordOnce(csv, Options(RecordFormat::kCsv, 0), lines.records);
  ExpectSplitReadsEveryRecordOnce(csv, Options(RecordFormat::kCsv, 5 << 20), lines.records);
  const Corpus tf = MakeTfRecords(60'000, 300, 5);
  const std::string tfrecord = Write("big.tfrecord", tf.bytes);
  ExpectSplitReadsEveryRecordOnce(tfrecord, Options(RecordFormat::kTfRecord, 0), tf.records);
  ExpectSplitReadsEveryRecordOnce(tfrecord, Options(RecordFormat::kTfRecord, 3 << 20), tf.records);
  const Corpus raw = MakeRaw(300'000, 37, 6);  // 37 does not divide the buffer size
  const std::string bin = Write("big.bin", raw.bytes);
  ExpectSplitReadsEveryRecordOnce(bin, Options(RecordFormat::kRaw, 0, 37), raw.records);
  ExpectSplitReadsEveryRecordOnce(bin, Options(RecordFormat::kRaw, 5 << 20, 37), raw.records);
}

#if defined(__x86_64__) || defined(__aarch64__)
// From here on, this process cannot map a file (mmap with a file descriptor
// fails with ENODEV, as on a file system that maps nothing, or `action`);
// anonymous memory still maps. For a child process only: there is no way
// back.
bool RefuseFileMappings(uint32_t action = SECCOMP_RET_ERRNO | ENODEV) {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#else
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 0, 2),
      // The low half of the fd argument: -1 for anonymous memory.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[4])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffu, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, action),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

bool CanMap(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* map = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return false;
  ::munmap(map, 4096);
  return true;
}

// Every record of `path` as planned with `options`, partition by partition.
Result<std::vector<std::string>> PlanAndReadAll(const std::string& path, const PlanOptions& options,
                                                WindowWay windows = WindowWay::kMap) {
  DROVER_ASSIGN_OR_RETURN(std::vector<Partition> partitions, PlanPartitions({path}, options));
  std::vector<std::string> records;
  for (const Partition& partition : partitions) {
    DROVER_ASSIGN_OR_RETURN(std::vector<std::string> read,
                            ReadAll(partition, options, UINT64_MAX, windows));
    records.insert(records.end(), read.begin(), read.end());
  }
  return records;
}

// "" when `got` holds `want`; what differs otherwise (gtest's assertions
// would not be seen from a child process).
std::string Mismatch(const std::string& what, const Result<std::vector<std::string>>& got,
                     const std::vector<std::string>& want) {
  if (!got.ok()) return what + ": " + got.status().ToString() + "\n";
  if (got->size() != want.size()) {
    return what + ": " + std::to_string(got->size()) + " records, want " +
           std::to_string(want.size()) + "\n";
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if ((*got)[i] != want[i]) return what + ": record " + std::to_string(i) + " differs\n";
  }
  return "";
}

// Runs `check` in a child process (a seccomp filter cannot be undone), which
// prints what failed, and expects it to return "".
void ExpectAllReadInAChild(const std::function<std::string()>& check) {
  EXPECT_EXIT(
      {
        const std::string failures = check();
        std::fprintf(stderr, "%s\n", failures.empty() ? "all read" : failures.c_str());
        std::_Exit(failures.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "all read");
}

// Where the file system maps nothing, the feeder's readers read their
// window instead: every format, records straddling refills, records longer
// than the window, resuming, and a file cut short. In a child process (the
// refusal cannot be undone), which says what failed.
TEST_F(RecordIoTest, FileSystemsThatMapNothingAreRead) {
  const Corpus lines = MakeLines(60'000, 150, 14);
  const std::string csv = Write("big.csv", lines.bytes);
  const Corpus tf = MakeTfRecords(30'000, 300, 15);
  const std::string tfrecord = Write("big.tfrecord", tf.bytes);
  const Corpus raw = MakeRaw(150'000, 37, 16);
  const std::string bin = Write("big.bin", raw.bytes);
  std::string big(5 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = 'a' + static_cast<char>(i % 26);
  const std::string long_lines = Write("long.csv", "short\n" + big + "\r\nafter\n" + big);
  const std::string shrinks = Write("shrinks.csv", lines.bytes);
  const uint64_t resume = lines.bytes.find('\n', lines.bytes.size() / 2) + 1;
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> resumed,
                       ReadAll(WholeFile(csv), Options(RecordFormat::kCsv), resume));
  auto read_without_mappings = [&]() -> std::string {
    if (!RefuseFileMappings()) {
      return std::string("cannot install the seccomp filter: ") + std::strerror(errno);
    }
    if (CanMap(csv)) return "the file could still be mapped";
    std::string failures;
    failures += Mismatch("csv", PlanAndReadAll(csv, Options(RecordFormat::kCsv, 0)), lines.records);
    failures += Mismatch("jsonl split", PlanAndReadAll(csv, Options(RecordFormat::kJsonl, 1 << 20)),
                         lines.records);
    failures += Mismatch("tfrecord", PlanAndReadAll(tfrecord, Options(RecordFormat::kTfRecord, 0)),
                         tf.records);
    failures +=
        Mismatch("raw", PlanAndReadAll(bin, Options(RecordFormat::kRaw, 0, 37)), raw.records);
    failures += Mismatch("raw split", PlanAndReadAll(bin, Options(RecordFormat::kRaw, 1 << 20, 37)),
                         raw.records);
    failures += Mismatch("long lines", PlanAndReadAll(long_lines, Options(RecordFormat::kCsv, 0)),
                         {"short", big, "after", big});
    failures +=
        Mismatch("resumed", ReadAll(WholeFile(csv), Options(RecordFormat::kCsv), resume), resumed);
    // Cut short while read: an error naming the file, not fewer records.
    Result<std::unique_ptr<RecordReader>> reader =
        RecordReader::Open(WholeFile(shrinks), Options(RecordFormat::kCsv), 0);
    if (!reader.ok()) return failures + "open: " + reader.status().ToString();
    std::string_view record;
    Result<bool> more = (*reader)->Next(&record);
    if (::truncate(shrinks.c_str(), static_cast<off_t>(lines.bytes.size() * 2 / 3)) != 0) {
      return failures + "truncate: " + std::strerror(errno);
    }
    while (more.ok() && *more) more = (*reader)->Next(&record);
    if (more.ok() ||
        more.status().message().find("shrinks.csv ends at offset") == std::string::npos) {
      failures += "cut short: " + (more.ok() ? std::string("no error") : more.status().ToString());
    }
    return failures;
  };
  ExpectAllReadInAChild(read_without_mappings);
}

// Asked to read its windows (--feed-ingest read, for hosts where mapping is
// dear), a CSV, JSONL or TFRecord reader never maps the file: a mapping
// kills this child. Same records as mapped, across refills and splits.
TEST_F(RecordIoTest, ReadWindowsAreAskedForAndNeverMapTheFile) {
  const Corpus lines = MakeLines(60'000, 150, 17);
  const std::string csv = Write("big.csv", lines.bytes);
  const Corpus tf = MakeTfRecords(30'000, 300, 18);
  const std::string tfrecord = Write("big.tfrecord", tf.bytes);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> mapped,
                       PlanAndReadAll(csv, Options(RecordFormat::kCsv, 1 << 20)));
  ASSERT_EQ(mapped, lines.records);
  auto read_never_mapping = [&]() -> std::string {
    if (!RefuseFileMappings(SECCOMP_RET_KILL_PROCESS)) {
      return std::string("cannot install the seccomp filter: ") + std::strerror(errno);
    }
    std::string failures;
    failures +=
        Mismatch("csv", PlanAndReadAll(csv, Options(RecordFormat::kCsv, 0), WindowWay::kRead),
                 lines.records);
    failures +=
        Mismatch("jsonl split",
                 PlanAndReadAll(csv, Options(RecordFormat::kJsonl, 1 << 20), WindowWay::kRead),
                 lines.records);
    failures += Mismatch(
        "tfrecord split",
        PlanAndReadAll(tfrecord, Options(RecordFormat::kTfRecord, 3 << 20), WindowWay::kRead),
        tf.records);
    // A whole file a record, larger than a read window too.
    failures += Mismatch("whole files",
                         PlanAndReadAll(tfrecord, Options(RecordFormat::kRaw), WindowWay::kRead),
                         {tf.bytes});
    return failures;
  };
  ExpectAllReadInAChild(read_never_mapping);
  // The same filter kills a reader that maps: the test can fail.
  EXPECT_EXIT(
      {
        RefuseFileMappings(SECCOMP_RET_KILL_PROCESS);
        (void)PlanAndReadAll(csv, Options(RecordFormat::kCsv, 0));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSYS), "");
}
#endif

// Takes windows mapped and read by turns (a feeder measuring which costs
// less), and checks that they begin and end in pairs.
class AlternatingWindows : public WindowPolicy {
 public:
  WindowWay BeginWindow() override {
    EXPECT_FALSE(open_) << "a window began before the last one ended";
    open_ = true;
    return begun_++ % 2 == 0 ? WindowWay::kMap : WindowWay::kRead;
  }
  void EndWindow(uint64_t bytes) override {
    EXPECT_TRUE(open_) << "a window ended that never began";
    open_ = false;
    bytes_ += bytes;
  }
  int begun_ = 0;
  uint64_t bytes_ = 0;
  bool open_ = false;
};

// Every record of `path` as one partition, its windows' ways chosen by
// `policy`; the reader is gone when this returns.
Result<std::vector<std::string>> ReadAllWith(const std::string& path, const PlanOptions& options,
                                             WindowPolicy& policy) {
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<RecordReader> reader,
                          RecordReader::Open(WholeFile(path), options, 0, policy));
  return Drain(*reader);
}

// Windows that switch between mapped and read at every fill (as while the
// feeder measures) lose and repeat nothing: records straddling each kind
// of switch, a line longer than a read window across one, TFRecord too;
// every byte is in exactly one window, and the last window ends with the
// reader.
TEST_F(RecordIoTest, WindowsSwitchingBetweenMappedAndReadReadEveryRecordOnce) {
  // Over 64 MiB, so there is more than one mapped window, with lines longer
  // than a read window.
  std::string big(6 << 20, 'y');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = 'a' + static_cast<char>(i % 26);
  std::mt19937 random(19);
  std::string csv_bytes;
  std::vector<std::string> csv_records;
  std::vector<uint64_t> big_at = {33 << 20, 62 << 20};  // in a read window, then anywhere
  while (csv_bytes.size() < (70u << 20)) {
    std::string line(1 + random() % 250, 'x');
    for (char& c : line) c = static_cast<char>(' ' + random() % 94);
    if (!big_at.empty() && csv_bytes.size() >= big_at.front()) {
      line = big;
      big_at.erase(big_at.begin());
    }
    csv_bytes += line + (random() % 3 == 0 ? "\r\n" : "\n");
    csv_records.push_back(std::move(line));
  }
  const std::string csv = Write("switching.csv", csv_bytes);
  AlternatingWindows csv_windows;
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> read,
                       ReadAllWith(csv, Options(RecordFormat::kCsv), csv_windows));
  EXPECT_TRUE(read == csv_records) << read.size() << " records, want " << csv_records.size();
  EXPECT_GE(csv_windows.begun_, 4);
  EXPECT_FALSE(csv_windows.open_);
  EXPECT_EQ(csv_windows.bytes_, csv_bytes.size());

  const Corpus tf = MakeTfRecords(90'000, 500, 20);
  ASSERT_GT(tf.bytes.size(), 36u << 20);
  const std::string tfrecord = Write("switching.tfrecord", tf.bytes);
  AlternatingWindows tf_windows;
  ASSERT_OK_AND_ASSIGN(read, ReadAllWith(tfrecord, Options(RecordFormat::kTfRecord), tf_windows));
  EXPECT_TRUE(read == tf.records) << read.size() << " records, want " << tf.records.size();
  EXPECT_GE(tf_windows.begun_, 3);
  EXPECT_FALSE(tf_windows.open_);
  EXPECT_EQ(tf_windows.bytes_, tf.bytes.size());

  // Whole-file raw records: a file a window, the ways taking turns file by file.
  AlternatingWindows file_windows;
  std::vector<std::string> files = {RandomBytes(100'000, 21), RandomBytes(6 << 20, 22),
                                    RandomBytes(3, 23), RandomBytes(5 << 20, 24)};
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = Write("file" + std::to_string(i) + ".bin", files[i]);
    ASSERT_OK_AND_ASSIGN(read, ReadAllWith(path, Options(RecordFormat::kRaw), file_windows));
    ASSERT_EQ(read.size(), 1u);
    EXPECT_TRUE(read[0] == files[i]) << "file " << i;
  }
  EXPECT_EQ(file_windows.begun_, 4);
  EXPECT_FALSE(file_windows.open_);
}

TEST_F(RecordIoTest, TfRecordLargerThanTheReadBuffer) {
  const std::vector<std::string> records = {"small", RandomBytes(6 << 20, 9), "", "tail"};
  const std::string path = Write("huge.tfrecord", TfRecords(records));
  ExpectSplitReadsEveryRecordOnce(path, Options(RecordFormat::kTfRecord, 1 << 20), records);
}

TEST_F(RecordIoTest, CsvSplitsAfterTheNewlineAtOrAfterTheSplitPoint) {
  std::string content;
  for (int i = 0; i < 10; ++i) content += "123456789\n";  // 10-byte lines
  const std::string path = Write("even.csv", content);
  ASSERT_OK_AND_ASSIGN(auto partitions, PlanPartitions({path}, Options(RecordFormat::kCsv, 20)));
  // A chunk that ends exactly on a newline keeps it: even partitions.
  EXPECT_THAT(partitions,
              ElementsAre(Partition{path, 0, 20}, Partition{path, 20, 40}, Partition{path, 40, 60},
                          Partition{path, 60, 80}, Partition{path, 80, 100}));
  ASSERT_OK_AND_ASSIGN(partitions, PlanPartitions({path}, Options(RecordFormat::kCsv, 25)));
  EXPECT_THAT(partitions, ElementsAre(Partition{path, 0, 30}, Partition{path, 30, 60},
                                      Partition{path, 60, 90}, Partition{path, 90, 100}));
}

TEST_F(RecordIoTest, RawSplitsOnWholeRecords) {
  const std::string path = Write("r.bin", std::string(240, 'r'));
  ASSERT_OK_AND_ASSIGN(auto partitions,
                       PlanPartitions({path}, Options(RecordFormat::kRaw, 50, 24)));
  EXPECT_THAT(partitions, ElementsAre(Partition{path, 0, 72}, Partition{path, 72, 144},
                                      Partition{path, 144, 216}, Partition{path, 216, 240}));
}

TEST_F(RecordIoTest, TfRecordSplitsOnRecordBoundaries) {
  const std::string path = Write("b.tfrecord", TfRecords({"aaaa", "bbbb", "cccc", "dddd"}));
  ASSERT_OK_AND_ASSIGN(auto partitions,
                       PlanPartitions({path}, Options(RecordFormat::kTfRecord, 30)));
  // Records are 20 bytes framed.
  EXPECT_THAT(partitions, ElementsAre(Partition{path, 0, 40}, Partition{path, 40, 80}));
}

// ---- Resuming ----

TEST_F(RecordIoTest, ResumesFromNextOffset) {
  struct Case {
    PlanOptions options;
    Corpus corpus;
  };
  const std::vector<Case> cases = {
      {Options(RecordFormat::kCsv), MakeLines(200, 40, 21)},
      {Options(RecordFormat::kJsonl), MakeLines(200, 40, 22)},
      {Options(RecordFormat::kTfRecord), MakeTfRecords(200, 40, 23)},
      {Options(RecordFormat::kRaw, 0, 16), MakeRaw(200, 16, 24)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(RecordFormatName(c.options.format)));
    const std::string path = Write("resume", c.corpus.bytes);
    const Partition partition = WholeFile(path);
    for (size_t stop : {size_t{0}, size_t{1}, size_t{77}, c.corpus.records.size()}) {
      ASSERT_OK_AND_ASSIGN(auto reader, RecordReader::Open(partition, c.options, 0));
      EXPECT_EQ(reader->next_offset(), 0u);
      std::string_view record;
      for (size_t i = 0; i < stop; ++i) ASSERT_TRUE(reader->Next(&record).value());
      const uint64_t resume_at = reader->next_offset();
      ASSERT_OK_AND_ASSIGN(auto rest, ReadAll(partition, c.options, resume_at));
      const std::vector<std::string> want(c.corpus.records.begin() + static_cast<long>(stop),
                                          c.corpus.records.end());
      EXPECT_TRUE(rest == want) << "resumed after " << stop << " records at " << resume_at;
    }
  }
}

TEST_F(RecordIoTest, ReaderStopsAtThePartitionEnd) {
  const std::string path = Write("stop.csv", "a\nb\nc\nd\n");
  ASSERT_OK_AND_ASSIGN(auto reader,
                       RecordReader::Open(Partition{path, 2, 6}, Options(RecordFormat::kCsv), 2));
  std::string_view record;
  ASSERT_TRUE(reader->Next(&record).value());
  EXPECT_EQ(record, "b");
  ASSERT_TRUE(reader->Next(&record).value());
  EXPECT_EQ(record, "c");
  EXPECT_FALSE(reader->Next(&record).value());
  EXPECT_FALSE(reader->Next(&record).value());
  EXPECT_EQ(reader->next_offset(), 6u);
}

// ---- TFRecord corruption ----

class TfRecordCorruptionTest : public RecordIoTest {
 protected:
  void SetUp() override {
    RecordIoTest::SetUp();
    records_ = {"zero", "one", "two-two", "three"};
    bytes_ = TfRecords(records_);
  }
  // The offset of record i: each is 16 bytes of framing plus its data.
  uint64_t OffsetOf(size_t index) const {
    uint64_t offset = 0;
    for (size_t i = 0; i < index; ++i) offset += 16 + records_[i].size();
    return offset;
  }
  // Reads until the error; returns it with the records read before it.
  Status ReadUntilError(const std::string& path, std::vector<std::string>* got) {
    Result<std::unique_ptr<RecordReader>> reader =
        RecordReader::Open(WholeFile(path), Options(RecordFormat::kTfRecord), 0);
    if (!reader.ok()) return reader.status();
    for (;;) {
      std::string_view record;
      Result<bool> more = (*reader)->Next(&record);
      if (!more.ok()) {
        // Errors are sticky.
        Result<bool> again = (*reader)->Next(&record);
        EXPECT_EQ(again.status(), more.status());
        return more.status();
      }
      if (!*more) return Status::Ok();
      got->emplace_back(record);
    }
  }

  std::vector<std::string> records_;
  std::string bytes_;
};

TEST_F(TfRecordCorruptionTest, FlippedDataByteIsABadDataCrc) {
  std::string bytes = bytes_;
  bytes[OffsetOf(2) + 12 + 3] ^= 0x20;
  const std::string path = Write("data_flip.tfrecord", bytes);
  std::vector<std::string> got;
  EXPECT_THAT(
      ReadUntilError(path, &got),
      StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("record 2"),
                                             HasSubstr("offset " + std::to_string(OffsetOf(2))),
                                             HasSubstr("bad data CRC"))));
  EXPECT_THAT(got, ElementsAre("zero", "one"));
}

TEST_F(TfRecordCorruptionTest, FlippedDataCrcByteIsABadDataCrc) {
  std::string bytes = bytes_;
  bytes[OffsetOf(1) + 12 + records_[1].size()] ^= 1;
  const std::string path = Write("crc_flip.tfrecord", bytes);
  std::vector<std::string> got;
  EXPECT_THAT(ReadUntilError(path, &got),
              StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("record 1"), HasSubstr("CRC"))));
  EXPECT_THAT(got, ElementsAre("zero"));
}

TEST_F(TfRecordCorruptionTest, FlippedLengthByteIsABadLengthCrc) {
  for (size_t byte : {size_t{0}, size_t{5}, size_t{7}}) {
    std::string bytes = bytes_;
    bytes[OffsetOf(3) + byte] ^= 0x40;
    const std::string path = Write("length_flip.tfrecord", bytes);
    std::vector<std::string> got;
    EXPECT_THAT(
        ReadUntilError(path, &got),
        StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("record 3"),
                                               HasSubstr("offset " + std::to_string(OffsetOf(3))),
                                               HasSubstr("bad length CRC"))));
    EXPECT_THAT(got, ElementsAre("zero", "one", "two-two"));
    // The planner's header walk trips over it too.
    EXPECT_THAT(PlanPartitions({path}, Options(RecordFormat::kTfRecord, 10)),
                StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("CRC"))));
  }
}

TEST_F(TfRecordCorruptionTest, TruncationIsReported) {
  const uint64_t size = bytes_.size();
  for (uint64_t cut : {size - 1, size - 4, OffsetOf(3) + 13, OffsetOf(3) + 5, OffsetOf(3) + 11}) {
    const std::string path = Write("truncated.tfrecord", bytes_.substr(0, cut));
    std::vector<std::string> got;
    EXPECT_THAT(ReadUntilError(path, &got),
                StatusIs(Code::kInvalidArgument,
                         AllOf(HasSubstr(path), HasSubstr("record 3"), HasSubstr("truncated"))))
        << "cut at " << cut;
    EXPECT_THAT(got, ElementsAre("zero", "one", "two-two"));
    // The planner walks headers only up to its last split point, so it sees
    // the truncated tail only when splitting finely; readers always see it.
    EXPECT_THAT(PlanPartitions({path}, Options(RecordFormat::kTfRecord, 1)),
                StatusIs(Code::kInvalidArgument, HasSubstr(path)));
  }
}

// A header with a correct CRC but an absurd length must fail, not allocate.
TEST_F(TfRecordCorruptionTest, HugeLengthWithAValidCrcIsAnErrorNotAnAllocation) {
  for (uint64_t length : {uint64_t{1} << 40, kMaxRecordBytes + 1, uint64_t{1000}}) {
    std::string header;
    for (int i = 0; i < 8; ++i) header.push_back(static_cast<char>(length >> (8 * i)));
    const uint32_t masked = MaskCrc(Crc32c(header.data(), 8));
    for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(masked >> (8 * i)));
    const std::string path = Write("huge_length.tfrecord", bytes_ + header + "tiny");
    std::vector<std::string> got;
    EXPECT_THAT(ReadUntilError(path, &got),
                StatusIs(Code::kInvalidArgument,
                         AllOf(HasSubstr("record 4"), HasSubstr(std::to_string(length)))));
    EXPECT_EQ(got, records_);
    EXPECT_THAT(PlanPartitions({path}, Options(RecordFormat::kTfRecord, 10)),
                StatusIs(Code::kInvalidArgument, HasSubstr(std::to_string(length))));
  }
}

TEST_F(TfRecordCorruptionTest, ErrorsCountRecordsFromTheResumeOffset) {
  std::string bytes = bytes_;
  bytes[OffsetOf(3) + 12] ^= 1;
  const std::string path = Write("resume_flip.tfrecord", bytes);
  ASSERT_OK_AND_ASSIGN(
      auto reader,
      RecordReader::Open(WholeFile(path), Options(RecordFormat::kTfRecord), OffsetOf(2)));
  std::string_view record;
  ASSERT_TRUE(reader->Next(&record).value());
  EXPECT_EQ(record, "two-two");
  EXPECT_THAT(reader->Next(&record),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("record 1 after offset " + std::to_string(OffsetOf(2))),
                             HasSubstr("at offset " + std::to_string(OffsetOf(3))))));
}

// ---- Raw ----

TEST_F(RecordIoTest, RawSizeMismatchIsInvalidArgument) {
  const std::string path = Write("odd.bin", std::string(100, 'x'));
  EXPECT_THAT(
      PlanPartitions({path}, Options(RecordFormat::kRaw, 64, 24)),
      StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("100"), HasSubstr("24"))));
  EXPECT_THAT(RecordReader::Open(Partition{path, 0, 96}, Options(RecordFormat::kRaw, 0, 24), 0),
              StatusIs(Code::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("multiple"))));
  const std::string even = Write("even.bin", std::string(96, 'x'));
  EXPECT_THAT(RecordReader::Open(Partition{even, 0, 96}, Options(RecordFormat::kRaw, 0, 24), 12),
              StatusIs(Code::kInvalidArgument, HasSubstr("whole number")));
}

TEST_F(RecordIoTest, RawWithoutRecordBytesMakesEachFileOneRecord) {
  const std::string a = Write("a.bin", "first file");
  const std::string b = Write("b.bin", std::string(5000, 'b'));
  const PlanOptions options = Options(RecordFormat::kRaw, 100, 0);
  ASSERT_OK_AND_ASSIGN(auto partitions, PlanPartitions({dir_.path()}, options));
  ASSERT_THAT(partitions, ElementsAre(Partition{a, 0, 10}, Partition{b, 0, 5000}));
  EXPECT_THAT(ReadAll(partitions[0], options).value(), ElementsAre("first file"));
  EXPECT_THAT(ReadAll(partitions[1], options).value(), ElementsAre(std::string(5000, 'b')));
}

// ---- Planning ----

TEST_F(RecordIoTest, PatternMatchingNothingIsNotFound) {
  const std::string pattern = dir_.File("*.parquet");
  EXPECT_THAT(PlanPartitions({pattern}, Options(RecordFormat::kCsv)),
              StatusIs(Code::kNotFound, HasSubstr(pattern)));
  std::filesystem::create_directory(dir_.File("empty_dir"));
  EXPECT_THAT(PlanPartitions({dir_.File("empty_dir")}, Options(RecordFormat::kCsv)),
              StatusIs(Code::kNotFound, HasSubstr("empty_dir")));
}

TEST_F(RecordIoTest, DirectoryExpandsToItsRegularFilesSorted) {
  std::filesystem::create_directory(dir_.File("data"));
  const std::string b = Write("data/b.csv", "b\n");
  const std::string a = Write("data/a.csv", "a\n");
  const std::string c = Write("data/c.csv", "c\n");
  Write("data/_SUCCESS", "");
  Write("data/.a.csv.crc", "junk");
  std::filesystem::create_directory(dir_.File("data/nested"));
  Write("data/nested/d.csv", "d\n");
  ASSERT_OK_AND_ASSIGN(auto partitions,
                       PlanPartitions({dir_.File("data")}, Options(RecordFormat::kCsv)));
  EXPECT_THAT(partitions, ElementsAre(Partition{a, 0, 2}, Partition{b, 0, 2}, Partition{c, 0, 2}));
}

TEST_F(RecordIoTest, PatternOrderIsKeptAndFilesAreFedOnce) {
  const std::string a = Write("a.csv", "a\n");
  const std::string b = Write("b.csv", "b\n");
  const std::string c = Write("c.jsonl", "c\n");
  std::filesystem::create_symlink(a, dir_.File("link_to_a.csv"));
  ASSERT_OK_AND_ASSIGN(auto partitions, PlanPartitions({dir_.File("c.jsonl"), dir_.File("*.csv"),
                                                        dir_.path() + "/./b.csv"},
                                                       Options(RecordFormat::kCsv)));
  EXPECT_THAT(partitions, ElementsAre(Partition{c, 0, 2}, Partition{a, 0, 2}, Partition{b, 0, 2}));
}

TEST_F(RecordIoTest, RelativePatternsGiveAbsolutePathsAndEmptyFilesNoPartition) {
  std::filesystem::create_directory(dir_.File("in"));
  const std::string full = Write("in/full.csv", "x\ny\n");
  Write("in/empty.csv", "");
  ScopedChdir chdir(dir_.path());
  ASSERT_OK_AND_ASSIGN(auto partitions, PlanPartitions({"in/*.csv"}, Options(RecordFormat::kCsv)));
  ASSERT_EQ(partitions.size(), 1u);
  EXPECT_EQ(std::filesystem::canonical(partitions[0].path), std::filesystem::canonical(full));
  EXPECT_EQ(partitions[0].path[0], '/');
  EXPECT_EQ(partitions[0].end, 4u);
}

TEST_F(RecordIoTest, NameIsRelativeToTheCurrentDirectoryWithARangeWhenPartial) {
  std::filesystem::create_directory(dir_.File("data"));
  const std::string real_dir = std::filesystem::canonical(dir_.path()).string();
  const std::string path = real_dir + "/data/a.csv";
  WriteFile(path, "0123456789\n");
  {
    ScopedChdir chdir(real_dir);
    EXPECT_EQ((Partition{path, 0, 11}).Name(), "data/a.csv");
    EXPECT_EQ((Partition{path, 0, 5}).Name(), "data/a.csv[0:5]");
    EXPECT_EQ((Partition{path, 5, 11}).Name(), "data/a.csv[5:11]");
  }
  ScopedChdir chdir(real_dir + "/data");
  EXPECT_EQ((Partition{path, 0, 11}).Name(), "a.csv");
  const std::string elsewhere = Write("other.csv", "z\n");
  const std::string real_elsewhere = std::filesystem::canonical(elsewhere).string();
  EXPECT_EQ((Partition{real_elsewhere, 0, 2}).Name(), real_elsewhere);
}

}  // namespace
}  // namespace drover::feed

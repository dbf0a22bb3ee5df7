#include "feed/record_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "os/unique_fd.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace drover::feed {
namespace {

constexpr uint64_t kTfRecordHeaderBytes = 12;  // uint64 length, uint32 masked CRC of it
constexpr uint64_t kTfRecordFooterBytes = 4;   // uint32 masked CRC of the data
constexpr uint64_t kTfRecordOverheadBytes = kTfRecordHeaderBytes + kTfRecordFooterBytes;
// Reads this big keep syscalls off the profile while staying in L2/L3-sized
// pieces; a record that does not fit grows the buffer up to kMaxRecordBytes.
constexpr size_t kReadChunkBytes = 32 << 20;  // a mapped window
// The planner's newline search and TFRecord header walk read this much at once.
constexpr size_t kScanChunkBytes = 64 << 10;

std::string ErrnoText(int error) {
  return std::error_code(error, std::generic_category()).message();
}

Status ErrnoStatus(int error, const std::string& what) {
  std::string message = what + ": " + ErrnoText(error);
  if (error == ENOENT || error == ENOTDIR) return Status::NotFound(std::move(message));
  return Status::IoError(std::move(message));
}

uint32_t DecodeFixed32(const char* bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

uint64_t DecodeFixed64(const char* bytes) {
  return uint64_t{DecodeFixed32(bytes)} | uint64_t{DecodeFixed32(bytes + 4)} << 32;
}

void PutFixed32(uint32_t value, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

void PutFixed64(uint64_t value, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

// ---- CRC-32C ----

constexpr uint32_t kCrc32cPolynomial = 0x82f63b78;  // Castagnoli, bit-reversed
// The hardware path runs three independent CRC streams over blocks of these
// sizes (the instruction has a latency of 3 and a throughput of 1) and joins
// them with the shift tables below; after Mark Adler's crc32c.c.
constexpr size_t kLongBlockBytes = 8192;
constexpr size_t kShortBlockBytes = 256;

struct Crc32cTables {
  uint32_t slice[8][256];        // slicing-by-8 for the portable path
  uint32_t shift_long[4][256];   // appends kLongBlockBytes zero bytes to a CRC register
  uint32_t shift_short[4][256];  // appends kShortBlockBytes zero bytes
};

uint32_t AppendZeroBytes(uint32_t reg, size_t count, const uint32_t byte_table[256]) {
  for (size_t i = 0; i < count; ++i) reg = (reg >> 8) ^ byte_table[reg & 0xff];
  return reg;
}

// The register update is linear over GF(2), so shifting any register value is
// the XOR of the shifts of its set bits.
void BuildShiftTable(size_t zero_bytes, const uint32_t byte_table[256], uint32_t table[4][256]) {
  uint32_t shifted_bit[32];
  for (int bit = 0; bit < 32; ++bit) {
    shifted_bit[bit] = AppendZeroBytes(uint32_t{1} << bit, zero_bytes, byte_table);
  }
  for (int lane = 0; lane < 4; ++lane) {
    for (uint32_t value = 0; value < 256; ++value) {
      uint32_t result = 0;
      for (int bit = 0; bit < 8; ++bit) {
        if (value & (1u << bit)) result ^= shifted_bit[8 * lane + bit];
      }
      table[lane][value] = result;
    }
  }
}

const Crc32cTables& Tables() {
  static const Crc32cTables* const tables = [] {
    auto* built = new Crc32cTables;
    for (uint32_t value = 0; value < 256; ++value) {
      uint32_t reg = value;
      for (int bit = 0; bit < 8; ++bit) reg = (reg >> 1) ^ (kCrc32cPolynomial & (0u - (reg & 1)));
      built->slice[0][value] = reg;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t value = 0; value < 256; ++value) {
        const uint32_t prev = built->slice[k - 1][value];
        built->slice[k][value] = (prev >> 8) ^ built->slice[0][prev & 0xff];
      }
    }
    BuildShiftTable(kLongBlockBytes, built->slice[0], built->shift_long);
    BuildShiftTable(kShortBlockBytes, built->slice[0], built->shift_short);
    return built;
  }();
  return *tables;
}

uint32_t Shift(const uint32_t table[4][256], uint32_t reg) {
  return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^ table[2][(reg >> 16) & 0xff] ^
         table[3][reg >> 24];
}

uint32_t ExtendPortable(uint32_t reg, const unsigned char* p, size_t size) {
  const Crc32cTables& t = Tables();
  while (size >= 8) {
    const uint32_t low = reg ^ DecodeFixed32(reinterpret_cast<const char*>(p));
    const uint32_t high = DecodeFixed32(reinterpret_cast<const char*>(p + 4));
    reg = t.slice[7][low & 0xff] ^ t.slice[6][(low >> 8) & 0xff] ^ t.slice[5][(low >> 16) & 0xff] ^
          t.slice[4][low >> 24] ^ t.slice[3][high & 0xff] ^ t.slice[2][(high >> 8) & 0xff] ^
          t.slice[1][(high >> 16) & 0xff] ^ t.slice[0][high >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) reg = (reg >> 8) ^ t.slice[0][(reg ^ *p++) & 0xff];
  return reg;
}

#if defined(__x86_64__)
uint64_t Load64(const unsigned char* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  return word;
}

// Three interleaved streams of `block` bytes while at least 3 blocks remain.
__attribute__((target("sse4.2"))) uint64_t ExtendBlocks(uint64_t reg, const unsigned char** data,
                                                        size_t* size, size_t block,
                                                        const uint32_t shift[4][256]) {
  const unsigned char* p = *data;
  size_t left = *size;
  while (left >= 3 * block) {
    uint64_t reg1 = 0;
    uint64_t reg2 = 0;
    for (size_t i = 0; i < block; i += 8) {
      reg = _mm_crc32_u64(reg, Load64(p + i));
      reg1 = _mm_crc32_u64(reg1, Load64(p + block + i));
      reg2 = _mm_crc32_u64(reg2, Load64(p + 2 * block + i));
    }
    reg = Shift(shift, static_cast<uint32_t>(reg)) ^ reg1;
    reg = Shift(shift, static_cast<uint32_t>(reg)) ^ reg2;
    p += 3 * block;
    left -= 3 * block;
  }
  *data = p;
  *size = left;
  return reg;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t reg32, const unsigned char* p,
                                                       size_t size) {
  uint64_t reg = reg32;
  if (size >= 3 * kShortBlockBytes) {
    const Crc32cTables& t = Tables();
    reg = ExtendBlocks(reg, &p, &size, kLongBlockBytes, t.shift_long);
    reg = ExtendBlocks(reg, &p, &size, kShortBlockBytes, t.shift_short);
  }
  while (size >= 8) {
    reg = _mm_crc32_u64(reg, Load64(p));
    p += 8;
    size -= 8;
  }
  uint32_t tail = static_cast<uint32_t>(reg);
  while (size-- > 0) tail = _mm_crc32_u8(tail, *p++);
  return tail;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

// ---- Files ----

Result<os::UniqueFd> OpenForRead(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "cannot open " + path);
  return os::UniqueFd(fd);
}

// Reads up to `size` bytes at `offset`, fewer only at the end of the file.
Result<size_t> ReadFully(int fd, char* out, size_t size, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno,
                         "cannot read " + path + " at offset " + std::to_string(offset + done));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// A window of the file mapped read-only over [start, end): records are read
// in place from the page cache, so the feeder copies each byte once (into the
// queue) instead of twice (pread into a buffer, then into the queue). Asked
// to (WindowWay::kRead, or a WindowPolicy's choice for the window), or on a
// file system that maps nothing (mmap fails: ENODEV), the window is read
// into a buffer of its own instead. data() is the file at file_offset();
// available() bytes of it are mapped or read.
class RangeBuffer {
 public:
  RangeBuffer(os::UniqueFd fd, std::string path, uint64_t start, uint64_t end, size_t window,
              WindowWay way, WindowPolicy* policy)
      : fd_(std::move(fd)),
        path_(std::move(path)),
        offset_(start),
        end_(end),
        window_(std::max<size_t>(window, kMinWindowBytes)),
        way_(way),
        policy_(policy) {}
  ~RangeBuffer() {
    Unmap();
    if (window_open_) policy_->EndWindow(offset_ - window_begin_);
  }
  RangeBuffer(const RangeBuffer&) = delete;
  RangeBuffer& operator=(const RangeBuffer&) = delete;

  const char* data() const { return map_ + (offset_ - map_offset_); }
  size_t available() const { return static_cast<size_t>(mapped_end_ - offset_); }
  void Consume(size_t bytes) { offset_ += bytes; }
  uint64_t file_offset() const { return offset_; }
  // Bytes from data() to the end of the range, mapped or not.
  uint64_t remaining() const { return end_ - offset_; }
  bool read_all() const { return mapped_end_ == end_; }

  // Reads `size` bytes at file_offset() into `out` with pread(2) and moves
  // past them; fewer only at the file's end. What was mapped is dropped (and
  // read again, if at all, by the next Fill).
  Result<size_t> ReadInto(char* out, size_t size) {
    Unmap();
    DROVER_ASSIGN_OR_RETURN(size_t read, ReadFully(fd_.get(), out, size, offset_, path_));
    offset_ += read;
    map_offset_ = mapped_end_ = offset_;
    return read;
  }

  // The error for a file that ends before the range does.
  Status Truncated() const {
    struct stat info {};
    if (::fstat(fd_.get(), &info) != 0) return ErrnoStatus(errno, "cannot stat " + path_);
    return TruncatedError(info.st_size);
  }

  // Makes at least `want` bytes available, or all of remaining() if less.
  Status Fill(size_t want) {
    want = static_cast<size_t>(std::min<uint64_t>(want, remaining()));
    if (available() >= want) return Status::Ok();
    if (policy_ != nullptr) NextWindow();
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t page_start = offset_ / page * page;
    uint64_t length = std::max<uint64_t>(window_, offset_ - page_start + want);
    // A record longer than the window: grow geometrically, not byte by byte.
    if (mapped_ && page_start == map_offset_) length = std::max(length, 2 * map_size_);
    length = std::min(length, end_ - page_start);
    struct stat info {};
    if (::fstat(fd_.get(), &info) != 0) return ErrnoStatus(errno, "cannot stat " + path_);
    if (static_cast<uint64_t>(info.st_size) < page_start + length) {
      return TruncatedError(info.st_size);
    }
    if (way_ == WindowWay::kRead || maps_nothing_) return ReadWindow(want);
    Unmap();
    void* map = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd_.get(),
                       static_cast<off_t>(page_start));
    if (map == MAP_FAILED) {
      maps_nothing_ = true;
      return ReadWindow(want);
    }
    ::madvise(map, length, MADV_SEQUENTIAL);
    map_ = static_cast<const char*>(map);
    mapped_ = true;
    map_offset_ = page_start;
    map_size_ = length;
    mapped_end_ = page_start + length;
    return Status::Ok();
  }

 private:
  static constexpr size_t kMinWindowBytes = 1 << 20;
  static constexpr size_t kReadWindowBytes = 4 << 20;

  Status TruncatedError(off_t file_size) const {
    return Status::InvalidArgument(path_ + " ends at offset " + std::to_string(file_size) +
                                   ", before the partition end " + std::to_string(end_) +
                                   " (was it truncated after planning?)");
  }

  // Ends the window before and asks policy_ the way of the next. A mapped
  // window is unmapped first, what is left of it carried into read_buffer_,
  // so that unmapping is charged to it, not to the next; but for a record
  // longer than a read window, which stays mapped to grow.
  void NextWindow() {
    if (mapped_ && available() <= kReadWindowBytes) {
      const size_t kept = available();
      if (read_buffer_.size() < kept) read_buffer_.resize(kReadWindowBytes);
      std::memcpy(read_buffer_.data(), data(), kept);
      Unmap();
      map_ = read_buffer_.data();
      mapped_end_ = offset_ + kept;
    }
    if (window_open_) policy_->EndWindow(offset_ - window_begin_);
    way_ = policy_->BeginWindow();
    window_open_ = true;
    window_begin_ = offset_;
  }

  // Reads on from file_offset() into read_buffer_, keeping what was read
  // (or mapped) before and not consumed: kReadWindowBytes (reads that large
  // run at the file-read limit; a mapping needs a larger window to amortize
  // its faults), `want` if more, and twice what is kept for a record longer
  // than that.
  Status ReadWindow(size_t want) {
    const size_t kept = available();
    uint64_t wanted = std::max<uint64_t>(kReadWindowBytes, want);
    if (want > kReadWindowBytes) wanted = std::max<uint64_t>(wanted, 2 * uint64_t{kept});
    const size_t size = static_cast<size_t>(std::min(wanted, remaining()));
    if (read_buffer_.size() < size) {
      std::vector<char> larger(size);
      if (kept > 0) std::memcpy(larger.data(), data(), kept);
      read_buffer_.swap(larger);
    } else if (kept > 0) {
      std::memmove(read_buffer_.data(), data(), kept);
    }
    Unmap();  // a mapped window's rest is in read_buffer_ now
    map_ = read_buffer_.data();
    map_offset_ = offset_;
    mapped_end_ = offset_ + kept;
    DROVER_ASSIGN_OR_RETURN(size_t read, ReadFully(fd_.get(), read_buffer_.data() + kept,
                                                   size - kept, mapped_end_, path_));
    mapped_end_ += read;
    if (read < size - kept) return Truncated();
    return Status::Ok();
  }

  void Unmap() {
    if (mapped_) ::munmap(const_cast<char*>(map_), map_size_);
    mapped_ = false;
    map_ = nullptr;
    map_size_ = 0;
    map_offset_ = mapped_end_ = offset_;
  }

  os::UniqueFd fd_;
  std::string path_;
  uint64_t offset_;  // the file offset of data()
  uint64_t end_;
  size_t window_;
  WindowWay way_;                  // the window's, as asked or as policy_ chose it
  WindowPolicy* const policy_;     // may be null
  bool maps_nothing_ = false;      // the file system would not map the file
  bool window_open_ = false;       // policy_ was asked for a window not yet ended
  uint64_t window_begin_ = 0;      // offset_ when it was
  std::vector<char> read_buffer_;  // the window, when read
  const char* map_ = nullptr;      // the mapping, or read_buffer_.data()
  bool mapped_ = false;            // map_ is a mapping, which Unmap frees
  uint64_t map_offset_ = offset_;  // the file offset of map_[0], page-aligned when mapped
  uint64_t map_size_ = 0;
  uint64_t mapped_end_ = offset_;
};

// The shared half of the readers. Format::ReadRecord(record) returns true
// with *record set, consumed and next_offset_ advanced; false at the end, or
// after Fail() on an error. Called statically, so the per-record path has one
// virtual call (Next) and no Status unless something is wrong.
template <typename Format>
class BufferedRecordReader : public RecordReader {
 public:
  BufferedRecordReader(os::UniqueFd fd, std::string path, uint64_t start, uint64_t end,
                       size_t window, WindowWay way = WindowWay::kMap,
                       WindowPolicy* policy = nullptr)
      : path_(path),
        start_(start),
        buffer_(std::move(fd), std::move(path), start, end, window, way, policy),
        next_offset_(start) {}

  uint64_t next_offset() const final { return next_offset_; }

  Result<bool> Next(std::string_view* record) final {
    if (!error_.ok()) return error_;
    if (static_cast<Format*>(this)->ReadRecord(record)) {
      ++records_;
      return true;
    }
    if (!error_.ok()) return error_;
    return false;
  }

 protected:
  // Makes `want` bytes available at buffer_.data() (fewer at the range end).
  bool Ensure(size_t want) {
    if (buffer_.available() >= want) return true;
    return Check(buffer_.Fill(want));
  }

  bool Check(Status status) {
    if (status.ok()) return true;
    error_ = std::move(status);
    return false;
  }

  bool Fail(std::string_view what) {
    error_ = Status::InvalidArgument(
        path_ + ": record " + std::to_string(records_) +
        (start_ == 0 ? "" : " after offset " + std::to_string(start_)) + " at offset " +
        std::to_string(next_offset_) + ": " + std::string(what));
    return false;
  }

  const std::string path_;
  const uint64_t start_;
  RangeBuffer buffer_;
  uint64_t next_offset_;
  uint64_t records_ = 0;  // returned so far
  Status error_;
};

class LineReader : public BufferedRecordReader<LineReader> {
 public:
  using BufferedRecordReader::BufferedRecordReader;

  bool ReadRecord(std::string_view* record) {
    for (;;) {
      const char* line = buffer_.data();
      const size_t available = buffer_.available();
      const void* newline =
          scanned_ < available ? std::memchr(line + scanned_, '\n', available - scanned_) : nullptr;
      size_t line_bytes;
      size_t consumed;
      if (newline != nullptr) {
        line_bytes = static_cast<size_t>(static_cast<const char*>(newline) - line);
        consumed = line_bytes + 1;
        if (line_bytes > 0 && line[line_bytes - 1] == '\r') --line_bytes;
      } else if (buffer_.read_all()) {
        if (available == 0) return false;
        line_bytes = consumed = available;  // the last line has no '\n'
      } else {
        scanned_ = available;
        if (available > kMaxRecordBytes) {
          return Fail("a line longer than " + std::to_string(kMaxRecordBytes) + " bytes");
        }
        if (!Ensure(available + 1)) return false;
        continue;
      }
      scanned_ = 0;
      buffer_.Consume(consumed);
      next_offset_ += consumed;
      if (line_bytes == 0) continue;
      if (line_bytes > kMaxRecordBytes) {
        return Fail("a line longer than " + std::to_string(kMaxRecordBytes) + " bytes");
      }
      *record = std::string_view(line, line_bytes);
      return true;
    }
  }

 private:
  size_t scanned_ = 0;  // bytes from data() known to hold no '\n'
};

std::string Hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

class TfRecordReader : public BufferedRecordReader<TfRecordReader> {
 public:
  using BufferedRecordReader::BufferedRecordReader;

  bool ReadRecord(std::string_view* record) {
    if (!Ensure(kTfRecordHeaderBytes)) return false;
    if (buffer_.available() < kTfRecordHeaderBytes) {
      if (buffer_.available() == 0) return false;
      return Fail("truncated header: " + std::to_string(buffer_.available()) +
                  " bytes left before the partition end, a header takes 12");
    }
    const char* header = buffer_.data();
    const uint64_t length = DecodeFixed64(header);
    const uint32_t stored_length_crc = DecodeFixed32(header + 8);
    const uint32_t length_crc = MaskCrc(Crc32c(header, 8));
    if (stored_length_crc != length_crc) {
      return Fail("bad length CRC (stored " + Hex(stored_length_crc) + ", computed " +
                  Hex(length_crc) + "); not a TFRecord file, or corrupt");
    }
    if (length > kMaxRecordBytes) {
      return Fail("length " + std::to_string(length) + " is over the limit of " +
                  std::to_string(kMaxRecordBytes) + " bytes");
    }
    const uint64_t total = length + kTfRecordOverheadBytes;
    if (total > buffer_.remaining()) {
      return Fail("truncated: " + std::to_string(length) + " bytes of data need " +
                  std::to_string(total) + " bytes with the framing, but only " +
                  std::to_string(buffer_.remaining()) + " are left before the partition end");
    }
    if (!Ensure(static_cast<size_t>(total))) return false;
    const char* data = buffer_.data() + kTfRecordHeaderBytes;
    const uint32_t stored_data_crc = DecodeFixed32(data + length);
    const uint32_t data_crc = MaskCrc(Crc32c(data, static_cast<size_t>(length)));
    if (stored_data_crc != data_crc) {
      return Fail("bad data CRC over " + std::to_string(length) + " bytes (stored " +
                  Hex(stored_data_crc) + ", computed " + Hex(data_crc) + ")");
    }
    buffer_.Consume(static_cast<size_t>(total));
    next_offset_ += total;
    *record = std::string_view(data, static_cast<size_t>(length));
    return true;
  }
};

class FixedSizeReader : public BufferedRecordReader<FixedSizeReader> {
 public:
  FixedSizeReader(os::UniqueFd fd, std::string path, uint64_t start, uint64_t end, size_t window,
                  size_t record_bytes, WindowWay way = WindowWay::kMap,
                  WindowPolicy* policy = nullptr)
      : BufferedRecordReader(std::move(fd), std::move(path), start, end, window, way, policy),
        record_bytes_(record_bytes) {}

  bool ReadRecord(std::string_view* record) {
    if (buffer_.remaining() == 0) return false;
    // Open checked that the range is whole records, so remaining() >= record_bytes_.
    if (!Ensure(record_bytes_)) return false;
    *record = std::string_view(buffer_.data(), record_bytes_);
    buffer_.Consume(record_bytes_);
    next_offset_ += record_bytes_;
    return true;
  }

  Result<size_t> NextRun(size_t max_records, std::string_view* run) override {
    if (!error_.ok()) return error_;
    if (max_records == 0 || buffer_.remaining() == 0) return size_t{0};
    if (!Ensure(record_bytes_)) return error_;
    const size_t records = std::min(max_records, buffer_.available() / record_bytes_);
    const size_t bytes = records * record_bytes_;
    *run = std::string_view(buffer_.data(), bytes);
    buffer_.Consume(bytes);
    Counted(records);
    return records;
  }

  Result<size_t> ReadRunInto(size_t max_records, char* out) override {
    if (!error_.ok()) return error_;
    if (max_records == 0 || buffer_.remaining() == 0) return size_t{0};
    const size_t records =
        static_cast<size_t>(std::min<uint64_t>(max_records, buffer_.remaining() / record_bytes_));
    const size_t bytes = records * record_bytes_;
    Result<size_t> read = buffer_.ReadInto(out, bytes);
    if (!read.ok()) {
      error_ = read.status();
      return error_;
    }
    // A partial record is not returned: the feeder publishes whole ones.
    if (*read < bytes) {
      Check(buffer_.Truncated());
      return error_;
    }
    Counted(records);
    return records;
  }

 private:
  void Counted(size_t records) {
    next_offset_ += records * record_bytes_;
    records_ += records;
  }

  const size_t record_bytes_;
};

// ---- Planning ----

struct InputFile {
  std::string path;  // absolute
  uint64_t size = 0;
};

std::string CurrentDirectory() {
  std::string cwd(PATH_MAX, '\0');
  while (::getcwd(cwd.data(), cwd.size()) == nullptr) {
    if (errno != ERANGE) return "";
    cwd.resize(cwd.size() * 2);
  }
  cwd.resize(std::strlen(cwd.c_str()));
  return cwd;
}

std::string Absolute(const std::string& path, const std::string& cwd) {
  std::filesystem::path absolute = path;
  if (!absolute.is_absolute()) absolute = std::filesystem::path(cwd) / absolute;
  std::string normal = absolute.lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

class Glob {
 public:
  Glob() { std::memset(&glob_, 0, sizeof(glob_)); }
  ~Glob() { ::globfree(&glob_); }
  Glob(const Glob&) = delete;
  Glob& operator=(const Glob&) = delete;
  glob_t* get() { return &glob_; }

 private:
  glob_t glob_;
};

// Appends the regular files `pattern` names to *files, skipping those in
// *seen (device, inode): a file reached by two patterns, or by a link, is fed
// once.
Status ExpandPattern(const std::string& pattern, const std::string& cwd,
                     std::set<std::pair<dev_t, ino_t>>* seen, std::vector<InputFile>* files) {
  Glob matches;
  // glob(3) reads the environment and locale: planning runs once, before
  // threads that could change them.
  const int glob_result =
      ::glob(pattern.c_str(), 0, nullptr, matches.get());  // NOLINT(concurrency-mt-unsafe)
  if (glob_result == GLOB_NOMATCH) {
    return Status::NotFound("input pattern '" + pattern + "' matches no file");
  }
  if (glob_result != 0) {
    return Status::IoError("cannot expand input pattern '" + pattern + "' (glob error " +
                           std::to_string(glob_result) + ")");
  }
  size_t found = 0;
  auto add = [&](const std::string& path, const struct stat& info) {
    ++found;
    if (!seen->emplace(info.st_dev, info.st_ino).second) return;
    files->push_back(InputFile{path, static_cast<uint64_t>(info.st_size)});
  };
  for (size_t i = 0; i < matches.get()->gl_pathc; ++i) {
    const std::string path = Absolute(matches.get()->gl_pathv[i], cwd);
    struct stat info;
    if (::stat(path.c_str(), &info) != 0) continue;  // e.g. a dangling link
    if (S_ISREG(info.st_mode)) {
      add(path, info);
      continue;
    }
    if (!S_ISDIR(info.st_mode)) continue;
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus(errno, "cannot list input directory " + path);
    std::vector<std::string> names;
    // readdir is safe on a DIR no other thread sees.
    while (const struct dirent* entry = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
      if (entry->d_name[0] == '.' || entry->d_name[0] == '_') continue;
      names.emplace_back(entry->d_name);
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    const std::string prefix = path == "/" ? path : path + "/";
    for (const std::string& name : names) {
      const std::string file = prefix + name;
      if (::stat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode)) add(file, info);
    }
  }
  if (found == 0) {
    return Status::NotFound("input pattern '" + pattern + "' matches no regular file");
  }
  return Status::Ok();
}

// The offset just past the first '\n' at or after `from`, or `size`.
Result<uint64_t> EndOfLine(int fd, const std::string& path, uint64_t from, uint64_t size) {
  std::unique_ptr<char[]> chunk(new char[kScanChunkBytes]);
  while (from < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kScanChunkBytes, size - from));
    DROVER_ASSIGN_OR_RETURN(size_t got, ReadFully(fd, chunk.get(), want, from, path));
    if (got == 0) break;  // the file shrank; the reader will say so
    if (const void* newline = std::memchr(chunk.get(), '\n', got)) {
      return from + static_cast<uint64_t>(static_cast<const char*>(newline) - chunk.get()) + 1;
    }
    from += got;
  }
  return size;
}

// Reads TFRecord headers, a window of them at a time while records are small,
// one 12-byte pread each while they are big.
class TfRecordHeaderWalker {
 public:
  TfRecordHeaderWalker(int fd, const std::string& path, uint64_t size)
      : fd_(fd), path_(path), size_(size), window_(new char[kScanChunkBytes]) {}

  // The offset just after the record at `offset`.
  Result<uint64_t> SkipRecord(uint64_t offset) {
    if (size_ - offset < kTfRecordOverheadBytes) {
      return Error(offset, "truncated record: " + std::to_string(size_ - offset) +
                               " bytes left in the file, a record takes at least 16");
    }
    if (offset < window_offset_ || offset + kTfRecordHeaderBytes > window_offset_ + window_bytes_) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(
          last_was_small_ ? kScanChunkBytes : kTfRecordHeaderBytes, size_ - offset));
      DROVER_ASSIGN_OR_RETURN(window_bytes_, ReadFully(fd_, window_.get(), want, offset, path_));
      window_offset_ = offset;
      if (window_bytes_ < kTfRecordHeaderBytes) {
        return Error(offset, "the file ended while reading the header (did it shrink?)");
      }
    }
    const char* header = window_.get() + (offset - window_offset_);
    const uint64_t length = DecodeFixed64(header);
    if (DecodeFixed32(header + 8) != MaskCrc(Crc32c(header, 8))) {
      return Error(offset, "bad length CRC; not a TFRecord file, or corrupt");
    }
    if (length > kMaxRecordBytes || length > size_ - offset - kTfRecordOverheadBytes) {
      return Error(offset, "length " + std::to_string(length) + " runs past the end of the file (" +
                               std::to_string(size_) + " bytes) or over the record limit");
    }
    last_was_small_ = length + kTfRecordOverheadBytes <= kScanChunkBytes / 4;
    return offset + length + kTfRecordOverheadBytes;
  }

 private:
  Status Error(uint64_t offset, const std::string& what) const {
    return Status::InvalidArgument(path_ + ": TFRecord at offset " + std::to_string(offset) + ": " +
                                   what);
  }

  int fd_;
  const std::string& path_;
  uint64_t size_;
  std::unique_ptr<char[]> window_;
  uint64_t window_offset_ = 0;
  size_t window_bytes_ = 0;
  bool last_was_small_ = true;
};

// Every partition ends at the first record boundary at or after
// begin + split_bytes, so a file of equal records with split_bytes a multiple
// of their size splits evenly; the last one takes what is left.
Status SplitFile(const InputFile& file, const PlanOptions& options,
                 std::vector<Partition>* partitions) {
  if (file.size == 0) return Status::Ok();
  const uint64_t split = options.split_bytes;
  auto add = [&](uint64_t begin, uint64_t end) {
    partitions->push_back(Partition{file.path, begin, end});
  };
  if (options.format == RecordFormat::kRaw && options.record_bytes > 0 &&
      file.size % options.record_bytes != 0) {
    return Status::InvalidArgument(file.path + ": size " + std::to_string(file.size) +
                                   " is not a multiple of record_bytes " +
                                   std::to_string(options.record_bytes));
  }
  const bool whole_file_records = options.format == RecordFormat::kRaw && options.record_bytes == 0;
  if (split == 0 || file.size <= split || whole_file_records) {
    add(0, file.size);
    return Status::Ok();
  }
  if (options.format == RecordFormat::kRaw) {
    const uint64_t records_per_partition = (split - 1) / options.record_bytes + 1;
    const uint64_t step = records_per_partition * options.record_bytes;
    for (uint64_t begin = 0; begin < file.size; begin += std::min(step, file.size - begin)) {
      add(begin, begin + std::min(step, file.size - begin));
    }
    return Status::Ok();
  }

  DROVER_ASSIGN_OR_RETURN(os::UniqueFd fd, OpenForRead(file.path));
  uint64_t begin = 0;
  if (options.format == RecordFormat::kTfRecord) {
    TfRecordHeaderWalker walker(fd.get(), file.path, file.size);
    uint64_t offset = 0;
    while (file.size - begin > split) {
      while (offset - begin < split) {
        DROVER_ASSIGN_OR_RETURN(offset, walker.SkipRecord(offset));
      }
      if (offset == file.size) break;
      add(begin, offset);
      begin = offset;
    }
  } else {
    while (file.size - begin > split) {
      DROVER_ASSIGN_OR_RETURN(uint64_t end,
                              EndOfLine(fd.get(), file.path, begin + split - 1, file.size));
      if (end == file.size) break;
      add(begin, end);
      begin = end;
    }
  }
  add(begin, file.size);
  return Status::Ok();
}

}  // namespace

Result<RecordFormat> ParseRecordFormat(std::string_view name) {
  if (name == "csv") return RecordFormat::kCsv;
  if (name == "jsonl") return RecordFormat::kJsonl;
  if (name == "tfrecord") return RecordFormat::kTfRecord;
  if (name == "raw") return RecordFormat::kRaw;
  if (name == "pickle") return RecordFormat::kPickle;
  return Status::InvalidArgument("unknown record format '" + std::string(name) +
                                 "': expected csv, jsonl, tfrecord, raw or pickle");
}

std::string_view RecordFormatName(RecordFormat format) {
  switch (format) {
    case RecordFormat::kCsv:
      return "csv";
    case RecordFormat::kJsonl:
      return "jsonl";
    case RecordFormat::kTfRecord:
      return "tfrecord";
    case RecordFormat::kRaw:
      return "raw";
    case RecordFormat::kPickle:
      return "pickle";
  }
  return "unknown";
}

std::string Partition::Name() const {
  std::string name = path;
  const std::string cwd = CurrentDirectory();
  if (!cwd.empty()) {
    const std::string prefix = cwd == "/" ? cwd : cwd + "/";
    if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0) {
      name = path.substr(prefix.size());
    }
  }
  struct stat info;
  const bool whole_file =
      begin == 0 && ::stat(path.c_str(), &info) == 0 && static_cast<uint64_t>(info.st_size) == end;
  if (!whole_file) name += "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
  return name;
}

Result<std::vector<Partition>> PlanPartitions(const std::vector<std::string>& patterns,
                                              const PlanOptions& options) {
  if (options.format == RecordFormat::kPickle) return Status::InvalidArgument(kPickleFromFiles);
  if (options.format == RecordFormat::kRaw && options.record_bytes > kMaxRecordBytes) {
    return Status::InvalidArgument("record_bytes " + std::to_string(options.record_bytes) +
                                   " is over the limit of " + std::to_string(kMaxRecordBytes));
  }
  const std::string cwd = CurrentDirectory();
  if (cwd.empty()) return ErrnoStatus(errno, "cannot get the current directory");
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<InputFile> files;
  for (const std::string& pattern : patterns) {
    DROVER_RETURN_IF_ERROR(ExpandPattern(pattern, cwd, &seen, &files));
  }
  std::vector<Partition> partitions;
  for (const InputFile& file : files) {
    DROVER_RETURN_IF_ERROR(SplitFile(file, options, &partitions));
  }
  return partitions;
}

namespace {

Result<std::unique_ptr<RecordReader>> OpenReader(const Partition& partition,
                                                 const PlanOptions& options, uint64_t start_offset,
                                                 WindowWay windows, WindowPolicy* policy) {
  if (options.format == RecordFormat::kPickle) return Status::InvalidArgument(kPickleFromFiles);
  const std::string& path = partition.path;
  if (partition.begin > partition.end || start_offset < partition.begin ||
      start_offset > partition.end) {
    return Status::InvalidArgument(path + ": start offset " + std::to_string(start_offset) +
                                   " is outside the partition [" + std::to_string(partition.begin) +
                                   ":" + std::to_string(partition.end) + "]");
  }
  const uint64_t range = partition.end - start_offset;
  const bool raw = options.format == RecordFormat::kRaw;
  // Whole-file raw records are one record of the partition's size.
  const uint64_t record_bytes =
      raw ? (options.record_bytes > 0 ? options.record_bytes : partition.end - partition.begin) : 0;
  if (raw && record_bytes > kMaxRecordBytes) {
    return Status::InvalidArgument(path + ": raw records of " + std::to_string(record_bytes) +
                                   " bytes are over the limit of " +
                                   std::to_string(kMaxRecordBytes));
  }
  if (raw && record_bytes > 0 &&
      ((start_offset - partition.begin) % record_bytes != 0 || range % record_bytes != 0)) {
    return Status::InvalidArgument(
        path + ": [" + std::to_string(start_offset) + ":" + std::to_string(partition.end) +
        "] is not a whole number of raw records of " + std::to_string(record_bytes) + " bytes");
  }

  DROVER_ASSIGN_OR_RETURN(os::UniqueFd fd, OpenForRead(path));
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) return ErrnoStatus(errno, "cannot stat " + path);
  const auto file_size = static_cast<uint64_t>(info.st_size);
  if (S_ISREG(info.st_mode) && partition.end > file_size) {
    return Status::InvalidArgument(
        path + ": the partition ends at " + std::to_string(partition.end) + " but the file has " +
        std::to_string(file_size) + " bytes (was it truncated after planning?)");
  }
  if (raw && options.record_bytes > 0 && S_ISREG(info.st_mode) &&
      file_size % options.record_bytes != 0) {
    return Status::InvalidArgument(path + ": size " + std::to_string(file_size) +
                                   " is not a multiple of record_bytes " +
                                   std::to_string(options.record_bytes));
  }
  if (range > 0) {
    ::posix_fadvise(fd.get(), static_cast<off_t>(start_offset), static_cast<off_t>(range),
                    POSIX_FADV_SEQUENTIAL);
  }

  // The mapped window; a record crossing its end is mapped again whole.
  const size_t window = static_cast<size_t>(std::min<uint64_t>(kReadChunkBytes, range));
  std::unique_ptr<RecordReader> reader;
  switch (options.format) {
    case RecordFormat::kCsv:
    case RecordFormat::kJsonl:
      reader = std::make_unique<LineReader>(std::move(fd), path, start_offset, partition.end,
                                            window, windows, policy);
      break;
    case RecordFormat::kTfRecord:
      reader = std::make_unique<TfRecordReader>(std::move(fd), path, start_offset, partition.end,
                                                window, windows, policy);
      break;
    case RecordFormat::kRaw: {
      // Whole files are taken in as the windows of the parsed formats are;
      // fixed-size records have ways of their own (Ingest).
      const bool whole_files = options.record_bytes == 0;
      reader = std::make_unique<FixedSizeReader>(std::move(fd), path, start_offset, partition.end,
                                                 window, static_cast<size_t>(record_bytes),
                                                 whole_files ? windows : WindowWay::kMap,
                                                 whole_files ? policy : nullptr);
      break;
    }
    case RecordFormat::kPickle:
      return Status::InvalidArgument(kPickleFromFiles);
  }
  return reader;
}

}  // namespace

Result<std::unique_ptr<RecordReader>> RecordReader::Open(const Partition& partition,
                                                         const PlanOptions& options,
                                                         uint64_t start_offset, WindowWay windows) {
  return OpenReader(partition, options, start_offset, windows, nullptr);
}

Result<std::unique_ptr<RecordReader>> RecordReader::Open(const Partition& partition,
                                                         const PlanOptions& options,
                                                         uint64_t start_offset,
                                                         WindowPolicy& policy) {
  return OpenReader(partition, options, start_offset, WindowWay::kMap, &policy);
}

Result<size_t> RecordReader::ReadRunInto(size_t, char*) {
  return Status::FailedPrecondition("ReadRunInto reads fixed-length raw records only");
}

Result<size_t> RecordReader::NextRun(size_t max_records, std::string_view* run) {
  if (max_records == 0) return size_t{0};
  DROVER_ASSIGN_OR_RETURN(bool more, Next(run));
  return more ? size_t{1} : size_t{0};
}

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (HasSse42()) return ~ExtendSse42(~crc, bytes, size);
#endif
  return ~ExtendPortable(~crc, bytes, size);
}

namespace internal {
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc) {
  return ~ExtendPortable(~crc, static_cast<const unsigned char*>(data), size);
}
}  // namespace internal

uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void AppendTfRecord(std::string_view data, std::string* out) {
  out->reserve(out->size() + data.size() + kTfRecordOverheadBytes);
  std::string length;
  PutFixed64(data.size(), &length);
  out->append(length);
  PutFixed32(MaskCrc(Crc32c(length.data(), length.size())), out);
  out->append(data);
  PutFixed32(MaskCrc(Crc32c(data.data(), data.size())), out);
}

}  // namespace drover::feed

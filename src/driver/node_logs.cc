#include "driver/node_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "os/unique_fd.h"

namespace drover {
namespace {

namespace fs = std::filesystem;

constexpr size_t kReadBytes = 64 * 1024;
constexpr std::string_view kMarkerStart = "=== drover run: restart ";
constexpr std::string_view kMarkerEnd = " ===";
constexpr std::string_view kUnformed = "executor";

std::optional<int> Index(std::string_view digits) {
  int value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return value;
}

// Where a job's nodes come in ClusterTemplate::Slot's order.
int JobRank(const std::string& job) {
  if (job == "ps") return 0;
  if (job == "chief" || job == "master") return 1;
  if (job == "evaluator") return 2;
  if (job == "worker") return 3;
  if (job == kUnformed) return 5;
  return 4;
}

// "worker-1" -> {"worker", 1}; splits at the last '-' or ':'.
std::optional<std::pair<std::string, int>> JobAndIndex(std::string_view name) {
  const size_t cut = name.find_last_of("-: ");
  if (cut == std::string_view::npos || cut == 0) return std::nullopt;
  std::optional<int> index = Index(name.substr(cut + 1));
  if (!index) return std::nullopt;
  return std::pair<std::string, int>(std::string(name.substr(0, cut)), *index);
}

std::string TaskOf(const std::string& job, int index) {
  return job == kUnformed ? "executor " + std::to_string(index) : job + ":" + std::to_string(index);
}

Status ReadError(const std::string& path) {
  return Status::IoError("cannot read " + path + ": " + std::strerror(errno));
}

}  // namespace

std::string RestartMarker(int round) {
  return std::string(kMarkerStart) + std::to_string(round) + std::string(kMarkerEnd);
}

bool IsRestartMarker(std::string_view line) {
  if (line.size() <= kMarkerStart.size() + kMarkerEnd.size() || !line.starts_with(kMarkerStart) ||
      !line.ends_with(kMarkerEnd)) {
    return false;
  }
  line.remove_prefix(kMarkerStart.size());
  line.remove_suffix(kMarkerEnd.size());
  return Index(line).has_value();
}

std::vector<NodeLogFile> ListNodeLogs(const std::string& dir) {
  struct Found {
    int rank;
    std::string job;
    int index;
    NodeLogFile file;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".log") || !entry.is_regular_file(ec)) continue;
    std::string_view stem(name.data(), name.size() - 4);
    if (stem.find(':') != std::string_view::npos || stem.find(' ') != std::string_view::npos) {
      continue;
    }
    auto job_index = JobAndIndex(stem);
    if (!job_index) continue;  // drover.log, the driver's own
    auto& [job, index] = *job_index;
    found.push_back({JobRank(job), job, index, {TaskOf(job, index), entry.path().string()}});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.rank, a.job, a.index) < std::tie(b.rank, b.job, b.index);
  });
  std::vector<NodeLogFile> files;
  for (Found& f : found) files.push_back(std::move(f.file));
  return files;
}

std::optional<std::string> ParseTaskName(const std::string& text) {
  auto job_index = JobAndIndex(text);
  if (!job_index || job_index->first.find_first_of(":/ ") != std::string::npos) {
    return std::nullopt;
  }
  return TaskOf(job_index->first, job_index->second);
}

std::string NodeLogPath(const std::string& dir, const std::string& task) {
  auto job_index = JobAndIndex(task);
  if (!job_index) return (fs::path(dir) / (task + ".log")).string();
  return (fs::path(dir) / (job_index->first + "-" + std::to_string(job_index->second) + ".log"))
      .string();
}

Result<uint64_t> LastLinesOffset(const std::string& path, size_t count) {
  os::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ReadError(path);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return ReadError(path);
  uint64_t end = static_cast<uint64_t>(info.st_size);
  if (count == 0) return end;
  // Going back from the end, the newline of the last line is not a line
  // start; the count-th newline before it is the end of the line before
  // the last `count`.
  char last = 0;
  if (end > 0 && ::pread(fd.get(), &last, 1, static_cast<off_t>(end - 1)) != 1) {
    return ReadError(path);
  }
  uint64_t position = last == '\n' ? end - 1 : end;
  size_t newlines = 0;
  char buffer[kReadBytes];
  while (position > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(position, sizeof(buffer)));
    const uint64_t from = position - n;
    if (::pread(fd.get(), buffer, n, static_cast<off_t>(from)) != static_cast<ssize_t>(n)) {
      return ReadError(path);
    }
    for (size_t i = n; i > 0; --i) {
      if (buffer[i - 1] == '\n' && ++newlines == count) return from + i;
    }
    position = from;
  }
  return uint64_t{0};
}

Result<bool> LogFollower::Read(const std::function<void(std::string_view)>& line, bool final) {
  os::UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid() && errno == ENOENT) return false;
  if (!fd.valid()) return ReadError(path_);
  bool any = false;
  char buffer[kReadBytes];
  for (;;) {
    ssize_t n = ::pread(fd.get(), buffer, sizeof(buffer), static_cast<off_t>(offset_));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ReadError(path_);
    if (n == 0) break;
    any = true;
    offset_ += static_cast<uint64_t>(n);
    std::string_view data(buffer, static_cast<size_t>(n));
    for (size_t newline; (newline = data.find('\n')) != std::string_view::npos;) {
      if (partial_.empty()) {
        line(data.substr(0, newline));
      } else {
        partial_.append(data.substr(0, newline));
        line(partial_);
        partial_.clear();
      }
      data.remove_prefix(newline + 1);
    }
    partial_.append(data);
  }
  if (final && !partial_.empty()) {
    line(partial_);
    partial_.clear();
  }
  return any;
}

}  // namespace drover

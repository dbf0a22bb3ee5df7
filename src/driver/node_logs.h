// A run's per-node log files as `drover logs` reads them (docs/status.md,
// "Logs"): <log-dir>/<job>-<index>.log, or executor-<id>.log for a node
// that never learnt its role, each holding every line of the node's output
// (docs/run.md) and, from a restart on, a RestartMarker line per round.
// Which nodes a directory holds and in which order, the task a command line
// names, where a file's last lines start, and a reader that hands out each
// complete line once as a file grows. Files only; a LogFollower is a plain
// value, not thread-safe.

#ifndef DROVER_DRIVER_NODE_LOGS_H_
#define DROVER_DRIVER_NODE_LOGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"

namespace drover {

// The line the driver writes into a node's log where round `round` (> 0) starts.
std::string RestartMarker(int round);
bool IsRestartMarker(std::string_view line);

struct NodeLogFile {
  std::string task;  // "worker:1", or "executor 3": as drover run tags the node's lines
  std::string path;
};

// The node logs in `dir`, in the order drover hands out roles (ps, chief or
// master, evaluator, workers; by index), other jobs by name, and last the
// nodes that never formed, by executor id.
std::vector<NodeLogFile> ListNodeLogs(const std::string& dir);

// The task a TASK argument names: "worker:1" or "worker-1" -> "worker:1";
// "executor:3", "executor-3" or "executor 3" -> "executor 3"; nullopt for
// anything else.
std::optional<std::string> ParseTaskName(const std::string& text);

// The log file of `task` ("worker:1", "executor 3") in `dir`.
std::string NodeLogPath(const std::string& dir, const std::string& task);

// The byte offset in `path` where its last `count` lines begin (a last line
// without its newline counts); reads only the end of the file.
Result<uint64_t> LastLinesOffset(const std::string& path, size_t count);

// Reads a log file from a byte offset as it grows, tail -f style.
class LogFollower {
 public:
  // From byte `offset` of `path`, which need not exist yet.
  LogFollower(std::string path, uint64_t offset) : path_(std::move(path)), offset_(offset) {}

  // Hands each complete line that arrived since the last call to `line`
  // (without its "\n"), in order; with `final`, a last line without its
  // newline too. Returns whether anything was read. A file that does not
  // exist (yet) has nothing to read; other failures are errors.
  Result<bool> Read(const std::function<void(std::string_view)>& line, bool final);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t offset_;
  std::string partial_;  // the start of a line whose newline has not come
};

}  // namespace drover

#endif  // DROVER_DRIVER_NODE_LOGS_H_

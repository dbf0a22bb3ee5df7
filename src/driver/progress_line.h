// ProgressLine: the driver's progress on the terminal ("4/8 nodes
// registered, waiting for worker:3 on host-b"; records, rate and ETA while
// feeding).
//
// On a terminal the line is redrawn in place on stderr; whatever else the
// driver writes, to stdout or stderr, first erases it, so node output never
// lands after a half-drawn line. Not on a terminal, it is a plain line at most
// once per interval, only when its text changed, and not before the first
// interval has passed (a short run prints none). Off, it prints nothing.
//
// Used from the driver's thread only.

#ifndef DROVER_DRIVER_PROGRESS_LINE_H_
#define DROVER_DRIVER_PROGRESS_LINE_H_

#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

namespace drover {

enum class ProgressMode { kOff, kPlain, kTerminal };

struct ProgressOptions {
  ProgressMode mode = ProgressMode::kOff;
  std::chrono::milliseconds plain_interval{10'000};
  int terminal_columns = 0;  // 0: ask the terminal (stderr), else 100
};

class ProgressLine {
 public:
  ProgressLine(std::ostream& out, std::ostream& err, ProgressOptions options);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Streams to write everything else through (the originals unless on a
  // terminal).
  std::ostream& out();
  std::ostream& err();

  // Shows `text` ("" shows nothing) as of `now`.
  void Show(const std::string& text, std::chrono::steady_clock::time_point now);
  // Erases the line (the end of the run).
  void Clear();

 private:
  class ErasingBuffer;
  void Erase();

  std::ostream& real_out_;
  std::ostream& real_err_;
  ProgressOptions options_;
  bool shown_ = false;
  std::string last_plain_;
  std::optional<std::chrono::steady_clock::time_point> last_plain_at_;
  std::optional<std::chrono::steady_clock::time_point> first_shown_at_;  // first text asked
  std::unique_ptr<ErasingBuffer> out_buffer_;
  std::unique_ptr<ErasingBuffer> err_buffer_;
  std::unique_ptr<std::ostream> out_;
  std::unique_ptr<std::ostream> err_;
};

}  // namespace drover

#endif  // DROVER_DRIVER_PROGRESS_LINE_H_

// LineSplitter: cuts one node's output stream into the lines the driver tags
// ("[worker:1] ..."), keeps for the status page, and writes to the node's log
// (docs/run.md, "What the driver does with output").
//
// A line ends at "\n", at "\r\n", or at a lone "\r": a progress bar that
// redraws itself with "\r" (tqdm) gives one line per redraw; an empty
// "\r"-ended piece is dropped. A line longer than max_line_bytes is cut: its
// first max_line_bytes bytes are shown at once, followed by CutMark(), and the
// rest of it, up to its end, is not shown. The log gets every byte of every
// line, cut or not, each line ended by "\n".
//
// Each byte is looked at once, and at most max_line_bytes of a line are held,
// whatever the program prints.
//
// A plain value; not thread-safe.

#ifndef DROVER_DRIVER_LINE_SPLITTER_H_
#define DROVER_DRIVER_LINE_SPLITTER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace drover {

class LineSplitter {
 public:
  static constexpr size_t kDefaultMaxLineBytes = 64 * 1024;

  // What a Feed or Finish produced.
  struct Output {
    std::vector<std::string> lines;  // to show: complete lines without their ends
    std::string log;                 // to append to the node's log, as is
  };

  // REQUIRES: max_line_bytes > 0.
  explicit LineSplitter(size_t max_line_bytes = kDefaultMaxLineBytes);

  // Takes the next bytes of the stream; appends to *out.
  void Feed(std::string_view data, Output* out);
  // The stream ended: an unfinished last line is ended.
  void Finish(Output* out);

  // "…[line cut at 65536 bytes]": what follows the shown part of a cut line.
  static std::string CutMark(size_t max_line_bytes);

 private:
  enum class End { kNewline, kCarriageReturn };

  void Append(std::string_view piece, Output* out);
  void EndLine(Output* out);

  size_t max_line_bytes_;
  std::string partial_;           // the current line, while not cut
  bool in_line_ = false;          // the current line has bytes
  bool cut_ = false;              // the current line was cut (and shown)
  bool after_cr_ = false;         // the last byte was '\r'
  End last_end_ = End::kNewline;  // how the last shown line ended
};

}  // namespace drover

#endif  // DROVER_DRIVER_LINE_SPLITTER_H_

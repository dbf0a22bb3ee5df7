// OutputTail: the last N lines a program wrote, for the failure report
// (docs/run.md, step 5). Bytes come in chunks from one or more streams
// (stdout, stderr); each stream's partial line is kept until its newline or
// Finish(). Long lines are cut to max_line_bytes.
//
// A plain value; not thread-safe.

#ifndef DROVER_AGENT_OUTPUT_TAIL_H_
#define DROVER_AGENT_OUTPUT_TAIL_H_

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace drover {

class OutputTail {
 public:
  static constexpr int kStreams = 2;

  explicit OutputTail(size_t max_lines = 20, size_t max_line_bytes = 4096);

  // REQUIRES: 0 <= stream < kStreams.
  void Append(int stream, std::string_view bytes);
  // Ends the stream's partial line, if any.
  void Finish(int stream);
  // Oldest first; partial lines are not included until finished.
  std::vector<std::string> Lines() const;

 private:
  void Push(std::string line);

  size_t max_lines_;
  size_t max_line_bytes_;
  std::deque<std::string> lines_;
  std::string partial_[kStreams];
};

}  // namespace drover

#endif  // DROVER_AGENT_OUTPUT_TAIL_H_

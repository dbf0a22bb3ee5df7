#include "agent/output_tail.h"

#include <utility>

namespace drover {

OutputTail::OutputTail(size_t max_lines, size_t max_line_bytes)
    : max_lines_(max_lines), max_line_bytes_(max_line_bytes) {}

void OutputTail::Append(int stream, std::string_view bytes) {
  std::string& partial = partial_[stream];
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    std::string_view piece = bytes.substr(0, newline);
    if (partial.size() < max_line_bytes_) {
      partial.append(piece.substr(0, max_line_bytes_ - partial.size()));
    }
    if (newline == std::string_view::npos) break;
    if (!partial.empty() && partial.back() == '\r') partial.pop_back();
    Push(std::exchange(partial, {}));
    bytes.remove_prefix(newline + 1);
  }
}

void OutputTail::Finish(int stream) {
  if (!partial_[stream].empty()) Push(std::exchange(partial_[stream], {}));
}

std::vector<std::string> OutputTail::Lines() const {
  return {lines_.begin(), lines_.end()};
}

void OutputTail::Push(std::string line) {
  lines_.push_back(std::move(line));
  while (lines_.size() > max_lines_) lines_.pop_front();
}

}  // namespace drover

#include "driver/line_splitter.h"

#include <algorithm>

namespace drover {

LineSplitter::LineSplitter(size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

std::string LineSplitter::CutMark(size_t max_line_bytes) {
  return "\u2026[line cut at " + std::to_string(max_line_bytes) + " bytes]";
}

void LineSplitter::Feed(std::string_view data, Output* out) {
  const char* p = data.data();
  const char* const limit = p + data.size();
  while (p < limit) {
    const char* end = std::find_if(p, limit, [](char c) { return c == '\n' || c == '\r'; });
    if (end != p) {
      after_cr_ = false;
      Append(std::string_view(p, static_cast<size_t>(end - p)), out);
    }
    if (end == limit) break;
    if (*end == '\r') {
      // A redraw: the line so far is one. An empty piece is nothing yet; it
      // may be the start of a "\r\n" blank line.
      if (in_line_) {
        EndLine(out);
        last_end_ = End::kCarriageReturn;
      }
      after_cr_ = true;
    } else if (after_cr_) {
      // The '\n' of "\r\n": the '\r' ended the line already, unless the line
      // was empty and the one before it did not end in '\r' (a CRLF blank
      // line, not the tail of a redraw).
      after_cr_ = false;
      if (last_end_ == End::kNewline) EndLine(out);
      last_end_ = End::kNewline;
    } else {
      EndLine(out);
      last_end_ = End::kNewline;
    }
    p = end + 1;
  }
}

void LineSplitter::Finish(Output* out) {
  if (in_line_) EndLine(out);
  after_cr_ = false;
  last_end_ = End::kNewline;
}

void LineSplitter::Append(std::string_view piece, Output* out) {
  in_line_ = true;
  if (cut_) {
    out->log.append(piece);
    return;
  }
  const size_t room = max_line_bytes_ - partial_.size();
  if (piece.size() <= room) {
    partial_.append(piece);
    return;
  }
  // Show what fits now, with the mark; the log gets the whole line as it comes.
  partial_.append(piece.substr(0, room));
  out->lines.push_back(partial_ + CutMark(max_line_bytes_));
  out->log.append(partial_);
  out->log.append(piece.substr(room));
  partial_.clear();
  cut_ = true;
}

void LineSplitter::EndLine(Output* out) {
  if (!cut_) {
    out->log.append(partial_);
    out->lines.push_back(std::move(partial_));
  }
  out->log.push_back('\n');
  partial_.clear();
  in_line_ = false;
  cut_ = false;
}

}  // namespace drover

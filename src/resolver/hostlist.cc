#include "drover/hostlist.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace drover {
namespace {

// 18 digits always fit in uint64_t, so range arithmetic cannot overflow.
constexpr std::size_t kMaxDigits = 18;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

Status HostlistError(std::string_view input, std::size_t pos, std::string_view what) {
  return Status::InvalidArgument("invalid hostlist \"" + std::string(input) + "\" at position " +
                                 std::to_string(pos) + ": " + std::string(what));
}

// One number range inside brackets, "lo" or "lo-hi"; numbers print zero-padded
// to `width`, the number of digits of lo as written.
struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;
  std::size_t width = 0;
  std::size_t max_digits = 0;  // digits of the widest number printed
  uint64_t count() const { return hi - lo + 1; }
};

// A part of one hostlist entry: literal text or a bracket group.
struct Segment {
  std::string literal;        // used when ranges is empty
  std::vector<Range> ranges;  // a bracket group
  uint64_t count() const {
    if (ranges.empty()) return 1;
    uint64_t n = 0;
    for (const Range& r : ranges) n += r.count();
    return n;
  }
  std::size_t max_bytes() const {
    if (ranges.empty()) return literal.size();
    std::size_t widest = 0;
    for (const Range& r : ranges) widest = std::max(widest, r.max_digits);
    return widest;
  }
};

std::size_t DigitCount(uint64_t v) {
  std::size_t n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

std::string FormatNumber(uint64_t value, std::size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Parses digits at `pos`; advances it.
Result<uint64_t> ParseNumber(std::string_view input, std::size_t& pos, std::size_t* digits) {
  std::size_t start = pos;
  uint64_t value = 0;
  while (pos < input.size() && IsDigit(input[pos])) {
    if (pos - start == kMaxDigits)
      return HostlistError(input, start, "number longer than 18 digits");
    value = value * 10 + static_cast<uint64_t>(input[pos] - '0');
    ++pos;
  }
  if (pos == start) {
    return HostlistError(input, pos,
                         pos < input.size()
                             ? "expected a number, got '" + std::string(1, input[pos]) + "'"
                             : "expected a number, got the end of the input");
  }
  *digits = pos - start;
  return value;
}

// Parses a bracket group starting after '['; leaves pos after ']'.
Result<std::vector<Range>> ParseBracket(std::string_view input, std::size_t& pos) {
  std::vector<Range> ranges;
  while (true) {
    Range range;
    std::size_t lo_digits = 0;
    std::size_t lo_pos = pos;
    DROVER_ASSIGN_OR_RETURN(range.lo, ParseNumber(input, pos, &lo_digits));
    range.width = lo_digits;
    range.hi = range.lo;
    if (pos < input.size() && input[pos] == '-') {
      ++pos;
      std::size_t hi_digits = 0;
      DROVER_ASSIGN_OR_RETURN(range.hi, ParseNumber(input, pos, &hi_digits));
      if (range.hi < range.lo) {
        return HostlistError(
            input, lo_pos,
            "range " + std::string(input.substr(lo_pos, pos - lo_pos)) + " ends below its start");
      }
    }
    range.max_digits = std::max(range.width, DigitCount(range.hi));
    ranges.push_back(range);
    if (pos >= input.size()) return HostlistError(input, pos, "unclosed '['");
    char c = input[pos];
    if (c == ']') {
      ++pos;
      return ranges;
    }
    if (c != ',') {
      if (c == '[') return HostlistError(input, pos, "nested '['");
      return HostlistError(input, pos,
                           "expected ',', '-' or ']' in a range, got '" + std::string(1, c) + "'");
    }
    ++pos;
  }
}

// Appends every host of one entry, odometer-style (the last group turns
// fastest); iterative so that an entry of many groups cannot overflow the stack.
void ExpandEntry(const std::vector<Segment>& segments, std::vector<std::string>& out) {
  struct Cursor {
    std::size_t range = 0;
    uint64_t value = 0;
  };
  std::vector<Cursor> cursors(segments.size());
  std::vector<std::size_t> groups;  // indices of the bracket segments
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].ranges.empty()) continue;
    cursors[i].value = segments[i].ranges[0].lo;
    groups.push_back(i);
  }
  while (true) {
    std::string host;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const Segment& segment = segments[i];
      if (segment.ranges.empty()) {
        host += segment.literal;
      } else {
        host += FormatNumber(cursors[i].value, segment.ranges[cursors[i].range].width);
      }
    }
    out.push_back(std::move(host));
    // Advance the rightmost group that has a next value, resetting those after
    // it; when every group wraps around, the entry is done.
    bool advanced = false;
    for (std::size_t k = groups.size(); k > 0 && !advanced; --k) {
      std::size_t i = groups[k - 1];
      const std::vector<Range>& ranges = segments[i].ranges;
      Cursor& cursor = cursors[i];
      if (cursor.value < ranges[cursor.range].hi) {
        ++cursor.value;
        advanced = true;
      } else if (cursor.range + 1 < ranges.size()) {
        ++cursor.range;
        cursor.value = ranges[cursor.range].lo;
        advanced = true;
      } else {
        cursor = Cursor{0, ranges[0].lo};
      }
    }
    if (!advanced) return;
  }
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view input) {
  // First pass parses every entry and bounds the output; the second expands.
  std::vector<std::vector<Segment>> entries;
  uint64_t total_hosts = 0;
  uint64_t total_bytes = 0;
  std::size_t pos = 0;
  auto skip_space = [&] {
    while (pos < input.size() && IsSpace(input[pos])) ++pos;
  };
  skip_space();
  while (pos < input.size()) {
    std::size_t entry_start = pos;
    std::vector<Segment> segments;
    while (pos < input.size() && input[pos] != ',' && !IsSpace(input[pos])) {
      char c = input[pos];
      if (c == ']') return HostlistError(input, pos, "']' without '['");
      if (c == '[') {
        ++pos;
        Segment segment;
        DROVER_ASSIGN_OR_RETURN(segment.ranges, ParseBracket(input, pos));
        segments.push_back(std::move(segment));
        continue;
      }
      if (segments.empty() || !segments.back().ranges.empty()) segments.emplace_back();
      segments.back().literal += c;
      ++pos;
    }
    if (segments.empty()) return HostlistError(input, entry_start, "empty host name");
    uint64_t count = 1;
    uint64_t bytes = 0;
    for (const Segment& segment : segments) {
      uint64_t n = segment.count();
      // count * n could overflow only far above the limit; check before multiplying.
      if (n > kMaxHostlistEntries || count > kMaxHostlistEntries / n) {
        count = kMaxHostlistEntries + 1;
      } else {
        count *= n;
      }
      bytes += segment.max_bytes();
    }
    total_hosts += count;
    if (total_hosts > kMaxHostlistEntries) {
      return HostlistError(input, entry_start,
                           "expands to more than " + std::to_string(kMaxHostlistEntries) +
                               " hosts (a typo in a range?)");
    }
    total_bytes += count * bytes;
    if (total_bytes > kMaxHostlistBytes) {
      return HostlistError(
          input, entry_start,
          "expands to more than " + std::to_string(kMaxHostlistBytes) + " bytes of host names");
    }
    entries.push_back(std::move(segments));
    // A separator is a run of whitespace holding at most one ','.
    skip_space();
    if (pos < input.size() && input[pos] == ',') {
      ++pos;
      skip_space();
      if (pos >= input.size()) return HostlistError(input, pos, "empty host name after ','");
      if (input[pos] == ',') return HostlistError(input, pos, "empty host name");
    }
  }
  std::vector<std::string> hosts;
  hosts.reserve(total_hosts);
  for (const std::vector<Segment>& segments : entries) ExpandEntry(segments, hosts);
  return hosts;
}

Result<std::vector<int>> ExpandTasksPerNode(std::string_view input) {
  auto error = [&](std::size_t at, std::string_view what) {
    return Status::InvalidArgument("invalid tasks-per-node list \"" + std::string(input) +
                                   "\" at position " + std::to_string(at) + ": " +
                                   std::string(what));
  };
  std::vector<int> counts;
  std::size_t pos = 0;
  auto skip_space = [&] {
    while (pos < input.size() && IsSpace(input[pos])) ++pos;
  };
  auto number = [&](uint64_t* value) -> Status {
    std::size_t start = pos;
    uint64_t v = 0;
    while (pos < input.size() && IsDigit(input[pos])) {
      v = v * 10 + static_cast<uint64_t>(input[pos] - '0');
      if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
        return error(start, "number too large");
      }
      ++pos;
    }
    if (pos == start) return error(pos, "expected a number");
    *value = v;
    return Status::Ok();
  };
  skip_space();
  if (pos == input.size()) return error(pos, "empty");
  while (true) {
    skip_space();
    uint64_t count = 0;
    DROVER_RETURN_IF_ERROR(number(&count));
    uint64_t repeat = 1;
    if (pos < input.size() && input[pos] == '(') {
      std::size_t open = pos;
      ++pos;
      if (pos >= input.size() || input[pos] != 'x') return error(pos, "expected 'x' after '('");
      ++pos;
      DROVER_RETURN_IF_ERROR(number(&repeat));
      if (repeat == 0) return error(open, "repeat count (x0) must be positive");
      if (pos >= input.size() || input[pos] != ')') return error(pos, "expected ')'");
      ++pos;
    }
    if (repeat > kMaxHostlistEntries - counts.size()) {
      return error(pos, "expands to more than " + std::to_string(kMaxHostlistEntries) + " nodes");
    }
    counts.insert(counts.end(), repeat, static_cast<int>(count));
    skip_space();
    if (pos == input.size()) break;
    if (input[pos] != ',') {
      return error(pos, "expected ',' or '(x<repeat>)', got '" + std::string(1, input[pos]) + "'");
    }
    ++pos;
  }
  return counts;
}

}  // namespace drover

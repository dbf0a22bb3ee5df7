#include "spec/python_repr.h"

#include <cstdint>
#include <cstdio>

namespace drover {
namespace {

// Decodes one UTF-8 sequence at text[pos]; returns its length, or 0 when the
// bytes there are not well-formed UTF-8.
size_t DecodeUtf8(std::string_view text, size_t pos, uint32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const uint8_t lead = byte(0);
  size_t length;
  uint32_t value;
  uint32_t min_value;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2;
    value = lead & 0x1F;
    min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    value = lead & 0x0F;
    min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    value = lead & 0x07;
    min_value = 0x10000;
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i) & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *code_point = value;
  return length;
}

// Python's str.isprintable() is false for categories Cc, Cf, Cs, Co, Cn, Zl,
// Zp and Zs other than the space. This covers the assigned characters of those
// categories that plausibly occur in host names and job names; unassigned code
// points (Cn) are kept as they are.
bool IsPrintable(uint32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;  // C1 controls, NBSP, soft hyphen
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E ||
      c == 0x1680)
    return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000)
    return false;
  if ((c >= 0xE000 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if (c == 0x110BD || c == 0x110CD || (c >= 0x1BCA0 && c <= 0x1BCA3) ||
      (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F))
    return false;
  if (c >= 0xF0000) return false;  // supplementary private use planes
  return true;
}

void AppendEscape(std::string* out, uint32_t c) {
  char buffer[16];
  if (c < 0x100) {
    std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(c));
  } else if (c < 0x10000) {
    std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(c));
  } else {
    std::snprintf(buffer, sizeof(buffer), "\\U%08x", static_cast<unsigned>(c));
  }
  out->append(buffer);
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  uint32_t code_point;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = DecodeUtf8(text, pos, &code_point);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

std::string EscapeInvalidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  uint32_t code_point;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = DecodeUtf8(text, pos, &code_point);
    if (length == 0) {
      AppendEscape(&out, static_cast<uint8_t>(text[pos]));
      ++pos;
    } else {
      out.append(text.substr(pos, length));
      pos += length;
    }
  }
  return out;
}

std::string PythonRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back(quote);
  uint32_t c;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = DecodeUtf8(text, pos, &c);
    if (length == 0) {
      AppendEscape(&out, static_cast<uint8_t>(text[pos]));
      ++pos;
      continue;
    }
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (!IsPrintable(c)) {
      AppendEscape(&out, c);
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
  }
  out.push_back(quote);
  return out;
}

}  // namespace drover

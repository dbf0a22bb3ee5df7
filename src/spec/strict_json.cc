#include "spec/strict_json.h"

#include <cctype>
#include <charconv>
#include <set>
#include <vector>

#include "spec/python_repr.h"

namespace drover {
namespace {

constexpr size_t kMaxReprBytes = 60;

// One open object or array while parsing; gives the path to a duplicate.
struct Frame {
  bool is_object = false;
  std::set<std::string> keys;
  std::string current_key;
  size_t element = 0;
};

void AppendRepr(const nlohmann::ordered_json& value, int depth, std::string* out) {
  if (out->size() > kMaxReprBytes) return;
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::null:
      *out += "None";
      return;
    case nlohmann::ordered_json::value_t::boolean:
      *out += value.get<bool>() ? "True" : "False";
      return;
    case nlohmann::ordered_json::value_t::string:
      *out += PythonRepr(value.get_ref<const std::string&>());
      return;
    case nlohmann::ordered_json::value_t::array: {
      if (depth > 8) {
        *out += "[...]";
        return;
      }
      *out += '[';
      bool first = true;
      for (const auto& element : value) {
        if (!first) *out += ", ";
        first = false;
        AppendRepr(element, depth + 1, out);
        if (out->size() > kMaxReprBytes) return;
      }
      *out += ']';
      return;
    }
    case nlohmann::ordered_json::value_t::object: {
      if (depth > 8) {
        *out += "{...}";
        return;
      }
      *out += '{';
      bool first = true;
      for (const auto& [key, element] : value.items()) {
        if (!first) *out += ", ";
        first = false;
        *out += PythonRepr(key) + ": ";
        AppendRepr(element, depth + 1, out);
        if (out->size() > kMaxReprBytes) return;
      }
      *out += '}';
      return;
    }
    default:  // numbers print the same in JSON and Python (but for 1e100 style)
      *out += value.dump();
      return;
  }
}

}  // namespace

Result<nlohmann::ordered_json> ParseStrictJson(std::string_view text) {
  std::vector<Frame> stack;
  std::string duplicate;  // the first one found; parsing goes on to the end
  auto callback = [&](int /*depth*/, nlohmann::ordered_json::parse_event_t event,
                      nlohmann::ordered_json& parsed) {
    using Event = nlohmann::ordered_json::parse_event_t;
    switch (event) {
      case Event::object_start:
        stack.emplace_back().is_object = true;
        break;
      case Event::array_start:
        stack.emplace_back();
        break;
      case Event::key: {
        Frame& top = stack.back();
        top.current_key = parsed.get<std::string>();
        if (!top.keys.insert(top.current_key).second && duplicate.empty()) {
          std::string path;
          for (size_t i = 0; i + 1 < stack.size(); ++i) {
            path += '/';
            path += stack[i].is_object ? stack[i].current_key : std::to_string(stack[i].element);
          }
          duplicate = "duplicate key " + PythonRepr(top.current_key) + " in the object at " +
                      (path.empty() ? std::string("the top level") : "'" + path + "'");
        }
        break;
      }
      case Event::value:
        if (!stack.empty() && !stack.back().is_object) ++stack.back().element;
        break;
      case Event::object_end:
      case Event::array_end:
        stack.pop_back();
        if (!stack.empty() && !stack.back().is_object) ++stack.back().element;
        break;
    }
    return true;
  };
  nlohmann::ordered_json value;
  try {
    value = nlohmann::ordered_json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::ordered_json::exception& error) {
    // nlohmann quotes the bytes it last read, which may be broken UTF-8.
    return Status::InvalidArgument("not valid JSON: " + EscapeInvalidUtf8(error.what()));
  }
  if (!duplicate.empty()) return Status::InvalidArgument(duplicate);
  return value;
}

std::string JsonTypeName(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::null:
      return "JSON null";
    case nlohmann::ordered_json::value_t::boolean:
      return "a JSON boolean";
    case nlohmann::ordered_json::value_t::string:
      return "a JSON string";
    case nlohmann::ordered_json::value_t::array:
      return "a JSON array";
    case nlohmann::ordered_json::value_t::object:
      return "a JSON object";
    default:
      return "a JSON number";
  }
}

std::string PythonReprOfJson(const nlohmann::ordered_json& value) {
  std::string out;
  AppendRepr(value, 0, &out);
  if (out.size() > kMaxReprBytes) {
    size_t cut = kMaxReprBytes;
    // Cut on a character boundary so the message stays UTF-8 for Python.
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += "...";
  }
  return out;
}

bool ParsePythonInt(std::string_view text, long long* value) {
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return false;
  unsigned long long magnitude = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), magnitude);
  if (error != std::errc() || end != text.data() + text.size()) return false;
  constexpr unsigned long long kMax = 9223372036854775807ULL;
  if (magnitude > kMax + (negative ? 1 : 0)) return false;
  *value = negative ? static_cast<long long>(0 - magnitude) : static_cast<long long>(magnitude);
  return true;
}

}  // namespace drover

// ParseStrictJson: nlohmann-json parsing that keeps object key order and
// rejects duplicate keys, which Python's json module would silently collapse
// (last wins). Used for ClusterSpec JSON and TF_CONFIG.
//
// Internal to drover (the public headers stay free of nlohmann types);
// stateless and thread-safe.

#ifndef DROVER_SPEC_STRICT_JSON_H_
#define DROVER_SPEC_STRICT_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover {

// kInvalidArgument for text that is not one JSON value, or that repeats a key
// within an object (the message names the key and the path of keys to it).
Result<nlohmann::ordered_json> ParseStrictJson(std::string_view text);

// "a JSON string", "a JSON array", ... for messages that say what came.
std::string JsonTypeName(const nlohmann::ordered_json& value);

// repr() of the Python value json.loads would give for `value` (None, True,
// 3, 'text', [1, 'a'], {'k': 2}), shortened with "..." past about 60 bytes.
std::string PythonReprOfJson(const nlohmann::ordered_json& value);

// Python's int(text) for a str: optional surrounding whitespace, an optional
// sign, then decimal digits. False when that is not the shape of `text` or
// the value does not fit in `*value`.
bool ParsePythonInt(std::string_view text, long long* value);

}  // namespace drover

#endif  // DROVER_SPEC_STRICT_JSON_H_

// PythonRepr: how Python 3's repr() writes a str, so that DebugString() and
// error messages read exactly as TensorFlow's (ClusterSpec({'ps': ['a:1']}),
// "No such job in cluster: 'worker'").
//
// Internal to drover; stateless and thread-safe.

#ifndef DROVER_SPEC_PYTHON_REPR_H_
#define DROVER_SPEC_PYTHON_REPR_H_

#include <string>
#include <string_view>

namespace drover {

// repr() of a Python str holding the UTF-8 text `text`: single quotes unless
// the text has a ' and no ", backslash escapes for the quote, \\, \t, \n, \r,
// \xNN for other control characters. Non-ASCII characters are kept, except the
// non-printable ones Python escapes (C1 controls, no-break and other non-ASCII
// spaces, format characters such as U+200B and U+FEFF, private use); bytes that
// are not valid UTF-8 are written as \xNN.
std::string PythonRepr(std::string_view text);

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, at most
// U+10FFFF), the condition protobuf puts on ClusterDef's string fields.
bool IsValidUtf8(std::string_view text);

// `text` with each byte that is not part of well-formed UTF-8 replaced by
// \xNN, so that a message quoting raw input can become a Python str.
std::string EscapeInvalidUtf8(std::string_view text);

}  // namespace drover

#endif  // DROVER_SPEC_PYTHON_REPR_H_

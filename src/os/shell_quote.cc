#include "os/shell_quote.h"

#include <cstring>

namespace drover::os {
namespace {

bool IsShellSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("@%_-+=:,./", c) != nullptr;
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  if (!word.empty()) {
    bool safe = true;
    for (char c : word) safe = safe && IsShellSafe(c);
    if (safe) return word;
  }
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string ShellJoin(const std::vector<std::string>& words) {
  std::string joined;
  for (const std::string& word : words) {
    if (!joined.empty()) joined += ' ';
    joined += ShellQuote(word);
  }
  return joined;
}

}  // namespace drover::os

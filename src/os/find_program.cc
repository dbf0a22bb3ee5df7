#include "os/find_program.h"

#include <unistd.h>

namespace drover::os {
namespace {

bool IsExecutable(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::string> FindProgram(std::string_view name,
                                       const std::optional<std::string>& search_path) {
  if (name.find('/') != std::string_view::npos) {
    std::string path(name);
    if (IsExecutable(path)) return path;
    return std::nullopt;
  }
  if (!search_path) return std::nullopt;
  std::string_view dirs = *search_path;
  for (;;) {
    const size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/";
    candidate += name;
    if (IsExecutable(candidate)) return candidate;
    if (colon == std::string_view::npos) return std::nullopt;
    dirs.remove_prefix(colon + 1);
  }
}

namespace {

std::string BinaryBeside(const std::string& drover_binary, const char* name) {
  const size_t slash = drover_binary.rfind('/');
  if (slash == std::string::npos) return drover_binary;
  const std::string small = drover_binary.substr(0, slash + 1) + name;
  return IsExecutable(small) ? small : drover_binary;
}

}  // namespace

std::string GuardBinaryBeside(const std::string& drover_binary) {
  return BinaryBeside(drover_binary, "drover-guard");
}

std::string AgentBinaryBeside(const std::string& drover_binary) {
  return BinaryBeside(drover_binary, "drover-agent");
}

}  // namespace drover::os

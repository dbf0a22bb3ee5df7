// A command's error line, written to stderr in one write: a host agent's
// stderr may be relayed in frames, one a write, and a line written in pieces
// (`std::cerr << a << b`) arrives in several, with another writer's bytes
// free to land between them.

#ifndef DROVER_CLI_ERROR_LINE_H_
#define DROVER_CLI_ERROR_LINE_H_

#include <cstdio>
#include <string>

namespace drover::cli {

inline void PrintErrorLine(const std::string& line) {
  const std::string whole = line + "\n";
  std::fwrite(whole.data(), 1, whole.size(), stderr);
}

}  // namespace drover::cli

#endif  // DROVER_CLI_ERROR_LINE_H_

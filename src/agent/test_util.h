// Helpers shared by the agent tests: a temporary directory (testing/temp_dir.h)
// and file reading.

#ifndef DROVER_AGENT_TEST_UTIL_H_
#define DROVER_AGENT_TEST_UTIL_H_

#include <fstream>
#include <sstream>
#include <string>

#include "testing/temp_dir.h"

namespace drover::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

}  // namespace drover::testing

#endif  // DROVER_AGENT_TEST_UTIL_H_

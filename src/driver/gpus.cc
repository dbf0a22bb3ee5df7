#include "driver/gpus.h"

#include <sstream>

#include "os/find_program.h"
#include "os/run_process.h"

namespace drover {
namespace {

// nvidia-smi answers in well under a second; a hung driver must not hold
// `drover run` up for long.
constexpr int kNvidiaSmiTimeoutS = 20;

}  // namespace

std::vector<int> ParseGpuIndices(std::string_view output) {
  std::vector<int> gpus;
  std::istringstream in{std::string(output)};
  std::string line;
  while (std::getline(in, line)) {
    size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    size_t end = line.find_last_not_of(" \t\r");
    std::string token = line.substr(begin, end - begin + 1);
    if (token.find_first_not_of("0123456789") != std::string::npos) continue;
    gpus.push_back(std::stoi(token));
  }
  return gpus;
}

Result<std::vector<std::string>> AssignGpus(int gpus_per_node, int nodes,
                                            const std::vector<int>& available) {
  if (gpus_per_node < 0) {
    return Status::InvalidArgument("--gpus-per-node must be >= 0, got " +
                                   std::to_string(gpus_per_node));
  }
  std::vector<std::string> assigned;
  if (gpus_per_node == 0) return std::vector<std::string>(static_cast<size_t>(nodes), "none");
  size_t needed = static_cast<size_t>(gpus_per_node) * static_cast<size_t>(nodes);
  if (available.size() < needed) {
    return Status::InvalidArgument(
        std::to_string(nodes) + " nodes x " + std::to_string(gpus_per_node) + " GPUs need " +
        std::to_string(needed) + " GPUs, but this host has " + std::to_string(available.size()) +
        (available.empty() ? " (nvidia-smi found none)" : ""));
  }
  for (int node = 0; node < nodes; ++node) {
    std::string list;
    for (int k = 0; k < gpus_per_node; ++k) {
      if (!list.empty()) list += ",";
      list += std::to_string(available[static_cast<size_t>(node * gpus_per_node + k)]);
    }
    assigned.push_back(list);
  }
  return assigned;
}

std::vector<int> DetectGpus(const Environment& env) {
  std::optional<std::string> nvidia_smi = os::FindProgram("nvidia-smi", env.Get("PATH"));
  if (!nvidia_smi) return {};
  Result<os::CommandResult> listed = os::RunProcess(
      {*nvidia_smi, "--query-gpu=index", "--format=csv,noheader"}, "", kNvidiaSmiTimeoutS);
  if (!listed.ok() || listed->exit_code != 0) return {};
  return ParseGpuIndices(listed->output);
}

}  // namespace drover

// --nodes and --workers: N or MIN:MAX (drover run, and drover agent through etcd).

#ifndef DROVER_CLI_NODE_RANGE_H_
#define DROVER_CLI_NODE_RANGE_H_

#include <optional>
#include <string>
#include <utility>

namespace drover::cli {

// "N" -> (nullopt, N); "MIN:MAX" -> (MIN, MAX), each at least `smallest`;
// throws CLI::ValidationError naming `flag` (CLI11 reports it).
std::pair<std::optional<int>, std::optional<int>> ParseNodeRange(const std::string& text,
                                                                 const std::string& flag,
                                                                 int smallest);

}  // namespace drover::cli

#endif  // DROVER_CLI_NODE_RANGE_H_

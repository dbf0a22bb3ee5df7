// Flags drover run and drover agent share: --nodes and --workers (N or
// MIN:MAX), and --node-list.

#ifndef DROVER_CLI_CLUSTER_FLAGS_H_
#define DROVER_CLI_CLUSTER_FLAGS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>

#include "drover/rendezvous.h"

namespace drover::cli {

// "N" -> (nullopt, N); "MIN:MAX" -> (MIN, MAX), each at least `smallest`;
// throws CLI::ValidationError naming `flag` (CLI11 reports it).
std::pair<std::optional<int>, std::optional<int>> ParseNodeRange(const std::string& text,
                                                                 const std::string& flag,
                                                                 int smallest);

// --node-list auto|always|never into *list (NodeList, drover/rendezvous.h).
void AddNodeListOption(CLI::App& command, NodeList* list);

}  // namespace drover::cli

#endif  // DROVER_CLI_CLUSTER_FLAGS_H_

#include "cli/cluster_flags.h"

#include <charconv>
#include <string_view>

namespace drover::cli {

std::pair<std::optional<int>, std::optional<int>> ParseNodeRange(const std::string& text,
                                                                 const std::string& flag,
                                                                 int smallest) {
  auto number = [&](std::string_view part) {
    int value = -1;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (ec != std::errc() || end != part.data() + part.size() || value < smallest) {
      throw CLI::ValidationError(flag, "takes N or MIN:MAX with whole numbers >= " +
                                           std::to_string(smallest) + ", not '" + text + "'");
    }
    return value;
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return {std::nullopt, number(text)};
  const int min = number(std::string_view(text).substr(0, colon));
  const int max = number(std::string_view(text).substr(colon + 1));
  if (min > max)
    throw CLI::ValidationError(flag, "MIN " + std::to_string(min) + " is over MAX " +
                                         std::to_string(max) + " in '" + text + "'");
  return {min, max};
}

void AddNodeListOption(CLI::App& command, NodeList* list) {
  command
      .add_option_function<std::string>(
          "--node-list",
          // The check below lets only the three names through.
          [list](const std::string& text) { *list = *ParseNodeList(text); },
          "Whether each program gets the whole cluster (TF_CONFIG, DROVER_CLUSTER_SPEC): "
          "auto (up to 1,024 nodes), always or never; torch, JAX and MPI need only their "
          "own ranks")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->default_str("auto");
}

}  // namespace drover::cli

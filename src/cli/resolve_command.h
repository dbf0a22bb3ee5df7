// `drover resolve`: resolves the cluster this process runs in and prints it.
// Flag parsing lives in main.cc; this file does the work so tests and other
// commands can call it with their own streams and environment.

#ifndef DROVER_CLI_RESOLVE_COMMAND_H_
#define DROVER_CLI_RESOLVE_COMMAND_H_

#include <optional>
#include <ostream>
#include <string>

#include "drover/environment.h"

namespace drover::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the work failed (a peer, the OS)
inline constexpr int kExitBadInput = 2;  // the user's flags, files or variables are wrong

struct ResolveFlags {
  std::string resolver = "auto";
  std::string format = "json";  // json | tf-config | cluster-def | env
  std::optional<std::string> task_type;
  std::optional<int> task_index;
  std::optional<std::string> rpc_layer;
};

// Writes the result to `out`, one error line to `err`; returns the exit code.
int RunResolve(const ResolveFlags& flags, Environment& env, std::ostream& out, std::ostream& err,
               bool out_is_terminal);

}  // namespace drover::cli

#endif  // DROVER_CLI_RESOLVE_COMMAND_H_

// `drover rendezvous`: a standalone reservation server for clusters launched
// by hand. It waits for --nodes registrations, prints the formed cluster as
// JSON on stdout, then supervises the nodes (dead nodes and reported errors
// on stderr) until they have all gone or it is interrupted.

#ifndef DROVER_CLI_RENDEZVOUS_COMMAND_H_
#define DROVER_CLI_RENDEZVOUS_COMMAND_H_

#include <optional>
#include <ostream>
#include <string>

namespace drover::cli {

struct RendezvousFlags {
  int nodes = 0;
  int ps = 0;
  bool chief = false;
  bool evaluator = false;
  int port = 0;
  std::string bind = "0.0.0.0";
  std::string token_file;
  double timeout_seconds = 600;
  double heartbeat_seconds = 1;
  double quiet_heartbeat_seconds = 5;
};

int RunRendezvous(const RendezvousFlags& flags, std::ostream& out, std::ostream& err);

}  // namespace drover::cli

#endif  // DROVER_CLI_RENDEZVOUS_COMMAND_H_

// Liveness: after the barrier, whether each node is alive (docs/protocol.md,
// "Timeouts"). HEARTBEAT frames record a node's last sign of life and what
// its agent knows of its program (pid, feed progress); a node silent for
// missed_heartbeats_until_dead intervals (and a quiet interval more after a
// quiet heartbeat), or whose connection closes without LEAVE or a STOP sent
// to it, is declared dead, once, and the driver told.
// The server owns the heartbeat timer and calls CheckHeartbeats.
//
// State is the NodeTable's. Called only on the server's event loop.

#ifndef DROVER_SRC_RENDEZVOUS_LIVENESS_H_
#define DROVER_SRC_RENDEZVOUS_LIVENESS_H_

#include <string>

#include "drover.pb.h"
#include "drover/rendezvous.h"
#include "rendezvous/node_table.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"

namespace drover::rendezvous_internal {

struct LivenessOptions {
  Milliseconds heartbeat_interval{1'000};
  int missed_heartbeats_until_dead = 5;
  Milliseconds quiet_heartbeat_interval{0};
};

class Liveness {
 public:
  // `table` and `context` must outlive the Liveness.
  Liveness(LivenessOptions options, NodeTable& table, ServerContext& context)
      : options_(options), table_(table), context_(context) {}

  // HEARTBEAT: counts for the node `peer` registered, if it still holds the
  // node's slot; ignored otherwise.
  void HandleHeartbeat(Peer& peer, const wire::Heartbeat& heartbeat);
  // Declares dead, and disconnects, every formed node alive but silent for
  // longer than the limit as of `now`. Nothing before the barrier.
  void CheckHeartbeats(Clock::time_point now);
  // After the barrier, `node`'s connection closed (`why`: how, for the
  // message): dead, unless it left or was told to stop.
  void Disconnected(NodeRecord& node, const std::string& why = "connection closed");

 private:
  void DeclareDead(NodeRecord& node, const std::string& why);

  const LivenessOptions options_;
  NodeTable& table_;
  ServerContext& context_;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_LIVENESS_H_

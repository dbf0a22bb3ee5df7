// Control: the CONTROL messages (docs/protocol.md, "Messages";
// docs/security.md for who may send which), one handler per kind:
// REPORT_ERROR, QUERY_STATE, STOP_ALL, LEAVE and STOP_NODE; and the
// driver's own StopNode and StopAll. A STOP is relayed to the nodes
// concerned as a CONTROL frame and marks them stopped, so that their
// connections closing next is not a death.
//
// State is the NodeTable's. Called only on the server's event loop.

#ifndef DROVER_SRC_RENDEZVOUS_CONTROL_H_
#define DROVER_SRC_RENDEZVOUS_CONTROL_H_

#include <string>

#include "drover.pb.h"
#include "drover/rendezvous.h"
#include "rendezvous/node_table.h"
#include "rendezvous/peer.h"
#include "rendezvous/server_context.h"

namespace drover::rendezvous_internal {

class Control {
 public:
  // `table` and `context` must outlive the Control.
  Control(NodeTable& table, ServerContext& context) : table_(table), context_(context) {}

  // CONTROL from an authenticated peer.
  void HandleControl(Peer& peer, const wire::Control& control);

  // The driver's STOP_NODE: kNotFound for an unknown executor, kUnavailable
  // when its connection is closed.
  Status StopNode(const std::string& executor_id);
  // The driver's STOP_ALL.
  void StopAll();
  // Elastic rounds: tells every member still connected (those whose program
  // finished too) to stop its program and register again for `round`.
  void SendReform(int round, const std::string& reason);

 private:
  void HandleReportError(Peer& peer, const wire::Control& control);
  void HandleQueryState(Peer& peer);
  void HandleStopAll(Peer& peer);
  void HandleLeave(Peer& peer, const wire::Control& control);
  void HandleStopNode(Peer& peer, const wire::Control& control);
  // Marks `node` stopped and sends it `control`; false when its connection
  // is closed.
  bool RelayStop(NodeRecord& node, const wire::Control& control);

  NodeTable& table_;
  ServerContext& context_;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_CONTROL_H_

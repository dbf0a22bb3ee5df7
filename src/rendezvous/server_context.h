// ServerContext: what the rendezvous server's parts (Handshake, Barrier,
// Liveness, Control) reach of the server that owns them: its log, the
// driver's callbacks, the open connections by id, and the outcome that
// WaitForCluster waits on. The server (server.cc) implements it; the parts'
// tests use a fake.
//
// Called only on the server's event loop.

#ifndef DROVER_SRC_RENDEZVOUS_SERVER_CONTEXT_H_
#define DROVER_SRC_RENDEZVOUS_SERVER_CONTEXT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drover/rendezvous.h"
#include "rendezvous/peer.h"

namespace drover::rendezvous_internal {

class ServerContext {
 public:
  virtual ~ServerContext() = default;

  // One line of the server's log (RendezvousServerOptions::log).
  virtual void Log(const std::string& line) = 0;
  // Tells the driver (RendezvousServerOptions::on_event), if it listens.
  virtual void Report(const NodeEvent& event) = 0;
  // The open connection `id`; nullptr once it closed or began draining.
  virtual Peer* FindPeer(uint64_t id) = 0;
  // The barrier's outcome, for WaitForCluster: OK once the cluster formed
  // (the server then starts checking heartbeats, and lays the cluster out
  // for WaitForCluster from Barrier::Formed), or why none formed. Only the
  // first outcome counts.
  virtual void Publish(const Status& outcome) = 0;
  // Runs `task` on the loop after what is already queued (the writes that
  // sends this turn set off): work done a part at a time.
  virtual void Post(std::function<void()> task) = 0;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_SERVER_CONTEXT_H_

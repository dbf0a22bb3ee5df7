// NodeLink: what one node's Agent asks of the rendezvous, on a connection of
// its own (ConnectNode) or on its host's shared one (HostConnection).
//
// A link is one node's, used by that node's threads: Register and
// StartHeartbeats from the agent's main thread, WaitForInstruction from one
// thread at a time (the stop watcher, or the main thread between rounds),
// ReportError and Leave from the main thread once no WaitForInstruction runs.

#ifndef DROVER_AGENT_NODE_LINK_H_
#define DROVER_AGENT_NODE_LINK_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drover/agent.h"
#include "drover/rendezvous.h"

namespace drover {

class NodeLink {
 public:
  virtual ~NodeLink() = default;

  // Registers the node and waits for the barrier (RendezvousClient::Register).
  virtual Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline) = 0;
  // This node's heartbeats (RendezvousClient::StartHeartbeats): alive from
  // the first call, with `payload`'s values when given.
  virtual void StartHeartbeats(Milliseconds interval,
                               std::function<HeartbeatPayload()> payload = {}) = 0;
  // What the server told this node (RendezvousClient::WaitForInstruction).
  virtual Result<RendezvousClient::Instruction> WaitForInstruction(Deadline deadline,
                                                                   int wake_fd) = 0;
  // REPORT_ERROR, then a QUERY_STATE round trip: the server handles frames
  // in order, so once the state comes back the report has been handled.
  // Without it, closing the connection (or the driver seeing the agent's
  // exit code) right after the write could lose the report.
  virtual Status ReportError(const std::string& message, const std::vector<std::string>& last_lines,
                             Deadline deadline) = 0;
  // LEAVE (the program finished; not a death), flushed the same way.
  virtual Status Leave(Deadline deadline) = 0;
};

// A connection of the node's own.
Result<std::unique_ptr<NodeLink>> ConnectNode(RendezvousClientOptions options,
                                              const std::string& executor_id, Deadline deadline);

// The node's share of its host's connection; kInvalidArgument when the
// connection was not made for `executor_id`, or that node has a link already.
Result<std::unique_ptr<NodeLink>> LinkThroughHost(HostConnection& host,
                                                  const std::string& executor_id);

}  // namespace drover

#endif  // DROVER_AGENT_NODE_LINK_H_

#include "agent/node_link.h"

#include <utility>

namespace drover {
namespace {

// A node's own connection: the client's calls, one to one.
class ClientLink final : public NodeLink {
 public:
  ClientLink(std::unique_ptr<RendezvousClient> client, std::string executor_id)
      : client_(std::move(client)), executor_id_(std::move(executor_id)) {}

  Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline) override {
    return client_->Register(node, deadline);
  }
  void StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload) override {
    client_->StartHeartbeats(interval, std::move(payload));
  }
  Result<RendezvousClient::Instruction> WaitForInstruction(Deadline deadline,
                                                           int wake_fd) override {
    return client_->WaitForInstruction(deadline, wake_fd);
  }
  Status ReportError(const std::string& message, const std::vector<std::string>& last_lines,
                     Deadline deadline) override {
    DROVER_RETURN_IF_ERROR(client_->ReportError(executor_id_, message, last_lines));
    return client_->QueryState(deadline).status();
  }
  Status Leave(Deadline deadline) override {
    DROVER_RETURN_IF_ERROR(client_->Leave());
    return client_->QueryState(deadline).status();
  }

 private:
  std::unique_ptr<RendezvousClient> client_;
  const std::string executor_id_;
};

}  // namespace

Result<std::unique_ptr<NodeLink>> ConnectNode(RendezvousClientOptions options,
                                              const std::string& executor_id, Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousClient> client,
                          RendezvousClient::Connect(std::move(options), deadline));
  return std::unique_ptr<NodeLink>(std::make_unique<ClientLink>(std::move(client), executor_id));
}

}  // namespace drover

// What a RendezvousClient talks to: the built-in server over one
// authenticated TCP connection (client.cc), or etcd (etcd_backend.cc).
// RendezvousClient's public methods forward here one to one; the contract
// of each is the one drover/rendezvous.h states for the public method.

#ifndef DROVER_SRC_RENDEZVOUS_CLIENT_BACKEND_H_
#define DROVER_SRC_RENDEZVOUS_CLIENT_BACKEND_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "drover/rendezvous.h"

namespace drover {

class RendezvousClient::Backend {
 public:
  virtual ~Backend() = default;

  virtual Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline) = 0;
  virtual Result<std::vector<FormedCluster>> RegisterHost(const std::vector<NodeInfo>& nodes,
                                                          Deadline deadline) = 0;
  virtual void StartHeartbeats(Milliseconds interval,
                               std::function<HeartbeatPayload()> payload) = 0;
  virtual Status StartHostHeartbeats(Milliseconds interval,
                                     std::function<std::vector<NodeHeartbeat>()> payloads) = 0;
  virtual Status ReportError(const std::string& executor_id, const std::string& message,
                             const std::vector<std::string>& last_log_lines) = 0;
  virtual Result<ClusterState> QueryState(Deadline deadline) = 0;
  virtual Status StopAll() = 0;
  virtual Status Leave() = 0;
  virtual Status LeaveNode(const std::string& executor_id) = 0;
  virtual Result<bool> WaitForStop(Deadline deadline, int wake_fd) = 0;
  virtual Result<Instruction> WaitForInstruction(Deadline deadline, int wake_fd) = 0;

  virtual Status Set(const std::string& key, const std::string& value, Deadline deadline) = 0;
  virtual Result<std::optional<std::string>> Get(const std::string& key, Deadline deadline) = 0;
  virtual Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) = 0;
  virtual Status Wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  virtual Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired, Deadline deadline) = 0;
  virtual Result<bool> Delete(const std::string& key, Deadline deadline) = 0;
};

namespace rendezvous_internal {

// The etcd backend (etcd_backend.cc) for an `etcd://` address.
Result<std::unique_ptr<RendezvousClient::Backend>> ConnectEtcd(RendezvousClientOptions options,
                                                               Deadline deadline);

}  // namespace rendezvous_internal
}  // namespace drover

#endif  // DROVER_SRC_RENDEZVOUS_CLIENT_BACKEND_H_

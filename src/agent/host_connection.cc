// HostConnection: a host's nodes on one rendezvous connection
// (drover/agent.h, docs/protocol.md "Host connections").
//
// Threads: each node's agent calls its HostLink from its own threads. One
// thread of the connection's (Serve) makes every read on it: it registers
// the nodes once they have all arrived, then waits for the server's STOPs
// and answers flushes (the QUERY_STATE round trip after a node's report or
// leave), so no node's call reads and an idle host wakes for nothing but
// its one heartbeat. Writes (reports, leaves, heartbeats) go out from the
// callers' threads: the client seals and writes whole frames under a lock.
// A node's agent waits on an eventfd of its own, written once its STOP came
// (or every node's, or the connection was lost) and never read.

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "agent/node_link.h"
#include "common/mutex.h"
#include "os/fd_io.h"
#include "os/unique_fd.h"

namespace drover {
namespace {

using Instruction = RendezvousClient::Instruction;

// A node that reached registration waits this long past its own deadline
// for the host's registration, which runs to the latest node's deadline.
constexpr Milliseconds kRegisterSlack{5'000};
// One flush's QUERY_STATE round trip, at most.
constexpr Milliseconds kFlushTimeout{5'000};

// A connection opened with a node credential carries the host's nodes when
// it holds each one's credential: the one it opens with and the others.
Status CheckNodeCredentials(const RendezvousClientOptions& options,
                            const std::set<std::string>& executor_ids) {
  if (executor_ids.count(options.credential.executor_id) == 0) {
    return Status::InvalidArgument(
        "a host connection is opened with one of its nodes' credentials, not " +
        options.credential.Describe());
  }
  std::set<std::string> held;
  held.insert(options.credential.executor_id);
  for (const Credential& credential : options.host_credentials) {
    if (credential.kind == Credential::Kind::kNode) held.insert(credential.executor_id);
  }
  for (const std::string& id : executor_ids) {
    if (held.count(id) == 0) {
      return Status::InvalidArgument(
          "a host connection opened with " + options.credential.Describe() +
          " needs every node's credential; executor " + id + "'s is missing");
    }
  }
  return Status::Ok();
}

}  // namespace

class HostConnection::Impl {
 public:
  Impl(RendezvousClientOptions options, std::vector<std::string> executor_ids)
      : options_(std::move(options)),
        executor_ids_(std::move(executor_ids)),
        wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        nodes_(executor_ids_.size()),
        payloads_(executor_ids_.size()) {
    for (size_t i = 0; i < executor_ids_.size(); ++i) {
      stop_fds_.emplace_back(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    }
  }

  ~Impl() {
    {
      MutexLock lock(mu_);
      quitting_ = true;
    }
    cv_.notify_all();
    os::SignalEventFd(wake_fd_.get());
    if (reader_.joinable()) reader_.join();
    client_.reset();  // joins its heartbeat thread
  }

  Status Start() {
    bool made = wake_fd_.valid();
    for (const os::UniqueFd& fd : stop_fds_) made = made && fd.valid();
    if (!made) return Status::IoError(std::string("eventfd: ") + std::strerror(errno));
    reader_ = std::thread([this] { Serve(); });
    return Status::Ok();
  }

  Result<std::unique_ptr<NodeLink>> Link(const std::string& executor_id);

  Result<FormedCluster> Register(size_t i, const NodeInfo& node, Deadline deadline);
  void StartHeartbeats(size_t i, Milliseconds interval, std::function<HeartbeatPayload()> payload);
  Result<Instruction> WaitForInstruction(size_t i, Deadline deadline, int wake_fd);
  Status ReportError(size_t i, const std::string& message,
                     const std::vector<std::string>& last_lines, Deadline deadline);
  Status Leave(size_t i, Deadline deadline);
  // The node's agent is done with its link: a node that never arrived no
  // longer holds up the others' registration; its payload goes.
  void Depart(size_t i);

 private:
  enum class Stage { kPending, kArrived, kDeparted };
  struct Node {
    Stage stage = Stage::kPending;
    bool linked = false;
    NodeInfo info;
    Deadline deadline;
    std::optional<Result<FormedCluster>> formed;  // once the host registered
    bool stopped = false;                         // its own STOP came
  };

  // The reader thread.
  void Serve();
  // Waits for every node to arrive or depart, then registers the arrived
  // ones; false when nothing is left to serve.
  bool RegisterNodes();
  void Lose(const Status& status);
  void Stop(const std::string& executor_id);
  // Waits until the server has handled what this thread sent before.
  Status Flush(Deadline deadline);
  // The client once the host registered; else why there is none.
  Result<RendezvousClient*> Client();
  std::vector<NodeHeartbeat> Payloads();
  std::string PendingNodes() REQUIRES(mu_);

  const RendezvousClientOptions options_;
  const std::vector<std::string> executor_ids_;  // nodes_'s, in order
  // Set by the reader (under mu_) before any node learns the registration
  // succeeded; not replaced after, so the reader uses it without the lock.
  std::unique_ptr<RendezvousClient> client_;
  os::UniqueFd wake_fd_;                // wakes the reader: a flush, or quitting
  std::vector<os::UniqueFd> stop_fds_;  // a node's: written once it must stop
  std::thread reader_;

  Mutex mu_;
  std::condition_variable_any cv_;
  std::vector<Node> nodes_ GUARDED_BY(mu_);
  bool quitting_ GUARDED_BY(mu_) = false;
  bool all_stopped_ GUARDED_BY(mu_) = false;
  Status lost_ GUARDED_BY(mu_);  // OK while the connection is usable
  uint64_t flushes_asked_ GUARDED_BY(mu_) = 0;
  uint64_t flushes_done_ GUARDED_BY(mu_) = 0;
  Status flush_status_ GUARDED_BY(mu_);

  Mutex heartbeat_mu_;  // the client's StartHostHeartbeats: one caller at a time
  Mutex payload_mu_;
  std::vector<std::function<HeartbeatPayload()>> payloads_ GUARDED_BY(payload_mu_);
};

namespace {

class HostLink final : public NodeLink {
 public:
  HostLink(HostConnection::Impl& host, size_t index) : host_(host), index_(index) {}
  ~HostLink() override { host_.Depart(index_); }

  Result<FormedCluster> Register(const NodeInfo& node, Deadline deadline) override {
    return host_.Register(index_, node, deadline);
  }
  void StartHeartbeats(Milliseconds interval, std::function<HeartbeatPayload()> payload) override {
    host_.StartHeartbeats(index_, interval, std::move(payload));
  }
  Result<Instruction> WaitForInstruction(Deadline deadline, int wake_fd) override {
    return host_.WaitForInstruction(index_, deadline, wake_fd);
  }
  Status ReportError(const std::string& message, const std::vector<std::string>& last_lines,
                     Deadline deadline) override {
    return host_.ReportError(index_, message, last_lines, deadline);
  }
  Status Leave(Deadline deadline) override { return host_.Leave(index_, deadline); }

 private:
  HostConnection::Impl& host_;
  const size_t index_;
};

}  // namespace

Result<std::unique_ptr<NodeLink>> HostConnection::Impl::Link(const std::string& executor_id) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (executor_ids_[i] != executor_id) continue;
    if (nodes_[i].linked || nodes_[i].stage != Stage::kPending) {
      return Status::InvalidArgument("executor " + executor_id +
                                     " already has its place on the host's connection");
    }
    nodes_[i].linked = true;
    return std::unique_ptr<NodeLink>(std::make_unique<HostLink>(*this, i));
  }
  return Status::InvalidArgument("the host's connection was not made for executor " + executor_id);
}

std::string HostConnection::Impl::PendingNodes() {
  std::string pending;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].stage != Stage::kPending) continue;
    pending += (pending.empty() ? "" : ", ") + executor_ids_[i];
  }
  return pending;
}

Result<FormedCluster> HostConnection::Impl::Register(size_t i, const NodeInfo& node,
                                                     Deadline deadline) {
  MutexLock lock(mu_);
  nodes_[i].stage = Stage::kArrived;
  nodes_[i].info = node;
  nodes_[i].deadline = deadline;
  cv_.notify_all();
  cv_.wait_until(mu_, deadline + kRegisterSlack, [&] {
    mu_.AssertHeld();
    return nodes_[i].formed.has_value() || quitting_;
  });
  if (nodes_[i].formed) return *std::exchange(nodes_[i].formed, std::nullopt);
  std::string pending = PendingNodes();
  if (!pending.empty()) {
    return Status::DeadlineExceeded(
        "timed out waiting for this host's other nodes to be ready to register (executors " +
        pending + ")");
  }
  return Status::DeadlineExceeded("timed out waiting for the host's registration with " +
                                  options_.address);
}

bool HostConnection::Impl::RegisterNodes() {
  std::vector<NodeInfo> arrived;
  std::vector<size_t> which;
  Deadline deadline = Clock::time_point::min();
  {
    MutexLock lock(mu_);
    cv_.wait(mu_, [&] {
      mu_.AssertHeld();
      return quitting_ || PendingNodes().empty();
    });
    if (quitting_) return false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].stage != Stage::kArrived) continue;
      arrived.push_back(nodes_[i].info);
      which.push_back(i);
      deadline = std::max(deadline, nodes_[i].deadline);
    }
  }
  if (arrived.empty()) return false;
  Result<std::vector<FormedCluster>> formed = Status::Unavailable("not connected");
  Result<std::unique_ptr<RendezvousClient>> client = RendezvousClient::Connect(options_, deadline);
  if (client.ok()) {
    formed = (*client)->RegisterHost(arrived, deadline);
  } else {
    formed = client.status();
  }
  {
    MutexLock lock(mu_);
    for (size_t k = 0; k < which.size(); ++k) {
      nodes_[which[k]].formed = formed.ok() ? Result<FormedCluster>(std::move((*formed)[k]))
                                            : Result<FormedCluster>(formed.status());
    }
    if (formed.ok()) {
      client_ = std::move(client).value();
    } else {
      lost_ = formed.status();
    }
  }
  cv_.notify_all();
  return formed.ok();
}

void HostConnection::Impl::Serve() {
  if (!RegisterNodes()) return;
  // Until every node is stopped or the connection is lost, the reader
  // waits on the connection (and wake_fd_); after, on wake_fd_ alone.
  bool reading = true;
  uint64_t flushed = 0;
  for (;;) {
    if (reading) {
      Result<Instruction> told =
          client_->WaitForInstruction(Clock::time_point::max(), wake_fd_.get());
      if (!told.ok()) {
        Lose(told.status());
        reading = false;
      } else if (told->kind == Instruction::Kind::kStop) {
        Stop(told->executor_id);
        reading = !told->executor_id.empty();
        continue;
      } else if (told->kind == Instruction::Kind::kReform) {
        continue;  // elastic runs only, which take no host connection
      }
    } else {
      pollfd wake{wake_fd_.get(), POLLIN, 0};
      if (::poll(&wake, 1, -1) < 0 && errno != EINTR) return;
    }
    os::DrainEventFd(wake_fd_.get());
    uint64_t asked;
    {
      MutexLock lock(mu_);
      if (quitting_) return;
      asked = flushes_asked_;
    }
    if (asked == flushed) continue;
    Status status = client_->QueryState(Clock::now() + kFlushTimeout).status();
    flushed = asked;
    {
      MutexLock lock(mu_);
      flushes_done_ = asked;
      flush_status_ = status;
    }
    cv_.notify_all();
  }
}

void HostConnection::Impl::Lose(const Status& status) {
  {
    MutexLock lock(mu_);
    if (lost_.ok()) lost_ = status;
  }
  for (const os::UniqueFd& fd : stop_fds_) os::SignalEventFd(fd.get());
  cv_.notify_all();
}

void HostConnection::Impl::Stop(const std::string& executor_id) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!executor_id.empty() && executor_ids_[i] != executor_id) continue;
    nodes_[i].stopped = true;
    os::SignalEventFd(stop_fds_[i].get());
  }
  if (executor_id.empty()) all_stopped_ = true;
}

Status HostConnection::Impl::Flush(Deadline deadline) {
  MutexLock lock(mu_);
  if (!lost_.ok()) return lost_;
  const uint64_t ticket = ++flushes_asked_;
  os::SignalEventFd(wake_fd_.get());
  cv_.wait_until(mu_, deadline, [&] {
    mu_.AssertHeld();
    return flushes_done_ >= ticket || !lost_.ok() || quitting_;
  });
  if (flushes_done_ >= ticket) return flush_status_;
  if (!lost_.ok()) return lost_;
  return Status::DeadlineExceeded("timed out waiting for rendezvous server " + options_.address +
                                  " to confirm it had the message");
}

Result<RendezvousClient*> HostConnection::Impl::Client() {
  MutexLock lock(mu_);
  if (client_) return client_.get();
  if (!lost_.ok()) return lost_;
  return Status::FailedPrecondition("the host's nodes have not registered");
}

void HostConnection::Impl::StartHeartbeats(size_t i, Milliseconds interval,
                                           std::function<HeartbeatPayload()> payload) {
  {
    MutexLock lock(payload_mu_);
    payloads_[i] = std::move(payload);
  }
  Result<RendezvousClient*> client = Client();
  if (!client.ok()) return;  // a node's calls come after its Register succeeded
  MutexLock lock(heartbeat_mu_);
  (void)(*client)->StartHostHeartbeats(interval, [this] { return Payloads(); });
}

std::vector<NodeHeartbeat> HostConnection::Impl::Payloads() {
  std::vector<NodeHeartbeat> heartbeats;
  MutexLock lock(payload_mu_);
  for (size_t i = 0; i < payloads_.size(); ++i) {
    if (!payloads_[i]) continue;
    heartbeats.push_back(NodeHeartbeat{executor_ids_[i], payloads_[i]()});
  }
  return heartbeats;
}

Result<Instruction> HostConnection::Impl::WaitForInstruction(size_t i, Deadline deadline,
                                                             int wake_fd) {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (nodes_[i].stopped || all_stopped_) return Instruction{Instruction::Kind::kStop, 0, ""};
      if (!lost_.ok()) return lost_;
    }
    pollfd fds[2] = {{stop_fds_[i].get(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int ready = ::poll(fds, wake_fd >= 0 ? 2 : 1, os::PollTimeoutMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0 && fds[0].revents != 0) continue;  // the state above says why
    if (ready > 0) return Instruction{};             // wake_fd
    if (ready == 0 && os::PollTimeoutMs(deadline) == 0) return Instruction{};
  }
}

Status HostConnection::Impl::ReportError(size_t i, const std::string& message,
                                         const std::vector<std::string>& last_lines,
                                         Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(RendezvousClient * client, Client());
  DROVER_RETURN_IF_ERROR(client->ReportError(executor_ids_[i], message, last_lines));
  return Flush(deadline);
}

Status HostConnection::Impl::Leave(size_t i, Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(RendezvousClient * client, Client());
  DROVER_RETURN_IF_ERROR(client->LeaveNode(executor_ids_[i]));
  return Flush(deadline);
}

void HostConnection::Impl::Depart(size_t i) {
  {
    MutexLock lock(payload_mu_);
    payloads_[i] = nullptr;
  }
  {
    MutexLock lock(mu_);
    if (nodes_[i].stage == Stage::kPending) nodes_[i].stage = Stage::kDeparted;
  }
  cv_.notify_all();
}

Result<std::shared_ptr<HostConnection>> HostConnection::Create(
    RendezvousClientOptions options, std::vector<std::string> executor_ids) {
  if (options.address.rfind("etcd://", 0) == 0) {
    return Status::InvalidArgument(
        "a host connection is for a driver's HOST:PORT rendezvous; through etcd each node "
        "registers itself");
  }
  if (options.credential.kind == Credential::Kind::kStatus) {
    return Status::InvalidArgument(
        "a host connection needs the cluster token or its nodes' credentials, not the status key");
  }
  if (executor_ids.empty()) return Status::InvalidArgument("a host connection carries some node");
  std::set<std::string> seen;
  for (const std::string& id : executor_ids) {
    if (!seen.insert(id).second) {
      return Status::InvalidArgument("executor " + id + " is twice among the host's nodes");
    }
  }
  if (options.credential.kind == Credential::Kind::kNode) {
    DROVER_RETURN_IF_ERROR(CheckNodeCredentials(options, seen));
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(executor_ids));
  DROVER_RETURN_IF_ERROR(impl->Start());
  return std::shared_ptr<HostConnection>(new HostConnection(std::move(impl)));
}

HostConnection::HostConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostConnection::~HostConnection() = default;

Result<std::unique_ptr<NodeLink>> LinkThroughHost(HostConnection& host,
                                                  const std::string& executor_id) {
  return host.impl().Link(executor_id);
}

}  // namespace drover

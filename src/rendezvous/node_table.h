// NodeTable: the cluster's members as the rendezvous server keeps them, and
// the phase the cluster is in (reserving, formed, stopped). Before the
// barrier it holds the registrations in arrival order; AssignSlots puts them
// in slot order and gives each its role (docs/protocol.md, "Messages"); after
// it, each node's liveness and what it last reported. The barrier, liveness
// and control parts share it. It knows connections only by id
// (NodeRecord::connection): the server looks them up.
//
// A plain table, called only on the server's event loop.

#ifndef DROVER_SRC_RENDEZVOUS_NODE_TABLE_H_
#define DROVER_SRC_RENDEZVOUS_NODE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "drover/rendezvous.h"

namespace drover::rendezvous_internal {

// What a node's heartbeats last said beyond being alive. Most nodes of a
// large cluster report none, so it lives apart from their records (about
// 110 bytes each).
struct HeartbeatReport {
  std::optional<FeedProgress> feed;
  std::vector<MetricValue> metrics;
};

struct NodeRecord {
  NodeInfo info;
  uint64_t sequence = 0;          // registration order
  uint32_t slot = 0;              // the node's index in slot order, once formed
  uint64_t connection = 0;        // the Peer's id; 0: none (closed)
  Clock::time_point last_seen{};  // registration, then last heartbeat
  bool alive = true;
  bool left = false;  // said LEAVE: finished, not dead
  bool stop_sent = false;
  bool quiet = false;  // the last heartbeat said Heartbeat.quiet
  std::string error;
  std::vector<std::string> last_log_lines;
  int32_t program_pid = 0;                  // from the last heartbeat
  std::unique_ptr<HeartbeatReport> report;  // once a heartbeat had feed progress or metrics
};

enum class Phase { kReserving, kFormed, kStopped };

// Whether executor `a` takes an earlier slot than `b` in the slot order
// (integer ids first, in numeric order, then the others in string order;
// ties by the text): the order every formed cluster lists its nodes in.
bool ExecutorIdBefore(const std::string& a, const std::string& b);

class NodeTable {
 public:
  explicit NodeTable(ClusterTemplate cluster) : cluster_(std::move(cluster)) { Reserve(); }

  Phase phase() const { return phase_; }
  // Why the phase is kStopped.
  const std::string& stop_reason() const { return stop_reason_; }
  void set_formed() { phase_ = Phase::kFormed; }
  // Enters kStopped for `reason`, unless already stopped (the first reason
  // stays).
  void Stop(const std::string& reason);

  // Slots the template has.
  int expected() const { return cluster_.num_nodes; }
  // Elastic rounds: forgets every node and reserves again for `cluster`.
  void Reset(ClusterTemplate cluster);
  // Elastic rounds, while reserving: the template's node count becomes
  // `num_nodes` (the extra nodes are workers).
  void SetExpected(int num_nodes) { cluster_.num_nodes = num_nodes; }
  const ClusterTemplate& cluster() const { return cluster_; }
  size_t size() const { return nodes_.size(); }
  // Before the barrier in registration order, after it in slot order.
  std::vector<NodeRecord>& nodes() { return nodes_; }
  const std::vector<NodeRecord>& nodes() const { return nodes_; }
  NodeRecord* Find(const std::string& executor_id);

  // Before the barrier: registers `info` (its role cleared) on connection
  // `connection`. An executor id already registered is a retried task: its
  // entry is replaced in place and takes the next sequence number.
  NodeRecord& Register(NodeInfo info, uint64_t connection, Clock::time_point now);
  // Before the barrier: forgets `executor_id`'s registration, if any.
  void Remove(const std::string& executor_id);

  // The barrier: puts the nodes in slot order and gives each its (job,
  // index) from the template, and `now` as its last sign of life. Integer
  // executor ids first, in numeric order, then the others in string order;
  // equal keys ("01" and "1") in registration order.
  void AssignSlots(Clock::time_point now);

  // The registered executor ids in the order they would take the slots
  // ("01" before "1"), and the slots after them ("worker:2"): what a
  // reservation timeout lists.
  std::vector<std::string> RegisteredInSlotOrder() const;
  std::vector<std::string> MissingSlots() const;

  // "executor 3", "executor 3 (worker:2)".
  static std::string Describe(const NodeRecord& node);
  // "3 of 4 nodes registered (executors 0, 1, 3)": the ids only while
  // reserving.
  std::string DescribeRegistrations() const;
  // Every node's state; heartbeat ages as of `now`.
  ClusterState State(Clock::time_point now) const;

 private:
  // Room for the template's nodes up front: growing a table of 100,000
  // records step by step moves each several times, into fresh pages.
  void Reserve();

  ClusterTemplate cluster_;
  Phase phase_ = Phase::kReserving;
  std::string stop_reason_;
  std::vector<NodeRecord> nodes_;
  std::unordered_map<std::string, size_t> index_;  // executor id -> nodes_ index
  uint64_t next_sequence_ = 1;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_NODE_TABLE_H_

#include "rendezvous/node_table.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "rendezvous/log_text.h"

namespace drover::rendezvous_internal {
namespace {

// An executor id that is a plain non-negative decimal integer.
std::optional<uint64_t> ParseExecutorNumber(const std::string& id) {
  if (id.empty()) return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
  if (ec != std::errc() || end != id.data() + id.size()) return std::nullopt;
  return value;
}

// Where an executor id goes in the slot order.
struct SlotKey {
  std::optional<uint64_t> number;
  const std::string* id;
};

SlotKey KeyOf(const std::string& id) {
  return SlotKey{ParseExecutorNumber(id), &id};
}

// Negative, zero or positive as `a` goes before, with or after `b`: integer
// ids first, in numeric order, then the others in string order. (Comparing
// mixed ids pairwise, numbers as numbers, else as strings, is not a strict
// weak order, so the integer ids form their own group.) Equal numbers ("01"
// and "1") compare equal: the caller breaks the tie.
int CompareSlotKeys(const SlotKey& a, const SlotKey& b) {
  if (a.number.has_value() != b.number.has_value()) return a.number.has_value() ? -1 : 1;
  if (a.number.has_value()) {
    if (*a.number == *b.number) return 0;
    return *a.number < *b.number ? -1 : 1;
  }
  return a.id->compare(*b.id);
}

}  // namespace

bool ExecutorIdBefore(const std::string& a, const std::string& b) {
  int c = CompareSlotKeys(KeyOf(a), KeyOf(b));
  return c != 0 ? c < 0 : a < b;
}

void NodeTable::Stop(const std::string& reason) {
  if (phase_ == Phase::kStopped) return;
  phase_ = Phase::kStopped;
  stop_reason_ = reason;
}

void NodeTable::Reset(ClusterTemplate cluster) {
  cluster_ = std::move(cluster);
  phase_ = Phase::kReserving;
  stop_reason_.clear();
  nodes_.clear();
  index_.clear();
  Reserve();
}

void NodeTable::Reserve() {
  // Bounded: a template's count is the user's, registrations are not yet.
  constexpr size_t kMaxReserved = 1'000'000;
  const size_t expected =
      std::min<size_t>(static_cast<size_t>(std::max(cluster_.num_nodes, 0)), kMaxReserved);
  nodes_.reserve(expected);
  index_.reserve(expected);
}

NodeRecord* NodeTable::Find(const std::string& executor_id) {
  auto it = index_.find(executor_id);
  return it == index_.end() ? nullptr : &nodes_[it->second];
}

NodeRecord& NodeTable::Register(NodeInfo info, uint64_t connection, Clock::time_point now) {
  // The role is the server's to assign.
  info.job_name.clear();
  info.task_index = -1;
  NodeRecord* node = Find(info.executor_id);
  if (node == nullptr) {
    index_.emplace(info.executor_id, nodes_.size());
    node = &nodes_.emplace_back();
  }
  node->info = std::move(info);
  node->sequence = next_sequence_++;
  node->connection = connection;
  node->last_seen = now;
  return *node;
}

void NodeTable::Remove(const std::string& executor_id) {
  auto it = index_.find(executor_id);
  if (it == index_.end()) return;
  const size_t removed = it->second;
  index_.erase(it);
  nodes_.erase(nodes_.begin() + static_cast<ptrdiff_t>(removed));
  // The records after it moved down one; the index is otherwise right, so
  // no rebuild (a node dropped from a large reservation cost one, with N
  // allocations).
  for (size_t i = removed; i < nodes_.size(); ++i) index_[nodes_[i].info.executor_id] = i;
}

void NodeTable::AssignSlots(Clock::time_point now) {
  struct Entry {
    SlotKey key;
    uint64_t sequence;
    size_t index;
  };
  std::vector<Entry> order;
  order.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    order.push_back({KeyOf(nodes_[i].info.executor_id), nodes_[i].sequence, i});
  }
  std::sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
    int c = CompareSlotKeys(a.key, b.key);
    return c != 0 ? c < 0 : a.sequence < b.sequence;
  });
  // In place, one cycle of the permutation at a time: a second table would
  // fault in as many fresh pages as the first holds.
  std::vector<bool> placed(nodes_.size(), false);
  for (size_t start = 0; start < nodes_.size(); ++start) {
    if (placed[start]) continue;
    NodeRecord carried = std::move(nodes_[start]);
    for (size_t slot = start;;) {
      placed[slot] = true;
      const size_t from = order[slot].index;
      if (from == start) {
        nodes_[slot] = std::move(carried);
        break;
      }
      nodes_[slot] = std::move(nodes_[from]);
      slot = from;
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i) index_.find(nodes_[i].info.executor_id)->second = i;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    auto [job, index] = cluster_.Slot(static_cast<int>(i));
    nodes_[i].info.job_name = job;
    nodes_[i].info.task_index = index;
    nodes_[i].slot = static_cast<uint32_t>(i);
    nodes_[i].last_seen = now;
  }
}

std::vector<std::string> NodeTable::RegisteredInSlotOrder() const {
  std::vector<SlotKey> keys;
  keys.reserve(nodes_.size());
  for (const NodeRecord& node : nodes_) keys.push_back(KeyOf(node.info.executor_id));
  std::sort(keys.begin(), keys.end(), [](const SlotKey& a, const SlotKey& b) {
    int c = CompareSlotKeys(a, b);
    return c != 0 ? c < 0 : *a.id < *b.id;
  });
  std::vector<std::string> ids;
  ids.reserve(keys.size());
  for (const SlotKey& key : keys) ids.push_back(*key.id);
  return ids;
}

std::vector<std::string> NodeTable::MissingSlots() const {
  std::vector<std::string> missing;
  for (int i = static_cast<int>(nodes_.size()); i < cluster_.num_nodes; ++i) {
    auto [job, index] = cluster_.Slot(i);
    missing.push_back(job + ":" + std::to_string(index));
  }
  return missing;
}

std::string NodeTable::Describe(const NodeRecord& node) {
  std::string text = "executor " + node.info.executor_id;
  if (!node.info.job_name.empty()) {
    text += " (" + node.info.job_name + ":" + std::to_string(node.info.task_index) + ")";
  }
  return text;
}

std::string NodeTable::DescribeRegistrations() const {
  std::vector<std::string> ids;
  for (const NodeRecord& node : nodes_) ids.push_back(node.info.executor_id);
  std::string text = std::to_string(nodes_.size()) + " of " + std::to_string(cluster_.num_nodes) +
                     " nodes registered";
  if (!ids.empty() && phase_ == Phase::kReserving) text += " (executors " + JoinLimited(ids) + ")";
  return text;
}

ClusterState NodeTable::State(Clock::time_point now) const {
  ClusterState state;
  switch (phase_) {
    case Phase::kReserving:
      state.phase = "reserving";
      break;
    case Phase::kFormed:
      state.phase = "formed";
      break;
    case Phase::kStopped:
      state.phase = "stopped";
      break;
  }
  state.registered = static_cast<int>(nodes_.size());
  state.expected = cluster_.num_nodes;
  state.nodes.reserve(nodes_.size());
  for (const NodeRecord& node : nodes_) {
    NodeStatus status;
    status.node = node.info;
    status.alive = node.alive;
    status.left = node.left;
    status.last_heartbeat_age = std::chrono::duration_cast<Milliseconds>(now - node.last_seen);
    status.error = node.error;
    status.last_log_lines = node.last_log_lines;
    status.program_pid = node.program_pid;
    if (node.report) {
      status.feed = node.report->feed;
      status.metrics = node.report->metrics;
    }
    state.nodes.push_back(std::move(status));
  }
  return state;
}

}  // namespace drover::rendezvous_internal

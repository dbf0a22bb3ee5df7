// KvStore: the key-value store for user programs (docs/protocol.md,
// KvRequest), with PyTorch TCPStore's semantics: SET, GET, ADD, WAIT,
// COMPARE_SET and DELETE, one handler each. A WAIT whose keys are not all
// there parks (a timer and an entry per key, no thread) until a write
// completes it or its deadline passes. The store is bounded
// (docs/security.md): keys, bytes (keys, values and parked WAITs' keys, each
// key kEntryOverhead more) and parked WAITs, per connection and in all; a
// request past a bound is answered RESOURCE_EXHAUSTED and changes nothing.
//
// Connections are ids; every reply, a woken WAIT's included, goes out
// through the Deliver callback. The store owns its data and its WAIT
// timers (on `io`). Called only on the server's event loop; Deliver may
// re-enter Forget (a reply that closes its connection).

#ifndef DROVER_SRC_RENDEZVOUS_KV_STORE_H_
#define DROVER_SRC_RENDEZVOUS_KV_STORE_H_

#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "drover.pb.h"
#include "drover/rendezvous.h"

namespace drover::rendezvous_internal {

struct KvLimits {
  size_t max_keys = 100'000;
  uint64_t max_bytes = uint64_t{256} << 20;
  size_t max_waits = 16'384;  // parked WAITs, all connections
  size_t max_waits_per_connection = 64;
};

class KvStore {
 public:
  // What the store charges a key for its bookkeeping, on top of its bytes
  // (and its value's), against max_bytes: the map node, the string
  // headers, a waiter's index entry.
  static constexpr uint64_t kEntryOverhead = 64;

  // Sends `reply` to connection `connection` (if it is still open).
  using Deliver = std::function<void(uint64_t connection, const wire::KvReply& reply)>;

  // `io` must outlive the store.
  KvStore(KvLimits limits, asio::io_context& io, Deliver deliver)
      : limits_(limits), io_(io), deliver_(std::move(deliver)) {}

  // One KV_REQUEST from `connection`: checks the key and value sizes, then
  // runs the op's handler. Its reply goes through Deliver now, or for a
  // parked WAIT when it completes or times out.
  void Handle(uint64_t connection, const wire::KvRequest& request);
  // `connection` closed: its parked WAITs end without a reply.
  void Forget(uint64_t connection);
  // Shutdown: every parked WAIT ends without a reply; the data stays.
  void Clear();
  // Deletes every key starting with `prefix`; returns how many.
  size_t DeletePrefix(const std::string& prefix);

  // The value under `key`, if any.
  std::optional<std::string> Find(const std::string& key) const {
    auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }
  size_t keys() const { return data_.size(); }
  uint64_t bytes() const { return bytes_; }
  size_t parked_waits() const { return waiters_.size(); }

 private:
  struct Waiter {
    uint64_t connection = 0;
    uint64_t request_id = 0;
    std::vector<std::string> keys;
    uint64_t bytes = 0;  // charged to bytes_
    Milliseconds timeout{0};
    std::unique_ptr<asio::steady_timer> timer;
  };

  // Each handler gets `reply` with the request id set, fills it and
  // delivers it.
  void HandleSet(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply);
  void HandleGet(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply);
  void HandleAdd(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply);
  void HandleCompareSet(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply);
  void HandleDelete(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply);
  void HandleWait(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply);
  void Fail(uint64_t connection, wire::KvReply reply, wire::ErrorCode code, std::string message);

  // Stores `value` under `key` if the bounds allow; otherwise fills `reply`
  // with RESOURCE_EXHAUSTED naming the bound and `what`.
  bool Store(const std::string& key, std::string value, const std::string& what,
             wire::KvReply* reply);
  void Erase(std::map<std::string, std::string>::iterator it);
  // Completes the WAITs that `key` was the last missing key of.
  void Notify(const std::string& key);
  // Replies (unless the connection is gone) and forgets the waiter.
  void FinishWaiter(uint64_t waiter_id, bool timed_out, bool reply);
  std::vector<std::string> Missing(const std::vector<std::string>& keys) const;

  const KvLimits limits_;
  asio::io_context& io_;
  Deliver deliver_;
  std::map<std::string, std::string> data_;
  // Charged against max_bytes: stored keys and values and parked WAITs'
  // keys, kEntryOverhead more per key.
  uint64_t bytes_ = 0;
  uint64_t next_waiter_id_ = 1;
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::unordered_multimap<std::string, uint64_t> waiters_by_key_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> waiters_by_connection_;
};

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_KV_STORE_H_

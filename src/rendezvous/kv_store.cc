#include "rendezvous/kv_store.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "rendezvous/log_text.h"
#include "wire/frame.h"

namespace drover::rendezvous_internal {

using wire::kMaxKvKeyBytes;
using wire::kMaxKvValueBytes;

void KvStore::Handle(uint64_t connection, const wire::KvRequest& request) {
  wire::KvReply reply;
  reply.set_request_id(request.request_id());
  const std::string& key = request.key();
  bool keyed = request.op() != wire::KvRequest::WAIT;
  if (keyed && key.empty()) {
    return Fail(connection, std::move(reply), wire::MALFORMED,
                wire::KvRequest::Op_Name(request.op()) + " needs a key");
  }
  if (key.size() > kMaxKvKeyBytes) {
    return Fail(connection, std::move(reply), wire::MALFORMED,
                "key of " + std::to_string(key.size()) + " bytes is over the limit of " +
                    std::to_string(kMaxKvKeyBytes));
  }
  if (request.value().size() > kMaxKvValueBytes) {
    return Fail(connection, std::move(reply), wire::MALFORMED,
                "value of " + std::to_string(request.value().size()) + " bytes for key '" +
                    Printable(key) + "' is over the limit of " + std::to_string(kMaxKvValueBytes));
  }
  switch (request.op()) {
    case wire::KvRequest::SET:
      return HandleSet(connection, request, std::move(reply));
    case wire::KvRequest::GET:
      return HandleGet(connection, request, std::move(reply));
    case wire::KvRequest::ADD:
      return HandleAdd(connection, request, std::move(reply));
    case wire::KvRequest::COMPARE_SET:
      return HandleCompareSet(connection, request, std::move(reply));
    case wire::KvRequest::DELETE:
      return HandleDelete(connection, request, std::move(reply));
    case wire::KvRequest::WAIT:
      return HandleWait(connection, request, std::move(reply));
    default:
      return Fail(connection, std::move(reply), wire::MALFORMED,
                  "KV_REQUEST with unknown op " + std::to_string(static_cast<int>(request.op())));
  }
}

void KvStore::Fail(uint64_t connection, wire::KvReply reply, wire::ErrorCode code,
                   std::string message) {
  reply.set_code(code);
  reply.set_message(std::move(message));
  deliver_(connection, reply);
}

// The setter hears first, then the waiters it completes.
void KvStore::HandleSet(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply) {
  bool stored = Store(request.key(), request.value(), "SET", &reply);
  deliver_(connection, reply);
  if (stored) Notify(request.key());
}

void KvStore::HandleGet(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply) {
  auto it = data_.find(request.key());
  if (it != data_.end()) {
    reply.set_found(true);
    reply.set_value(it->second);
  } else {
    reply.set_code(wire::NOT_FOUND);
    reply.set_message("no key '" + Printable(request.key()) + "'");
  }
  deliver_(connection, reply);
}

void KvStore::HandleAdd(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply) {
  const std::string& key = request.key();
  int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return Fail(connection, std::move(reply), wire::MALFORMED,
                  "ADD to key '" + Printable(key) + "': its value '" + Printable(text) +
                      "' is not a decimal integer");
    }
  }
  int64_t result = 0;
  if (__builtin_add_overflow(current, request.delta(), &result)) {
    return Fail(connection, std::move(reply), wire::MALFORMED,
                "ADD to key '" + Printable(key) + "' overflows int64");
  }
  if (!Store(key, std::to_string(result), "ADD", &reply)) return deliver_(connection, reply);
  reply.set_found(true);
  reply.set_number(result);
  reply.set_value(std::to_string(result));
  deliver_(connection, reply);
  Notify(key);
}

void KvStore::HandleCompareSet(uint64_t connection, const wire::KvRequest& request,
                               wire::KvReply reply) {
  const std::string& key = request.key();
  auto it = data_.find(key);
  bool matches = it == data_.end() ? request.expected().empty() : it->second == request.expected();
  if (matches) {
    if (!Store(key, request.value(), "COMPARE_SET", &reply)) return deliver_(connection, reply);
    it = data_.find(key);
  }
  if (it != data_.end()) {
    reply.set_found(true);
    reply.set_value(it->second);
  }
  deliver_(connection, reply);
  if (matches) Notify(key);
}

void KvStore::HandleDelete(uint64_t connection, const wire::KvRequest& request,
                           wire::KvReply reply) {
  if (auto it = data_.find(request.key()); it != data_.end()) {
    Erase(it);
    reply.set_found(true);
  } else {
    reply.set_code(wire::NOT_FOUND);
    reply.set_message("no key '" + Printable(request.key()) + "'");
  }
  deliver_(connection, reply);
}

void KvStore::HandleWait(uint64_t connection, const wire::KvRequest& request, wire::KvReply reply) {
  if (request.keys().empty()) {
    return Fail(connection, std::move(reply), wire::MALFORMED, "WAIT needs at least one key");
  }
  Waiter waiter;
  waiter.connection = connection;
  waiter.request_id = request.request_id();
  for (const std::string& key : request.keys()) {
    if (key.empty() || key.size() > kMaxKvKeyBytes) {
      return Fail(connection, std::move(reply), wire::MALFORMED,
                  "WAIT key of " + std::to_string(key.size()) + " bytes: keys must be 1 to " +
                      std::to_string(kMaxKvKeyBytes) + " bytes");
    }
    waiter.keys.push_back(key);
  }
  if (Missing(waiter.keys).empty()) return deliver_(connection, reply);
  auto parked = waiters_by_connection_.find(connection);
  size_t parked_here = parked == waiters_by_connection_.end() ? 0 : parked->second.size();
  if (parked_here >= limits_.max_waits_per_connection) {
    return Fail(connection, std::move(reply), wire::RESOURCE_EXHAUSTED,
                "this connection has " + std::to_string(parked_here) +
                    " WAITs parked, its limit; WAIT refused");
  }
  if (waiters_.size() >= limits_.max_waits) {
    return Fail(
        connection, std::move(reply), wire::RESOURCE_EXHAUSTED,
        std::to_string(waiters_.size()) + " WAITs are parked, the server's limit; WAIT refused");
  }
  for (const std::string& key : waiter.keys) waiter.bytes += key.size() + kEntryOverhead;
  if (bytes_ + waiter.bytes > limits_.max_bytes) {
    return Fail(connection, std::move(reply), wire::RESOURCE_EXHAUSTED,
                "the key-value store is full: " + std::to_string(bytes_) + " of " +
                    std::to_string(limits_.max_bytes) + " bytes used; WAIT for " +
                    std::to_string(waiter.keys.size()) + " keys (" + std::to_string(waiter.bytes) +
                    " bytes) refused");
  }
  bytes_ += waiter.bytes;
  waiter.timeout =
      Milliseconds(std::min<uint64_t>(request.deadline_ms(), uint64_t{24} * 3600 * 1000 * 365));
  uint64_t waiter_id = next_waiter_id_++;
  waiter.timer = std::make_unique<asio::steady_timer>(io_);
  waiter.timer->expires_after(waiter.timeout);
  waiter.timer->async_wait([this, waiter_id](asio::error_code ec) {
    if (ec) return;
    FinishWaiter(waiter_id, /*timed_out=*/true, /*reply=*/true);
  });
  for (const std::string& key : waiter.keys) waiters_by_key_.emplace(key, waiter_id);
  waiters_by_connection_[connection].push_back(waiter_id);
  waiters_.emplace(waiter_id, std::move(waiter));
}

void KvStore::Forget(uint64_t connection) {
  auto it = waiters_by_connection_.find(connection);
  if (it == waiters_by_connection_.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  waiters_by_connection_.erase(it);
  for (uint64_t waiter_id : ids) FinishWaiter(waiter_id, /*timed_out=*/false, /*reply=*/false);
}

void KvStore::Clear() {
  for (auto& [id, waiter] : waiters_) {
    waiter.timer->cancel();
    bytes_ -= waiter.bytes;
  }
  waiters_.clear();
  waiters_by_key_.clear();
  waiters_by_connection_.clear();
}

size_t KvStore::DeletePrefix(const std::string& prefix) {
  size_t deleted = 0;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.starts_with(prefix);) {
    Erase(it++);
    ++deleted;
  }
  return deleted;
}

bool KvStore::Store(const std::string& key, std::string value, const std::string& what,
                    wire::KvReply* reply) {
  auto it = data_.find(key);
  const uint64_t now = it == data_.end() ? 0 : key.size() + it->second.size() + kEntryOverhead;
  const uint64_t after = key.size() + value.size() + kEntryOverhead;
  std::string refusal;
  if (it == data_.end() && data_.size() >= limits_.max_keys) {
    refusal = "the key-value store holds " + std::to_string(data_.size()) + " keys, its limit; " +
              what + " of new key '" + Printable(key) + "' refused";
  } else if (after > now && bytes_ - now + after > limits_.max_bytes) {
    refusal = "the key-value store is full: " + std::to_string(bytes_) + " of " +
              std::to_string(limits_.max_bytes) + " bytes used; " + what + " of '" +
              Printable(key) + "' (" + std::to_string(after) + " bytes) refused";
  }
  if (!refusal.empty()) {
    reply->set_code(wire::RESOURCE_EXHAUSTED);
    reply->set_message(std::move(refusal));
    return false;
  }
  bytes_ = bytes_ - now + after;
  if (it == data_.end()) {
    data_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return true;
}

void KvStore::Erase(std::map<std::string, std::string>::iterator it) {
  bytes_ -= it->first.size() + it->second.size() + kEntryOverhead;
  data_.erase(it);
}

std::vector<std::string> KvStore::Missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (data_.find(key) == data_.end()) missing.push_back(key);
  }
  return missing;
}

void KvStore::Notify(const std::string& key) {
  // Finishing a waiter delivers a reply, which may close a connection and
  // forget its waiters: collect first, look each up again.
  auto [begin, end] = waiters_by_key_.equal_range(key);
  std::vector<uint64_t> candidates;
  for (auto it = begin; it != end; ++it) candidates.push_back(it->second);
  for (uint64_t waiter_id : candidates) {
    auto it = waiters_.find(waiter_id);
    if (it != waiters_.end() && Missing(it->second.keys).empty()) {
      FinishWaiter(waiter_id, /*timed_out=*/false, /*reply=*/true);
    }
  }
}

void KvStore::FinishWaiter(uint64_t waiter_id, bool timed_out, bool reply) {
  auto it = waiters_.find(waiter_id);
  if (it == waiters_.end()) return;
  Waiter waiter = std::move(it->second);
  waiters_.erase(it);
  bytes_ -= waiter.bytes;
  waiter.timer->cancel();
  for (const std::string& key : waiter.keys) {
    auto [begin, end] = waiters_by_key_.equal_range(key);
    for (auto entry = begin; entry != end; ++entry) {
      if (entry->second == waiter_id) {
        waiters_by_key_.erase(entry);
        break;
      }
    }
  }
  if (auto parked = waiters_by_connection_.find(waiter.connection);
      parked != waiters_by_connection_.end()) {
    std::vector<uint64_t>& ids = parked->second;
    ids.erase(std::remove(ids.begin(), ids.end(), waiter_id), ids.end());
    if (ids.empty()) waiters_by_connection_.erase(parked);
  }
  if (!reply) return;
  wire::KvReply out;
  out.set_request_id(waiter.request_id);
  if (timed_out) {
    std::vector<std::string> missing;
    for (const std::string& key : Missing(waiter.keys))
      missing.push_back("'" + Printable(key) + "'");
    out.set_code(wire::TIMEOUT);
    out.set_message("WAIT timed out after " + std::to_string(waiter.timeout.count()) +
                    " ms; keys still missing: " + JoinLimited(missing));
  }
  deliver_(waiter.connection, out);
}

}  // namespace drover::rendezvous_internal

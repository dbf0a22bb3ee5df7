// An etcd v3 client over etcd's JSON gateway (/v3/kv/range, /v3/kv/txn,
// /v3/lease/*, /v3/watch), with the HTTP library drover already uses
// (cpp-httplib). docs/architecture.md says why the gateway and not gRPC.
//
// Every call is one HTTP request with its own deadline, against the member
// that answered last; a member that cannot be reached, or answers that it
// has no leader or timed out, is skipped for the next one. When no member
// answers, the call fails kUnavailable, naming every member and why:
//   "etcd: no quorum at 127.0.0.1:2379,127.0.0.1:2381 (etcdserver: request
//    timed out)".
// A member that took a write and then timed out may still apply it, and the
// call goes on to the next member: a write can land twice, and a Txn retried
// so can find its own first write (succeeded == false, the failure branch's
// ranges showing our own value). Make transactions check for that.
// Thread-safe: each call has a connection to itself while it runs (an idle
// keep-alive one when there is one; a watch always a new one), so a watch
// on one thread never holds up a put on another.

#ifndef DROVER_SRC_ETCD_ETCD_CLIENT_H_
#define DROVER_SRC_ETCD_ETCD_CLIENT_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "drover/status.h"

namespace drover::etcd {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Milliseconds = std::chrono::milliseconds;

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port", tried in this order
  // TLS (https to every member) when ca_file is set; cert_file and
  // key_file: a client certificate, when the members ask for one.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // etcd's own authentication (/v3/auth/authenticate); "" : none.
  std::string user;
  std::string password;
  // One request's limit; a call that tries several members may take up to
  // this much per member.
  Milliseconds request_timeout{5'000};
};

// `etcd://HOST:PORT[,HOST:PORT...]/PREFIX` -> the endpoints and the prefix
// ("/PREFIX", no trailing slash). kInvalidArgument naming what is wrong.
struct EtcdAddress {
  std::vector<std::string> endpoints;
  std::string prefix;
};
bool IsEtcdAddress(const std::string& address);
Result<EtcdAddress> ParseEtcdAddress(const std::string& address);

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when it was read
  std::vector<KeyValue> kvs;
  int64_t count = 0;  // how many keys the range holds (kvs may be empty: kCount*)
};

// One comparison of a transaction: the key's create/mod revision, version
// or value against `number`/`value`.
struct Compare {
  enum class Target { kCreateRevision, kModRevision, kVersion, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kCreateRevision;
  Result result = Result::kEqual;
  int64_t number = 0;
  std::string value;

  // The key does not exist (its create revision is 0).
  static Compare Absent(std::string key);
  static Compare ValueIs(std::string key, std::string value);
  static Compare ModRevisionIs(std::string key, int64_t revision);
};

// One operation of a transaction.
struct TxnOp {
  // kCount and kCountPrefix read only how many keys there are.
  enum class Kind { kPut, kDeleteKey, kDeletePrefix, kGet, kGetPrefix, kCount, kCountPrefix };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;
  int64_t lease = 0;

  static TxnOp Put(std::string key, std::string value, int64_t lease = 0);
  static TxnOp DeleteKey(std::string key);
  static TxnOp DeletePrefix(std::string prefix);
  static TxnOp Get(std::string key);
  static TxnOp GetPrefix(std::string prefix);
  static TxnOp Count(std::string key);
  static TxnOp CountPrefix(std::string prefix);
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  // The kGet/kGetPrefix operations' results, in the order of the branch
  // that ran (other operations leave no entry).
  std::vector<RangeResult> ranges;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // a kDelete's kv holds the key and mod_revision only
};

struct WatchResult {
  // The revision the caller has seen up to: pass revision + 1 to the next
  // watch. Unchanged when nothing happened before the deadline.
  int64_t revision = 0;
  std::vector<WatchEvent> events;
};

class EtcdClient {
 public:
  // Checks that one member answers (and logs in when a user is given);
  // kUnavailable naming the members when none does by `deadline`.
  static Result<std::unique_ptr<EtcdClient>> Connect(EtcdOptions options, Deadline deadline);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // "etcd at 127.0.0.1:2379,127.0.0.1:2381", for messages.
  std::string Describe() const;

  Result<RangeResult> Get(const std::string& key);
  Result<RangeResult> GetPrefix(const std::string& prefix);
  // Returns the revision of the write.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Returns how many keys were deleted.
  Result<int64_t> DeleteKey(const std::string& key);
  Result<int64_t> DeletePrefix(const std::string& prefix);
  Result<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<TxnOp>& success,
                        const std::vector<TxnOp>& failure = {});

  // A lease of `ttl` (whole seconds, at least 1); returns its id.
  Result<int64_t> GrantLease(std::chrono::seconds ttl);
  // Refreshes the lease; returns its remaining TTL in seconds, 0 when it has
  // expired or was revoked (its keys are gone).
  Result<int64_t> KeepAlive(int64_t lease);
  Status RevokeLease(int64_t lease);

  // Waits for changes to keys under `prefix` from revision `from` on, until
  // `deadline` or until `wake_fd` (>= 0) is readable (polled, never read,
  // looked at about once a second): returns the first batch of events, or
  // none then. `from` <= 0: from now on (an empty result's revision is then
  // the store's when the watch began). A `from` that etcd has compacted
  // away is kFailedPrecondition ("... compacted ...").
  Result<WatchResult> WatchPrefix(const std::string& prefix, int64_t from, Deadline deadline,
                                  int wake_fd = -1);

 private:
  class Impl;
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Runs `call` (returning a Result) until it succeeds, fails for a reason
// other than etcd being unavailable, or etcd stayed unavailable for
// `unavailable_for` (or past `deadline`), pausing `pause` between tries.
template <typename Call>
auto RetryWhileUnavailable(Call call, Deadline deadline, Milliseconds unavailable_for,
                           Milliseconds pause = Milliseconds(200)) -> decltype(call()) {
  const Deadline give_up = std::min(deadline, Clock::now() + unavailable_for);
  for (;;) {
    auto result = call();
    if (result.ok() || result.status().code() != Status::Code::kUnavailable ||
        Clock::now() + pause >= give_up) {
      return result;
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace drover::etcd

#endif  // DROVER_SRC_ETCD_ETCD_CLIENT_H_

// The etcd connection behind an etcd:// rendezvous address: what the etcd
// backend (etcd_backend.cc) and the feed's ledger in etcd
// (feed/etcd_feed_ledger.h) both talk through.

#ifndef DROVER_SRC_RENDEZVOUS_ETCD_CONNECT_H_
#define DROVER_SRC_RENDEZVOUS_ETCD_CONNECT_H_

#include <memory>
#include <string>

#include "drover/rendezvous.h"
#include "etcd/etcd_client.h"

namespace drover {

struct EtcdRunConnection {
  std::unique_ptr<etcd::EtcdClient> client;
  std::string prefix;  // the run's: "/RUN"
};

// The keys by which a `drover run` driver of an etcd run says it is there
// (docs/protocol.md): P/c/d/alive, under the driver's lease, and
// P/c/d/config, {"timeout_ms": T} when it was given --driver-timeout.
std::string EtcdDriverAliveKey(const std::string& prefix);
std::string EtcdDriverConfigKey(const std::string& prefix);

// Connects to `address` (etcd://HOST:PORT[,...]/RUN) with `options`' TLS,
// user and request limit. etcd not answering is bounded by
// options.unavailable_timeout as well as `deadline`.
Result<EtcdRunConnection> ConnectEtcdRun(const std::string& address, const EtcdRunOptions& options,
                                         Deadline deadline);

}  // namespace drover

#endif  // DROVER_SRC_RENDEZVOUS_ETCD_CONNECT_H_

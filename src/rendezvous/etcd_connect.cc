#include "rendezvous/etcd_connect.h"

#include <algorithm>

namespace drover {

std::string EtcdDriverAliveKey(const std::string& prefix) {
  return prefix + "/c/d/alive";
}

std::string EtcdDriverConfigKey(const std::string& prefix) {
  return prefix + "/c/d/config";
}

Result<EtcdRunConnection> ConnectEtcdRun(const std::string& address, const EtcdRunOptions& options,
                                         Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(etcd::EtcdAddress parsed, etcd::ParseEtcdAddress(address));
  etcd::EtcdOptions connection;
  connection.endpoints = parsed.endpoints;
  connection.ca_file = options.ca_file;
  connection.cert_file = options.cert_file;
  connection.key_file = options.key_file;
  connection.user = options.user;
  connection.password = options.password;
  connection.request_timeout = options.request_timeout;
  const Deadline reach_by = std::min(deadline, Clock::now() + options.unavailable_timeout);
  EtcdRunConnection run;
  DROVER_ASSIGN_OR_RETURN(run.client, etcd::EtcdClient::Connect(std::move(connection), reach_by));
  run.prefix = parsed.prefix;
  return run;
}

}  // namespace drover

// The flags that reach etcd (TLS and etcd's users), shared by `drover run`,
// `drover agent` and `drover status` for etcd:// rendezvous addresses.

#ifndef DROVER_CLI_ETCD_FLAGS_H_
#define DROVER_CLI_ETCD_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "drover/rendezvous.h"

namespace drover::cli {

struct EtcdFlags {
  std::string cacert;
  std::string cert;
  std::string key;
  std::string user;  // NAME or NAME:PASSWORD

  // Adds --etcd-cacert, --etcd-cert, --etcd-key and --etcd-user to `app`
  // (a command or an option group); `what` starts each help line.
  void AddTo(CLI::App* app, const std::string& what);
  // Copies them into *etcd; the password of --etcd-user NAME comes from
  // DROVER_ETCD_PASSWORD (not argv, which others on the host can read).
  void ApplyTo(EtcdRunOptions* etcd) const;
};

}  // namespace drover::cli

#endif  // DROVER_CLI_ETCD_FLAGS_H_

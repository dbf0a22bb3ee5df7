#include "cli/etcd_flags.h"

#include "drover/environment.h"

namespace drover::cli {

void EtcdFlags::AddTo(CLI::App* app, const std::string& what) {
  app->add_option("--etcd-cacert", cacert, what + "CA file: talk TLS to etcd");
  app->add_option("--etcd-cert", cert, what + "client certificate file for etcd");
  app->add_option("--etcd-key", key, what + "client key file for etcd");
  app->add_option("--etcd-user", user,
                  what + "etcd user, NAME or NAME:PASSWORD (else DROVER_ETCD_PASSWORD)");
}

void EtcdFlags::ApplyTo(EtcdRunOptions* etcd) const {
  etcd->ca_file = cacert;
  etcd->cert_file = cert;
  etcd->key_file = key;
  const size_t colon = user.find(':');
  etcd->user = user.substr(0, colon);
  if (colon != std::string::npos) {
    etcd->password = user.substr(colon + 1);
  } else if (auto password = ProcessEnvironment().Get("DROVER_ETCD_PASSWORD"); password) {
    etcd->password = *password;
  }
}

}  // namespace drover::cli

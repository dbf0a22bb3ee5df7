// EtcdTestServer: a real etcd for tests (Debian's /usr/bin/etcd), one member
// or a cluster of several, each a child process on free loopback ports with
// its data directory and log in a private temporary directory.
//
// Start() returns once every member says it is healthy (GET /health: a
// leader is elected). Kill() SIGKILLs one member, as a crash would. The
// destructor kills every member left, reaps it, and removes the directory.
// The members die with the thread that started them (PDEATHSIG, see
// os/subprocess.h), so a crashed test leaves none behind.
//
// Not thread-safe; use from the thread that started it.

#ifndef DROVER_SRC_ETCD_ETCD_TEST_SERVER_H_
#define DROVER_SRC_ETCD_ETCD_TEST_SERVER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "drover/status.h"
#include "os/subprocess.h"

namespace drover::etcd {

struct EtcdTestServerOptions {
  int members = 1;
  // Given to every member, after drover's flags ("--auth-token-ttl=1").
  std::vector<std::string> extra_args;
  // How long the members may take to elect a leader.
  std::chrono::seconds start_timeout{30};
};

class EtcdTestServer {
 public:
  // kNotFound when etcd is not installed; kUnavailable with the members'
  // logs when they do not come up.
  static Result<std::unique_ptr<EtcdTestServer>> Start(EtcdTestServerOptions options = {});
  ~EtcdTestServer();
  EtcdTestServer(const EtcdTestServer&) = delete;
  EtcdTestServer& operator=(const EtcdTestServer&) = delete;

  // The members' client addresses, "127.0.0.1:PORT", member i at [i].
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // "http://127.0.0.1:P1,http://127.0.0.1:P2", for etcdctl --endpoints.
  std::string ClientUrls() const;
  // The temporary directory holding the data directories and logs.
  const std::string& dir() const { return dir_; }

  // SIGKILLs member `member` and reaps it. kInvalidArgument for a member
  // that does not exist; a member already gone is OK.
  Status Kill(int member);

  // Runs etcdctl against the members still running, with `args` after
  // --endpoints; its output, or kInternal with its output and errors.
  Result<std::string> Etcdctl(const std::vector<std::string>& args) const;

  // The last lines of every member's log, for a failing test's message.
  std::string Logs() const;

 private:
  EtcdTestServer() = default;
  // Starts the members on fresh ports and waits for them; on error the
  // members it started are killed.
  Status TryStart(const EtcdTestServerOptions& options, int attempt);
  void StopAll();

  std::string dir_;
  std::vector<std::string> endpoints_;
  std::vector<std::string> logs_;
  std::vector<os::Subprocess> processes_;
  std::vector<bool> killed_;
};

}  // namespace drover::etcd

#endif  // DROVER_SRC_ETCD_ETCD_TEST_SERVER_H_

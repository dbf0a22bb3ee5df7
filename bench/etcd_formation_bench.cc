// Formation time through etcd against the built-in rendezvous server, in the
// same run: N simulated nodes, each a thread with its own RendezvousClient,
// connect and register; the time runs from the first connect to the last
// node holding the formed cluster.
//
// The built-in server runs in this process (as `drover run` runs it); etcd
// is a real etcd started here (Debian's /usr/bin/etcd, one member, or
// --members 3 for a raft group on loopback). Each etcd repetition uses a
// fresh run prefix. Both sides use the nodes' real client code: the etcd
// nodes grant a lease, check the run's config, write their alive key
// ("connect"), then register and wait for the round to form ("register").
//
// usage: etcd_formation_bench [--members M] [--repetitions R] [N ...]
// (default 8 100 1000; R 3, the median).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "drover/rendezvous.h"
#include "etcd/etcd_test_server.h"

namespace {

using drover::Clock;
using drover::Milliseconds;

int repetitions = 3;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

drover::NodeInfo Node(int i) {
  drover::NodeInfo node;
  node.executor_id = std::to_string(i);
  node.host = "127.0.0.1";
  node.ports = {static_cast<uint32_t>(20000 + i)};
  node.pid = 1000 + i;
  return node;
}

struct Timing {
  double total_ms = 0;
  double connect_ms = 0;  // the slowest node's connect
  bool ok = true;
};

// Runs `n` nodes through `options` (address set) and times them.
Timing FormNodes(int n, const drover::RendezvousClientOptions& base) {
  std::vector<std::thread> threads;
  std::vector<double> connected(static_cast<size_t>(n));
  std::atomic<bool> ok{true};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  // Clients live until every node formed: a node's end would count as a loss.
  std::vector<std::unique_ptr<drover::RendezvousClient>> clients(static_cast<size_t>(n));
  std::vector<Clock::time_point> done(static_cast<size_t>(n));
  Clock::time_point start;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      drover::RendezvousClientOptions options = base;
      options.name = std::to_string(i);
      ready++;
      while (!go.load()) std::this_thread::yield();
      const auto deadline = Clock::now() + std::chrono::seconds(600);
      auto client = drover::RendezvousClient::Connect(options, deadline);
      connected[static_cast<size_t>(i)] = Ms(Clock::now() - start);
      if (!client.ok()) {
        std::fprintf(stderr, "node %d: %s\n", i, client.status().message().c_str());
        ok = false;
        return;
      }
      auto formed = (*client)->Register(Node(i), deadline);
      done[static_cast<size_t>(i)] = Clock::now();
      if (!formed.ok()) {
        std::fprintf(stderr, "node %d: %s\n", i, formed.status().message().c_str());
        ok = false;
      }
      clients[static_cast<size_t>(i)] = std::move(client).value();
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  start = Clock::now();
  go = true;
  for (std::thread& thread : threads) thread.join();
  Timing timing;
  timing.ok = ok.load();
  timing.total_ms = Ms(*std::max_element(done.begin(), done.end()) - start);
  timing.connect_ms = *std::max_element(connected.begin(), connected.end());
  return timing;
}

Timing BuiltIn(int n) {
  auto token = drover::ClusterToken::Generate();
  drover::RendezvousServerOptions server_options;
  server_options.bind_address = "127.0.0.1";
  server_options.token = *token;
  server_options.cluster.num_nodes = n;
  server_options.log = [](const std::string&) {};  // the nodes' ends are no news here
  auto server = drover::RendezvousServer::Start(server_options);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().message().c_str());
    std::exit(1);
  }
  drover::RendezvousClientOptions options;
  options.address = "127.0.0.1:" + std::to_string((*server)->port());
  options.credential = drover::Credential::Cluster(*token);
  return FormNodes(n, options);
}

Timing ThroughEtcd(int n, const std::string& endpoints, int repetition) {
  drover::RendezvousClientOptions options;
  options.address = "etcd://" + endpoints + "/bench-" + std::to_string(n) + "-" +
                    std::to_string(repetition) + "-" + std::to_string(::getpid());
  options.etcd.cluster.num_nodes = n;
  options.etcd.lease_ttl = std::chrono::seconds(30);
  options.etcd.request_timeout = std::chrono::seconds(30);
  return FormNodes(n, options);
}

constexpr const char* kUsage =
    "usage: etcd_formation_bench [--members M] [--repetitions R] [N ...]";

// A positive count no larger than `most`, or exit 2 naming what was given.
int CountOrExit(const char* what, const std::string& text, long most) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || value <= 0 || value > most) {
    std::fprintf(stderr, "etcd_formation_bench: not %s: %s\n%s\n", what, text.c_str(), kUsage);
    std::exit(2);
  }
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  int members = 1;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(kUsage);
      return 0;
    }
    if (arg == "--members" && i + 1 < argc) {
      members = CountOrExit("a member count", argv[++i], 9);
    } else if (arg == "--repetitions" && i + 1 < argc) {
      repetitions = CountOrExit("a repetition count", argv[++i], 1000);
    } else {
      sizes.push_back(CountOrExit("a node count", arg, 1'000'000));
    }
  }
  if (sizes.empty()) sizes = {8, 100, 1000};
  // Each node holds a few descriptors (its connections to the server/etcd).
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);

  drover::etcd::EtcdTestServerOptions etcd_options;
  etcd_options.members = members;
  auto etcd = drover::etcd::EtcdTestServer::Start(etcd_options);
  if (!etcd.ok()) {
    std::fprintf(stderr, "etcd: %s\n", etcd.status().message().c_str());
    return 1;
  }
  std::string endpoints;
  for (const std::string& endpoint : (*etcd)->endpoints()) {
    endpoints += (endpoints.empty() ? "" : ",") + endpoint;
  }
  std::printf("etcd: %d member%s on loopback; median of %d\n", members, members == 1 ? "" : "s",
              repetitions);
  std::printf("%6s %14s %14s %12s %18s\n", "N", "built-in ms", "etcd ms", "x built-in",
              "etcd connect ms");
  for (int n : sizes) {
    std::vector<double> built_in, through_etcd, connect;
    for (int r = 0; r < repetitions; ++r) {
      Timing a = BuiltIn(n);
      Timing b = ThroughEtcd(n, endpoints, r);
      if (!a.ok || !b.ok) return 1;
      built_in.push_back(a.total_ms);
      through_etcd.push_back(b.total_ms);
      connect.push_back(b.connect_ms);
    }
    const double a = Median(built_in), b = Median(through_etcd);
    std::printf("%6d %14.1f %14.1f %12.1f %18.1f\n", n, a, b, b / a, Median(connect));
    std::fflush(stdout);
  }
  return 0;
}

// Barrier time of the rendezvous: from the first connect of N simulated nodes
// to the last node holding the whole cluster, for drover's RendezvousServer
// and for the naive reference (a plain epoll server that, once all N have
// registered, encodes the full, uncompressed cluster once and sends it to
// every node, with no handshake).
// Both servers run in a child process of their own, so the figure "server
// memory per registered node" is the child's RSS growth divided by N, once
// every node holds the cluster; "peak" is its peak RSS (VmHWM) over the same
// start, per node: what the server needed on the way.
//
// The simulated nodes are non-blocking sockets driven by one epoll thread in
// the parent: drover's nodes do the real handshake (HMAC), REGISTER, and read
// frames until CLUSTER, sealing what they send and checking every frame's MAC
// after AUTH_OK (protocol version 2) but CLUSTER's; the naive nodes send one
// frame and read the reply.
// A node "holds" the cluster when its last byte has arrived (decoding it, and
// hashing it to check its MAC, is each node's own work, done in parallel on
// real machines).
//
// A second reference, "own", is the same plain server sending each node only
// its own entry: the floor of any barrier on this host (connect, one request,
// one small reply), and the only reference past 10,000 nodes, where the naive
// server's N x N bytes (100,000 x 6 MB) cannot be sent.
//
// Past 20,000 nodes the simulated nodes connect from further loopback
// addresses (127.1.x.y) so the ephemeral ports do not run out; the
// descriptor limit is raised (as root) to fit both ends.
//
// With --nodes-per-host K, each connection is a host's agent carrying K
// nodes (RendezvousClient::RegisterHost: K REGISTER frames in one write, K
// CLUSTER frames back); the references answer each connection's one request
// with K own entries (own) or one node list (naive). N counts nodes, so
// 100,000 nodes at K = 8 are 12,500 connections, within the descriptor
// limit where 100,000 are not.
//
// With --node-credentials, drover's connections authenticate as the ssh and
// slurm engines' agents do: with the first node's credential, and each other
// node's REGISTER proves that node's (docs/protocol.md, "Host
// connections"); the server derives a key and checks a proof a node. The
// simulated nodes derive their keys before the clock starts (each agent's
// own work, on its own host); the proofs are made on the clock.
//
// usage: rendezvous_bench [--node-list auto|always|never] [--nodes-per-host K]
//                         [--node-credentials] [--reps R] [N ...]
//        (default auto, K = 1, 3 repetitions (the median), 8 1000 4000).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "drover/rendezvous.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace {

using drover::Clock;
namespace wire = drover::wire;

int g_repetitions = 3;
int g_nodes_per_host = 1;
bool g_node_credentials = false;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "rendezvous_bench: %s\n", what.c_str());
  std::exit(1);
}

// A field of /proc/PID/status in kB: "VmRSS" (resident now), "VmHWM" (its peak).
long StatusKilobytes(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return 0;
}

// User plus system CPU time of `pid` so far, in milliseconds.
double CpuMilliseconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start at ") ".
  size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int index = 3; fields >> field; ++index) {
    if (index == 14) utime = std::stoull(field);
    if (index == 15) {
      stime = std::stoull(field);
      break;
    }
  }
  return static_cast<double>(utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Enough descriptors for `count` connections and a margin, in this process
// and the server children it forks.
void RaiseFdLimit(int count) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t wanted = static_cast<rlim_t>(count) + 4096;
  if (limit.rlim_max < wanted) {
    rlimit raised{wanted, wanted};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
    Die("need " + std::to_string(wanted) + " descriptors, the hard limit is " +
        std::to_string(limit.rlim_max) + " (run as root, or raise it with ulimit -Hn)");
  }
  limit.rlim_cur = std::max(limit.rlim_cur, wanted);
  setrlimit(RLIMIT_NOFILE, &limit);
}

constexpr int kNodesPerSourceAddress = 20'000;

int ConnectNonBlocking(uint16_t port, int index) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket: " + std::string(std::strerror(errno)));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (int block = index / kNodesPerSourceAddress; block > 0) {
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | static_cast<uint32_t>(block));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) {
      Die("bind to 127.1.0." + std::to_string(block) + ": " + std::strerror(errno));
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 &&
      errno != EINPROGRESS) {
    Die("connect: " + std::string(std::strerror(errno)));
  }
  return fd;
}

bool WriteAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return false;
    }
  }
  return true;
}

// Simulated node i as it registers (8 to a host), and with `placed` as a
// reference server sends it back: with its role.
wire::NodeInfo SimulatedNode(size_t i, bool placed = false) {
  wire::NodeInfo node;
  node.set_executor_id(std::to_string(i));
  node.set_host("node" + std::to_string(i / 8) + ".cluster.example.com");
  node.add_ports(20000 + static_cast<uint32_t>(i % 8));
  node.set_pid(static_cast<int32_t>(100000 + i));
  if (placed) {
    node.set_job_name("worker");
    node.set_task_index(static_cast<int32_t>(i));
  }
  return node;
}

// One simulated node: reads frames header-first and only keeps small bodies.
// After AUTH_OK it seals what it sends and checks every frame's MAC and
// sequence as it streams in, as the real client does.
struct SimNode {
  enum class Phase { kChallenge, kAuthOk, kCluster, kNaiveReply, kDone };
  int fd = -1;
  Phase phase = Phase::kChallenge;
  std::string client_nonce;
  std::string server_nonce;
  std::string header;  // the current frame's header bytes
  std::string body;    // kept only for handshake frames
  uint64_t body_seen = 0;
  uint32_t body_length = 0;
  uint16_t type = 0;
  // The session, once authenticated.
  std::optional<wire::FrameSealer> sealer;
  wire::Token session{};
  bool sealed = false;
  uint64_t next_sequence = 0;
  std::optional<wire::BodyDigest> digest;
  std::string trailer;
  int frames_awaited = 0;  // CLUSTER frames (or reference replies) still to come
  Clock::time_point done_at;
};

class SimNodes {
 public:
  // `count` connections of `per_host` nodes each; a reference server
  // answers each with `reference_frames` frames.
  // `node_keys`: each node's credential, by executor id; empty: every
  // connection authenticates with the cluster token.
  SimNodes(int count, int per_host, uint16_t port, bool naive, int reference_frames,
           const wire::Token& token, const std::vector<wire::Token>& node_keys,
           wire::NodeList node_list)
      : nodes_(count),
        per_host_(per_host),
        naive_(naive),
        reference_frames_(reference_frames),
        token_(token),
        node_keys_(node_keys),
        node_list_(node_list) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < count; ++i) {
      SimNode& node = nodes_[i];
      node.fd = ConnectNonBlocking(port, i);
      epoll_event event{EPOLLIN | EPOLLOUT, {.u64 = static_cast<uint64_t>(i)}};
      ::epoll_ctl(epoll_, EPOLL_CTL_ADD, node.fd, &event);
    }
  }
  ~SimNodes() {
    for (SimNode& node : nodes_) ::close(node.fd);
    ::close(epoll_);
  }

  // Runs every node to completion; returns when the last holds the cluster.
  Clock::time_point Run(Clock::time_point deadline) {
    int remaining = static_cast<int>(nodes_.size());
    std::vector<bool> started(nodes_.size(), false);
    std::vector<epoll_event> events(1024);
    while (remaining > 0) {
      if (Clock::now() > deadline) Die(std::to_string(remaining) + " nodes never got the cluster");
      int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 1000);
      for (int e = 0; e < n; ++e) {
        size_t i = events[e].data.u64;
        SimNode& node = nodes_[i];
        if (!started[i] && (events[e].events & EPOLLOUT)) {
          started[i] = true;
          Start(node, i);
          epoll_event in{EPOLLIN, {.u64 = i}};
          ::epoll_ctl(epoll_, EPOLL_CTL_MOD, node.fd, &in);
        }
        if ((events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
            node.phase != SimNode::Phase::kDone) {
          if (Read(node, i) && node.phase == SimNode::Phase::kDone) --remaining;
        }
      }
    }
    Clock::time_point last = Clock::time_point::min();
    for (const SimNode& node : nodes_) last = std::max(last, node.done_at);
    return last;
  }

  uint64_t bytes_received() const { return bytes_received_; }

 private:
  void Start(SimNode& node, size_t i) {
    if (naive_) {
      node.phase = SimNode::Phase::kNaiveReply;
      node.frames_awaited = reference_frames_;
      WriteAll(node.fd, wire::EncodeFrame(wire::REGISTER, "executor " + std::to_string(i)));
      return;
    }
    node.client_nonce = std::string(wire::kNonceBytes, static_cast<char>(i & 0xff));
    wire::Hello hello;
    hello.set_client_nonce(node.client_nonce);
    hello.set_name("sim " + std::to_string(i));
    if (!node_keys_.empty()) hello.set_executor_id(std::to_string(i * per_host_));
    WriteAll(node.fd, wire::EncodeFrame(wire::HELLO, hello));
  }

  // Reads what is available; true when a frame completed.
  bool Read(SimNode& node, size_t i) {
    char buffer[65536];
    bool completed = false;
    for (;;) {
      ssize_t n = ::recv(node.fd, buffer, sizeof(buffer), 0);
      if (n == 0) Die("server closed node " + std::to_string(i) + " early");
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return completed;
        Die("recv: " + std::string(std::strerror(errno)));
      }
      bytes_received_ += static_cast<uint64_t>(n);
      size_t offset = 0;
      while (offset < static_cast<size_t>(n) && node.phase != SimNode::Phase::kDone) {
        if (node.header.size() < wire::kHeaderBytes) {
          size_t take = std::min(wire::kHeaderBytes - node.header.size(), n - offset);
          node.header.append(buffer + offset, take);
          offset += take;
          if (node.header.size() == wire::kHeaderBytes) {
            wire::FrameHeader header;
            wire::FrameError error;
            if (!wire::DecodeHeader(node.header, 1u << 30, &header, &error)) Die(error.message);
            node.body_length = header.length;
            node.type = header.type;
            node.body.clear();
            node.body_seen = 0;
            node.trailer.clear();
            // The CLUSTER body is not hashed here: like decoding it, that
            // is each node's own work, done in parallel on real machines.
            if (node.sealed && node.type != wire::CLUSTER) node.digest.emplace();
          }
          if (node.header.size() < wire::kHeaderBytes || node.body_length > 0 || node.sealed) {
            continue;
          }
        } else if (node.body_seen < node.body_length) {
          size_t take = std::min<uint64_t>(node.body_length - node.body_seen, n - offset);
          if (node.body_length < 4096) node.body.append(buffer + offset, take);
          if (node.digest) node.digest->Update(std::string_view(buffer + offset, take));
          node.body_seen += take;
          offset += take;
          if (node.body_seen < node.body_length || node.sealed) continue;
        } else {
          size_t take = std::min(wire::kTrailerBytes - node.trailer.size(), n - offset);
          node.trailer.append(buffer + offset, take);
          offset += take;
          if (node.trailer.size() < wire::kTrailerBytes) continue;
          CheckTrailer(node, i);
        }
        FrameDone(node, i);
        completed = true;
        node.header.clear();
      }
    }
  }

  void CheckTrailer(SimNode& node, size_t i) {
    uint64_t sequence = 0;
    for (int b = 7; b >= 0; --b) sequence = (sequence << 8) | static_cast<uint8_t>(node.trailer[b]);
    if (sequence != node.next_sequence++) Die("node " + std::to_string(i) + ": frame out of order");
    if (!node.digest) return;  // CLUSTER
    std::string mac = wire::FrameMac(node.session, wire::Direction::kServerToClient, sequence,
                                     node.header, *node.digest);
    node.digest.reset();
    if (!wire::ConstantTimeEquals(mac, std::string_view(node.trailer).substr(8))) {
      Die("node " + std::to_string(i) + " got a frame that does not open");
    }
  }

  void FrameDone(SimNode& node, size_t i) {
    if (node.type == wire::ERROR) Die("node " + std::to_string(i) + " got an ERROR frame");
    switch (node.phase) {
      case SimNode::Phase::kChallenge: {
        wire::Challenge challenge;
        challenge.ParseFromString(node.body);
        node.server_nonce = challenge.server_nonce();
        wire::Auth auth;
        auth.set_mac(wire::ClientMac(Key(i), challenge.server_nonce(), node.client_nonce));
        WriteAll(node.fd, wire::EncodeFrame(wire::AUTH, auth));
        node.phase = SimNode::Phase::kAuthOk;
        break;
      }
      case SimNode::Phase::kAuthOk: {
        auto session = wire::DeriveSessionKey(Key(i), node.client_nonce, node.server_nonce);
        if (!session.ok()) Die(session.status().ToString());
        node.session = *session;
        node.sealed = true;
        node.sealer.emplace(node.session, wire::Direction::kClientToServer);
        // A host's nodes, every REGISTER in one write.
        std::string frames;
        for (int k = 0; k < per_host_; ++k) {
          wire::Register reg;
          *reg.mutable_node() = SimulatedNode(i * per_host_ + k);
          reg.set_node_list(node_list_);
          reg.set_host(per_host_ > 1);
          if (k > 0 && !node_keys_.empty()) {
            reg.set_credential_mac(wire::ClaimMac(node_keys_[i * per_host_ + k], node.server_nonce,
                                                  node.client_nonce));
          }
          frames += node.sealer->Seal(wire::REGISTER, reg);
        }
        WriteAll(node.fd, frames);
        node.phase = SimNode::Phase::kCluster;
        node.frames_awaited = per_host_;
        break;
      }
      case SimNode::Phase::kCluster:
        if (node.type != wire::CLUSTER) break;  // REGISTERED acks
        [[fallthrough]];
      case SimNode::Phase::kNaiveReply:
        if (--node.frames_awaited > 0) break;
        node.phase = SimNode::Phase::kDone;
        node.done_at = Clock::now();
        break;
      case SimNode::Phase::kDone:
        break;
    }
  }

  // What connection i authenticates with: its first node's credential, or
  // the cluster token.
  const wire::Token& Key(size_t i) const {
    return node_keys_.empty() ? token_ : node_keys_[i * per_host_];
  }

  std::vector<SimNode> nodes_;
  int per_host_;
  bool naive_;
  int reference_frames_;
  wire::Token token_;
  const std::vector<wire::Token>& node_keys_;
  wire::NodeList node_list_;
  int epoll_ = -1;
  uint64_t bytes_received_ = 0;
};

// The naive reference server: register everyone (`count` connections of
// `per_host` nodes), then send each connection the full cluster, encoded
// once; or, `own_only`, each of its nodes' own entries.
[[noreturn]] void RunNaiveServer(int listen_fd, int count, int per_host, bool own_only) {
  int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event accept_event{EPOLLIN, {.fd = listen_fd}};
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, listen_fd, &accept_event);
  std::vector<int> clients;
  clients.reserve(static_cast<size_t>(count));
  int registered = 0;
  std::vector<epoll_event> events(1024);
  while (registered < count) {
    int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), -1);
    for (int e = 0; e < n; ++e) {
      int fd = events[e].data.fd;
      if (fd == listen_fd) {
        for (;;) {
          int client = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (client < 0) break;
          clients.push_back(client);
          epoll_event in{EPOLLIN, {.fd = client}};
          ::epoll_ctl(epoll, EPOLL_CTL_ADD, client, &in);
        }
        continue;
      }
      char buffer[4096];
      ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
      if (got > 0) ++registered;  // one small frame per client
    }
  }
  if (own_only) {
    for (size_t i = 0; i < clients.size(); ++i) {
      std::string frames;
      for (int k = 0; k < per_host; ++k) {
        frames +=
            wire::EncodeFrame(wire::CLUSTER, SimulatedNode(i * per_host + k, /*placed=*/true));
      }
      WriteAll(clients[i], frames);
    }
    ::pause();
    std::_Exit(0);
  }
  const int nodes = count * per_host;
  drover::ClusterSpec spec;
  std::vector<std::string> workers;
  for (int i = 0; i < nodes; ++i) {
    workers.push_back("node" + std::to_string(i / 8) +
                      ".cluster.example.com:" + std::to_string(20000 + i % 8));
  }
  (void)spec.AddJob("worker", workers);
  // The full spec and every node's metadata, encoded once, sent whole to each
  // node: protocol version 2's payload, uncompressed (version 3 derives the
  // ClusterDef on the node; the baseline keeps the naive shape).
  wire::SharedCluster shared;
  for (int i = 0; i < nodes; ++i) *shared.add_nodes() = SimulatedNode(i, /*placed=*/true);
  const std::string body = spec.AsClusterDef() + shared.SerializeAsString();
  std::string frame = wire::EncodeFrame(wire::CLUSTER, std::string_view(body));
  for (int client : clients) WriteAll(client, frame);
  ::pause();
  std::_Exit(0);
}

struct ServerProcess {
  pid_t pid = -1;
  uint16_t port = 0;
};

// A server child goes when the bench does, even when the bench is killed.
void DieWithParent() {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) ::_exit(1);
}

ServerProcess ForkNaiveServer(int count, int per_host, bool own_only) {
  int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listen_fd, 65535) != 0) {
    Die("naive server bind/listen: " + std::string(std::strerror(errno)));
  }
  socklen_t length = sizeof(address);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&address), &length);
  pid_t pid = ::fork();
  if (pid == 0) {
    DieWithParent();
    RunNaiveServer(listen_fd, count, per_host, own_only);
  }
  ::close(listen_fd);
  return {pid, ntohs(address.sin_port)};
}

ServerProcess ForkDroverServer(int count, const drover::ClusterToken& token) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) Die("pipe");
  pid_t pid = ::fork();
  if (pid == 0) {
    DieWithParent();
    drover::RendezvousServerOptions options;
    options.bind_address = "127.0.0.1";
    options.token = token;
    options.cluster.num_nodes = count;
    options.reservation_timeout = drover::Milliseconds(120'000);
    options.heartbeat_interval = drover::Milliseconds(60'000);
    options.log = [](const std::string&) {};  // N lines of "declared dead" at the end
    auto server = drover::RendezvousServer::Start(std::move(options));
    if (!server.ok()) Die(server.status().ToString());
    uint16_t port = (*server)->port();
    if (::write(pipe_fds[1], &port, sizeof(port)) != sizeof(port)) Die("pipe write");
    ::pause();
    std::_Exit(0);
  }
  uint16_t port = 0;
  if (::read(pipe_fds[0], &port, sizeof(port)) != sizeof(port)) Die("drover server did not start");
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  return {pid, port};
}

struct Measurement {
  double barrier_ms = 0;
  double rss_kb_per_node = 0;
  double peak_kb_per_node = 0;  // the server's peak RSS over its RSS before, per node
  double kb_received_per_node = 0;
  // CPU time spent during the barrier: the server's, and the simulated
  // nodes' (which a real cluster spreads over its machines).
  double server_cpu_ms = 0;
  double nodes_cpu_ms = 0;
};

enum class Server { kNaive, kOwn, kDrover };

// `count` nodes, in count / g_nodes_per_host connections.
Measurement MeasureOnce(int count, Server kind, const drover::ClusterToken& token,
                        wire::NodeList node_list) {
  const int per_host = g_nodes_per_host;
  const int connections = count / per_host;
  ServerProcess server = kind == Server::kDrover
                             ? ForkDroverServer(count, token)
                             : ForkNaiveServer(connections, per_host, kind == Server::kOwn);
  long rss_before = StatusKilobytes(server.pid, "VmRSS");
  const double server_cpu_before = CpuMilliseconds(server.pid);
  const double nodes_cpu_before = CpuMilliseconds(::getpid());
  wire::Token wire_token{};
  std::copy(token.bytes.begin(), token.bytes.end(), wire_token.begin());
  std::vector<wire::Token> node_keys;
  if (g_node_credentials && kind == Server::kDrover) {
    for (int i = 0; i < count; ++i) {
      drover::Result<wire::Token> key = wire::DeriveNodeKey(wire_token, std::to_string(i));
      if (!key.ok()) Die(key.status().ToString());
      node_keys.push_back(*key);
    }
  }
  Clock::time_point start = Clock::now();
  Clock::time_point last;
  uint64_t bytes = 0;
  long rss_after = 0;
  long peak = 0;
  Measurement m;
  {
    SimNodes nodes(connections, per_host, server.port, kind != Server::kDrover,
                   kind == Server::kOwn ? per_host : 1, wire_token, node_keys, node_list);
    last = nodes.Run(start + std::chrono::seconds(300));
    bytes = nodes.bytes_received();
    rss_after = StatusKilobytes(server.pid, "VmRSS");
    peak = StatusKilobytes(server.pid, "VmHWM");
    m.server_cpu_ms = CpuMilliseconds(server.pid) - server_cpu_before;
    m.nodes_cpu_ms = CpuMilliseconds(::getpid()) - nodes_cpu_before;
  }
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  m.barrier_ms = std::chrono::duration<double, std::milli>(last - start).count();
  m.rss_kb_per_node = static_cast<double>(rss_after - rss_before) / count;
  m.peak_kb_per_node = static_cast<double>(peak - rss_before) / count;
  m.kb_received_per_node = static_cast<double>(bytes) / 1024.0 / count;
  return m;
}

Measurement Median(int count, Server kind, const drover::ClusterToken& token,
                   wire::NodeList node_list) {
  std::vector<Measurement> runs;
  for (int r = 0; r < g_repetitions; ++r)
    runs.push_back(MeasureOnce(count, kind, token, node_list));
  std::sort(runs.begin(), runs.end(),
            [](const Measurement& a, const Measurement& b) { return a.barrier_ms < b.barrier_ms; });
  return runs[runs.size() / 2];
}

// The naive server sends N x N bytes: past this many nodes it is not run.
constexpr int kNaiveLimit = 10'000;

constexpr const char* kUsage =
    "usage: rendezvous_bench [--node-list auto|always|never] [--nodes-per-host K] "
    "[--node-credentials] [--reps R] [N ...]";

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  wire::NodeList node_list = wire::NODE_LIST_AUTO;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      g_repetitions = std::max(1, std::atoi(argv[++i]));
      continue;
    }
    if (arg == "--node-credentials") {
      g_node_credentials = true;
      continue;
    }
    if (arg == "--nodes-per-host" && i + 1 < argc) {
      g_nodes_per_host = std::max(1, std::atoi(argv[++i]));
      continue;
    }
    if (arg == "--node-list" && i + 1 < argc) {
      drover::Result<drover::NodeList> parsed = drover::ParseNodeList(argv[++i]);
      if (!parsed.ok()) Die(parsed.status().message());
      node_list = static_cast<wire::NodeList>(*parsed);  // NodeList's values are the wire's
      continue;
    }
    char* end = nullptr;
    long count = std::strtol(arg.c_str(), &end, 10);
    if (arg == "--help" || arg == "-h") {
      std::puts(kUsage);
      return 0;
    }
    if (end == arg.c_str() || *end != '\0' || count <= 0 || count > 10'000'000) {
      std::fprintf(stderr, "rendezvous_bench: not a node count: %s\n%s\n", arg.c_str(), kUsage);
      return 2;
    }
    counts.push_back(static_cast<int>(count));
  }
  if (counts.empty()) counts = {8, 1000, 4000};
  for (int count : counts) {
    if (count % g_nodes_per_host != 0) {
      Die(std::to_string(count) + " nodes are not a whole number of hosts of " +
          std::to_string(g_nodes_per_host));
    }
  }
  RaiseFdLimit(*std::max_element(counts.begin(), counts.end()) / g_nodes_per_host);
  auto token = drover::ClusterToken::Generate();
  if (!token.ok()) Die(token.status().ToString());
  std::printf(
      "node list: %s; %d node(s) per connection; drover's authenticate with %s; median of "
      "%d\n",
      wire::NodeList_Name(node_list).c_str() + std::strlen("NODE_LIST_"), g_nodes_per_host,
      g_node_credentials ? "node credentials" : "the cluster token", g_repetitions);
  std::printf("%-8s %7s %11s %8s %8s %14s %15s %10s %14s %13s\n", "server", "N", "barrier ms",
              "x naive", "x own", "KiB recv/node", "server KiB/node", "peak", "server CPU ms",
              "nodes CPU ms");
  for (int count : counts) {
    std::optional<Measurement> naive;
    if (count <= kNaiveLimit) naive = Median(count, Server::kNaive, *token, node_list);
    Measurement own = Median(count, Server::kOwn, *token, node_list);
    Measurement drover = Median(count, Server::kDrover, *token, node_list);
    auto row = [&](const char* name, const Measurement& m) {
      std::string x_naive = naive ? std::to_string(m.barrier_ms / naive->barrier_ms) : "-";
      std::printf("%-8s %7d %11.1f %8.5s %8.2f %14.2f %15.2f %10.2f %14.0f %13.0f\n", name, count,
                  m.barrier_ms, x_naive.c_str(), m.barrier_ms / own.barrier_ms,
                  m.kb_received_per_node, m.rss_kb_per_node, m.peak_kb_per_node, m.server_cpu_ms,
                  m.nodes_cpu_ms);
    };
    if (naive) row("naive", *naive);
    row("own", own);
    row("drover", drover);
    std::fflush(stdout);
  }
  return 0;
}

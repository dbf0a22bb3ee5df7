// MetricsInbox: the agent's end of drover::Report. A datagram socket at a
// path in a directory only the agent's user can enter (the caller makes it
// 0700), named to the program in DROVER_REPORT_SOCKET; every datagram holds
// some metrics' last values (report/report_datagram.h), and the inbox keeps
// each name's latest for the heartbeats. Datagrams that do not parse, and
// names past kMaxMetrics, are counted and dropped: a program's bad report
// must not stop its node. Thread-safe.

#ifndef DROVER_REPORT_METRICS_INBOX_H_
#define DROVER_REPORT_METRICS_INBOX_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "drover/report.h"
#include "drover/status.h"
#include "os/unique_fd.h"

namespace drover::report {

class MetricsInbox {
 public:
  // Binds the socket at `path`, which must not exist yet.
  static Result<std::unique_ptr<MetricsInbox>> Open(const std::string& path);
  ~MetricsInbox();  // removes the socket file

  const std::string& path() const { return path_; }
  // Readable when a datagram waits (Latest reads them all): what a quiet
  // heartbeat waits for (HeartbeatPayload::change_fd). Valid while the
  // inbox lives.
  int change_fd() const { return change_fd_; }
  // Reads every datagram waiting, then returns each name's latest value,
  // sorted by name.
  std::vector<MetricValue> Latest() EXCLUDES(mu_);
  // Datagrams or metrics dropped so far.
  uint64_t rejected() const EXCLUDES(mu_);

 private:
  MetricsInbox(std::string path, os::UniqueFd socket)
      : path_(std::move(path)), change_fd_(socket.get()), socket_(std::move(socket)) {}
  void Drain() REQUIRES(mu_);

  const std::string path_;
  const int change_fd_;
  mutable Mutex mu_;
  os::UniqueFd socket_ GUARDED_BY(mu_);
  std::map<std::string, MetricValue> latest_ GUARDED_BY(mu_);
  uint64_t rejected_ GUARDED_BY(mu_) = 0;
};

}  // namespace drover::report

#endif  // DROVER_REPORT_METRICS_INBOX_H_

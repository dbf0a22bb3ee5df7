#include "report/metrics_inbox.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "report/report_datagram.h"

namespace drover::report {

Result<std::unique_ptr<MetricsInbox>> MetricsInbox::Open(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("the metrics socket path " + path + " is too long");
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  os::UniqueFd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket.valid()) {
    return Status::IoError(std::string("socket for the metrics inbox: ") + std::strerror(errno));
  }
  if (::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Status::IoError("cannot bind the metrics socket " + path + ": " + std::strerror(errno));
  }
  return std::unique_ptr<MetricsInbox>(new MetricsInbox(path, std::move(socket)));
}

MetricsInbox::~MetricsInbox() {
  ::unlink(path_.c_str());
}

void MetricsInbox::Drain() {
  char buffer[kMaxDatagramBytes + 1];
  for (;;) {
    ssize_t n = ::recv(socket_.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more waits
    Result<std::vector<MetricValue>> metrics =
        DecodeMetrics(std::string_view(buffer, static_cast<size_t>(n)));
    if (!metrics.ok()) {
      ++rejected_;
      continue;
    }
    for (MetricValue& metric : *metrics) {
      auto found = latest_.find(metric.name);
      if (found == latest_.end() && latest_.size() >= kMaxMetrics) {
        ++rejected_;
        continue;
      }
      if (found == latest_.end()) {
        const std::string name = metric.name;
        latest_.emplace(name, std::move(metric));
      } else {
        found->second = std::move(metric);
      }
    }
  }
}

std::vector<MetricValue> MetricsInbox::Latest() {
  MutexLock lock(mu_);
  Drain();
  std::vector<MetricValue> out;
  out.reserve(latest_.size());
  for (const auto& [name, metric] : latest_) out.push_back(metric);
  return out;
}

uint64_t MetricsInbox::rejected() const {
  MutexLock lock(mu_);
  return rejected_;
}

}  // namespace drover::report

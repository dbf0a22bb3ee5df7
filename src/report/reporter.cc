// drover::Report's process-wide state: the last value of each name, sent by
// a thread of its own (started by the first report) every kSendInterval.
// One Reporter per process: a forked child makes its own (a fork handler
// forgets the parent's) rather than use the parent's, whose lock may have
// been held by a thread the child lacks. Not getpid() per call: a system
// call costs a microsecond on some virtual machines.

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "drover/report.h"
#include "os/unique_fd.h"
#include "report/report_datagram.h"

namespace drover {
namespace {

constexpr std::chrono::milliseconds kSendInterval{250};

class Reporter {
 public:
  explicit Reporter(const char* socket_path) : pid_(::getpid()) {
    if (socket_path == nullptr || *socket_path == '\0') return;
    if (std::strlen(socket_path) >= sizeof(address_.sun_path)) return;
    address_.sun_family = AF_UNIX;
    std::strcpy(address_.sun_path, socket_path);
    enabled_ = true;
  }

  pid_t pid() const { return pid_; }
  bool enabled() const { return enabled_; }

  Status Record(std::optional<int64_t> step,
                const std::vector<std::pair<std::string, double>>& metrics) EXCLUDES(mu_) {
    for (const auto& [name, value] : metrics) {
      if (!ValidMetricName(name)) {
        return Status::InvalidArgument("metric name '" + name.substr(0, 80) +
                                       "': use 1 to 64 characters of A-Z a-z 0-9 _ . : / -");
      }
    }
    if (!enabled_) return Status::Ok();
    MutexLock lock(mu_);
    size_t fresh = 0;
    for (const auto& metric : metrics) fresh += latest_.count(metric.first) == 0 ? 1 : 0;
    if (latest_.size() + fresh > kMaxMetrics) {
      return Status::InvalidArgument("a program reports at most " + std::to_string(kMaxMetrics) +
                                     " metrics; this report would make " +
                                     std::to_string(latest_.size() + fresh));
    }
    for (const auto& [name, value] : metrics) {
      Entry& entry = latest_[name];
      entry.value = value;
      entry.step = step;
      entry.unsent = true;
    }
    if (!thread_started_) {
      thread_started_ = true;
      std::atexit(FlushAtExit);
      std::thread([this] { Loop(); }).detach();
    }
    return Status::Ok();
  }

  // Sends every value not sent yet, in one datagram; what the agent could
  // not take (its queue full, not listening yet) goes with the next.
  void Send() EXCLUDES(mu_) {
    if (!enabled_) return;
    MutexLock send_lock(send_mu_);
    std::vector<MetricValue> batch;
    {
      MutexLock lock(mu_);
      for (auto& [name, entry] : latest_) {
        if (!entry.unsent) continue;
        batch.push_back(MetricValue{name, entry.value, entry.step});
        entry.unsent = false;
      }
    }
    if (batch.empty()) return;
    if (Deliver(report::EncodeMetrics(batch))) return;
    MutexLock lock(mu_);
    for (const MetricValue& sent : batch) {
      Entry& entry = latest_[sent.name];
      if (entry.value == sent.value && entry.step == sent.step) entry.unsent = true;
    }
  }

 private:
  struct Entry {
    double value = 0;
    std::optional<int64_t> step;
    bool unsent = false;
  };

  static void FlushAtExit();

  void Loop() {
    for (;;) {
      std::this_thread::sleep_for(kSendInterval);
      Send();
    }
  }

  bool Deliver(const std::string& datagram) REQUIRES(send_mu_) {
    if (!socket_.valid()) {
      socket_.Reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      if (!socket_.valid()) return false;
    }
    ssize_t sent =
        ::sendto(socket_.get(), datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&address_), sizeof(address_));
    return sent == static_cast<ssize_t>(datagram.size());
  }

  const pid_t pid_;
  bool enabled_ = false;
  sockaddr_un address_{};
  Mutex send_mu_;  // one datagram at a time, so an older batch never lands last
  os::UniqueFd socket_ GUARDED_BY(send_mu_);
  Mutex mu_;
  std::map<std::string, Entry, std::less<>> latest_ GUARDED_BY(mu_);
  bool thread_started_ GUARDED_BY(mu_) = false;
};

std::atomic<Reporter*> current_reporter{nullptr};

// In a forked child (one thread): the parent's Reporter is left alone, never
// freed, and the child's first report makes its own.
void ForgetReporterInChild() { current_reporter.store(nullptr, std::memory_order_release); }

Reporter& ThisProcessReporter() {
  Reporter* reporter = current_reporter.load(std::memory_order_acquire);
  if (reporter != nullptr) return *reporter;
  static const bool fork_handler = [] {
    ::pthread_atfork(nullptr, nullptr, ForgetReporterInChild);
    return true;
  }();
  (void)fork_handler;
  auto* fresh = new Reporter(std::getenv("DROVER_REPORT_SOCKET"));
  if (current_reporter.compare_exchange_strong(reporter, fresh, std::memory_order_acq_rel)) {
    return *fresh;
  }
  delete fresh;  // another thread of this process made it first
  return *reporter;
}

void Reporter::FlushAtExit() {
  Reporter* reporter = current_reporter.load(std::memory_order_acquire);
  if (reporter != nullptr && reporter->pid() == ::getpid()) reporter->Send();
}

}  // namespace

Status Report(std::optional<int64_t> step,
              const std::vector<std::pair<std::string, double>>& metrics) {
  return ThisProcessReporter().Record(step, metrics);
}

void FlushReports() {
  ThisProcessReporter().Send();
}

bool ReportsEnabled() {
  return ThisProcessReporter().enabled();
}

}  // namespace drover

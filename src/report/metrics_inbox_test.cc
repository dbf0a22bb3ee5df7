#include "report/metrics_inbox.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "drover/report.h"
#include "testing/child_process.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace drover::report {
namespace {

using ::drover::testing::Child;
using ::drover::testing::ChildBody;
using ::drover::testing::TempDir;

// A program's training loop: reports the loss at every step, an accuracy
// once, and flushes.
const ChildBody kTrainer("trainer", [](const std::string& socket_path) {
  ::setenv("DROVER_REPORT_SOCKET", socket_path.c_str(), 1);
  if (!ReportsEnabled()) return 3;
  for (int step = 0; step < 1000; ++step) {
    if (!Report(step, {{"loss", 1.0 / (step + 1)}}).ok()) return 4;
  }
  if (!Report(std::nullopt, {{"accuracy", 0.97}}).ok()) return 5;
  if (Report(1, {{"bad name", 1.0}}).ok()) return 6;
  FlushReports();  // the child framework leaves by _Exit: no exit-time flush
  return 0;
});

// Sends one datagram to the inbox, as any program may.
void SendRaw(const std::string& path, const std::string& datagram) {
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strcpy(address.sun_path, path.c_str());
  ::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&address),
           sizeof(address));
  ::close(fd);
}

std::optional<MetricValue> Find(const std::vector<MetricValue>& metrics, const std::string& name) {
  for (const MetricValue& metric : metrics) {
    if (metric.name == name) return metric;
  }
  return std::nullopt;
}

TEST(MetricsInboxTest, KeepsTheLastValueAProgramReported) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsInbox> inbox, MetricsInbox::Open(dir.File("m")));
  Child trainer(kTrainer, inbox->path());
  std::optional<int> status = trainer.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  ASSERT_EQ(WEXITSTATUS(*status), 0);
  // The child flushed before it exited: everything it sent is queued.
  std::vector<MetricValue> latest = inbox->Latest();
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0], (MetricValue{"accuracy", 0.97, std::nullopt}));
  EXPECT_EQ(latest[1], (MetricValue{"loss", 1.0 / 1000, 999}));
  EXPECT_EQ(inbox->rejected(), 0u);
}

TEST(MetricsInboxTest, DropsWhatDoesNotParseAndKeepsTheRest) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsInbox> inbox, MetricsInbox::Open(dir.File("m")));
  SendRaw(inbox->path(), "loss 0.5 10\n");
  SendRaw(inbox->path(), "loss what\n");
  SendRaw(inbox->path(), std::string(100000, 'x'));
  std::vector<MetricValue> latest = inbox->Latest();
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_EQ(latest[0], (MetricValue{"loss", 0.5, 10}));
  EXPECT_EQ(inbox->rejected(), 2u);
}

TEST(MetricsInboxTest, KeepsAtMostMaxMetricsNames) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsInbox> inbox, MetricsInbox::Open(dir.File("m")));
  // A datagram socket queues only net.unix.max_dgram_qlen (often 10)
  // datagrams: read as the agent's heartbeats do, between sends.
  for (size_t i = 0; i < kMaxMetrics + 3; ++i) {
    SendRaw(inbox->path(), "m" + std::to_string(i) + " 1\n");
    inbox->Latest();
  }
  EXPECT_EQ(inbox->Latest().size(), kMaxMetrics);
  EXPECT_EQ(inbox->rejected(), 3u);
  SendRaw(inbox->path(), "m0 2\n");  // a known name still updates
  EXPECT_EQ(Find(inbox->Latest(), "m0")->value, 2.0);
}

TEST(MetricsInboxTest, TheSocketGoesWithTheInbox) {
  TempDir dir;
  const std::string path = dir.File("m");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsInbox> inbox, MetricsInbox::Open(path));
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_FALSE(MetricsInbox::Open(path).ok());  // taken
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace drover::report

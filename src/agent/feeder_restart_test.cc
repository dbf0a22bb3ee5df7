// FeedService's rule for a feeder that dies before it feeds anything, with a
// stand-in feeder: a shell script started as `<script> feeder --socket ...`.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/feed_service.h"
#include "agent/test_util.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::ReadFile;
using ::drover::testing::TempDir;
using ::drover::testing::WriteFile;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class FeederRestartTest : public ::testing::Test {
 protected:
  // Starts a FeedService whose feeder is `script` (a shell script body).
  void Serve(const std::string& script) {
    const std::string data = dir_.File("data.csv");
    WriteFile(data, "1,a\n2,b\n");
    const std::string feeder = dir_.File("feeder.sh");
    WriteFile(feeder, "#!/bin/sh\n" + script);
    ASSERT_EQ(::chmod(feeder.c_str(), 0755), 0);
    FeedServiceOptions options;
    options.plan.read.format = feed::RecordFormat::kCsv;
    options.plan.queue_bytes = 64 << 10;
    options.plan.partitions.push_back(feed::Partition{data, 0, 8});
    options.plan_path = dir_.File("plan.json");
    WriteFile(options.plan_path, options.plan.ToJson());
    options.task = "worker:0";
    options.drover_binary = feeder;
    options.say = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      said_.push_back(line);
    };
    options.on_failure = [this](const Status& status) {
      std::lock_guard<std::mutex> lock(mu_);
      failures_.push_back(status.message());
    };
    ASSERT_OK_AND_ASSIGN(service_, FeedService::Start(std::move(options)));
  }

  // How many times the script ran (it appends a line to `starts` each time).
  int Starts() {
    std::string text = ReadFile(dir_.File("starts"));
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  }

  // Waits (bounded) until `done` holds; false on timeout.
  template <typename Predicate>
  bool WaitFor(Predicate done) {
    const auto until = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (done()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::string CountStart() const { return "echo start >> '" + dir_.File("starts") + "'\n"; }

  TempDir dir_;
  std::mutex mu_;
  std::vector<std::string> said_;
  std::vector<std::string> failures_;
  std::unique_ptr<FeedService> service_;
};

TEST_F(FeederRestartTest, CrashingFeederFailsTheFeedAfterFourCrashesInARow) {
  Serve(CountStart() + "kill -SEGV $$\n");
  ASSERT_TRUE(WaitFor([&] { return !failures_.empty(); })) << Starts() << " starts";
  EXPECT_THAT(failures_[0],
              HasSubstr("the feeder of worker:0 crashed (killed by SIGSEGV) 4 times in a row "
                        "without feeding a batch"));
  EXPECT_EQ(Starts(), 4);
}

// A feeder killed from outside before its first batch (a slow start under a
// sanitizer, an operator, the OOM killer) is started again, with a growing
// pause, however often that happens.
TEST_F(FeederRestartTest, FeederKilledFromOutsideIsAlwaysStartedAgainWithAGrowingPause) {
  constexpr int kKills = 5;
  Serve(CountStart() + "[ $(wc -l < '" + dir_.File("starts") + "') -gt " + std::to_string(kKills) +
        " ] && exec sleep 300\nkill -KILL $$\n");
  ASSERT_TRUE(WaitFor([&] { return Starts() > kKills; })) << Starts() << " starts";
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_THAT(failures_, IsEmpty());
  ASSERT_EQ(said_.size(), static_cast<size_t>(kKills));
  EXPECT_THAT(said_[0], HasSubstr("the feeder was killed by SIGKILL; resuming from the start in "
                                  "0.1 s (it fed nothing since its last start, 1 time(s) in a "
                                  "row)"));
  EXPECT_THAT(said_[1], HasSubstr("in 0.2 s"));
  EXPECT_THAT(said_[2], HasSubstr("in 0.4 s"));
  EXPECT_THAT(said_[4], HasSubstr("in 1.6 s (it fed nothing since its last start, 5 time(s)"));
}

}  // namespace
}  // namespace drover

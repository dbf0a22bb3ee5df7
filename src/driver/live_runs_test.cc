#include "driver/live_runs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "testing/temp_dir.h"

namespace drover {
namespace {

namespace fs = std::filesystem;

TEST(LiveRunsTest, TheDirectoryComesFromTheEnvironmentsRuntimeDir) {
  testing::TempDir runtime;
  EXPECT_EQ(LiveRunsDir(MapEnvironment({{"XDG_RUNTIME_DIR", runtime.path()}})),
            runtime.path() + "/drover");
  const std::string fallback = "/tmp/drover-" + std::to_string(::getuid());
  EXPECT_EQ(LiveRunsDir(MapEnvironment()), fallback);
  EXPECT_EQ(LiveRunsDir(MapEnvironment({{"XDG_RUNTIME_DIR", runtime.File("absent")}})), fallback);
}

// This process is alive; a record of a process that is gone (a SIGKILLed
// driver) is skipped and removed.
TEST(LiveRunsTest, ListsTheLiveAndDropsTheDead) {
  testing::TempDir runtime;
  const std::string dir = LiveRunsDir(MapEnvironment({{"XDG_RUNTIME_DIR", runtime.path()}}));
  LiveRun ours;
  ours.pid = static_cast<int>(::getpid());
  ours.url = "http://127.0.0.1:1/";
  ours.started_at = 2;
  ASSERT_TRUE(RegisterLiveRun(dir, ours).ok());
  LiveRun gone = ours;
  gone.pid = 0x7ffffff0;  // above any pid_max: no such process
  gone.started_at = 1;
  ASSERT_TRUE(RegisterLiveRun(dir, gone).ok());

  std::vector<LiveRun> runs = ListLiveRuns(dir);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].pid, ours.pid);
  EXPECT_EQ(runs[0].url, ours.url);
  EXPECT_FALSE(fs::exists(LiveRunFile(dir, gone.pid)));
  UnregisterLiveRun(dir, ours.pid);
  EXPECT_TRUE(ListLiveRuns(dir).empty());
}

}  // namespace
}  // namespace drover

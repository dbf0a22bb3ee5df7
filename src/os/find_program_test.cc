#include "os/find_program.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "testing/temp_dir.h"

namespace drover::os {
namespace {

using ::drover::testing::TempDir;

// A file `name` in `dir` with `mode`.
std::string MakeFile(const TempDir& dir, const std::string& name, mode_t mode) {
  const std::string path = dir.File(name);
  std::ofstream(path) << "#!/bin/sh\n";
  ::chmod(path.c_str(), mode);
  return path;
}

TEST(FindProgramTest, TakesTheFirstExecutableMatchOnThePath) {
  TempDir first, second;
  MakeFile(first, "tool", 0644);  // not executable: passed over
  const std::string found = MakeFile(second, "tool", 0755);
  EXPECT_EQ(FindProgram("tool", first.path() + ":" + second.path()), found);
  EXPECT_EQ(FindProgram("tool", "/nonexistent:" + second.path()), found);
  EXPECT_EQ(FindProgram("other", first.path() + ":" + second.path()), std::nullopt);
}

TEST(FindProgramTest, AnEmptyEntryIsTheCurrentDirectory) {
  TempDir dir;
  MakeFile(dir, "tool", 0755);
  const std::filesystem::path old = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  EXPECT_EQ(FindProgram("tool", "/nonexistent:"), "./tool");
  EXPECT_EQ(FindProgram("tool", ""), "./tool");
  std::filesystem::current_path(old);
}

TEST(FindProgramTest, ANameWithASlashIsNotSearched) {
  TempDir dir;
  const std::string tool = MakeFile(dir, "tool", 0755);
  const std::string plain = MakeFile(dir, "plain", 0644);
  EXPECT_EQ(FindProgram(tool, std::nullopt), tool);
  EXPECT_EQ(FindProgram(plain, dir.path()), std::nullopt);
  EXPECT_EQ(FindProgram(dir.File("missing"), dir.path()), std::nullopt);
}

TEST(FindProgramTest, WithoutAPathOnlyPathsAreFound) {
  EXPECT_EQ(FindProgram("sh", std::nullopt), std::nullopt);
  EXPECT_EQ(FindProgram("/bin/sh", std::nullopt), "/bin/sh");
}

TEST(FindProgramTest, TheGuardBinaryIsDroverGuardBesideDroverWhenThereIsOne) {
  TempDir dir;
  const std::string drover = MakeFile(dir, "drover", 0755);
  EXPECT_EQ(GuardBinaryBeside(drover), drover);  // none: drover runs `guard` itself
  MakeFile(dir, "drover-guard", 0644);
  EXPECT_EQ(GuardBinaryBeside(drover), drover);  // not executable
  const std::string small = MakeFile(dir, "drover-guard", 0755);
  EXPECT_EQ(GuardBinaryBeside(drover), small);
  EXPECT_EQ(GuardBinaryBeside("drover"), "drover");  // no directory to look in
}

TEST(FindProgramTest, TheAgentBinaryIsDroverAgentBesideDroverWhenThereIsOne) {
  TempDir dir;
  const std::string drover = MakeFile(dir, "drover", 0755);
  MakeFile(dir, "drover-guard", 0755);
  EXPECT_EQ(AgentBinaryBeside(drover), drover);  // the guard is not the agent
  const std::string small = MakeFile(dir, "drover-agent", 0755);
  EXPECT_EQ(AgentBinaryBeside(drover), small);
  EXPECT_EQ(AgentBinaryBeside("drover"), "drover");
}

}  // namespace
}  // namespace drover::os

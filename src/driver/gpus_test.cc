#include "driver/gpus.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "testing/temp_dir.h"

namespace drover {
namespace {

TEST(GpuTest, ParsesNvidiaSmi) {
  EXPECT_EQ(ParseGpuIndices("0\n1\n 2 \n\n"), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(ParseGpuIndices("No devices were found\n").empty());
}

TEST(GpuTest, AssignsDisjointSets) {
  auto gpus = AssignGpus(2, 2, {0, 1, 2, 3});
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(*gpus, (std::vector<std::string>{"0,1", "2,3"}));
  auto none = AssignGpus(0, 3, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, (std::vector<std::string>{"none", "none", "none"}));
  auto short_of = AssignGpus(1, 3, {0, 1});
  ASSERT_FALSE(short_of.ok());
  EXPECT_NE(short_of.status().message().find("need 3 GPUs"), std::string::npos);
}

// An nvidia-smi of our own on the PATH the environment gives: a real
// program, run the way the real one is.
void WriteNvidiaSmi(const testing::TempDir& dir, const std::string& body) {
  const std::string path = dir.File("nvidia-smi");
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
}

TEST(GpuTest, DetectsWithTheNvidiaSmiOnTheEnvironmentsPath) {
  testing::TempDir dir;
  WriteNvidiaSmi(dir,
                 "[ \"$1 $2\" = '--query-gpu=index --format=csv,noheader' ] || exit 9\n"
                 "printf '0\\n1\\n3\\n'");
  MapEnvironment env({{"PATH", dir.path()}});
  EXPECT_EQ(DetectGpus(env), (std::vector<int>{0, 1, 3}));
}

TEST(GpuTest, NoneWithoutNvidiaSmiOrWhenItFails) {
  testing::TempDir dir;
  MapEnvironment env({{"PATH", dir.path()}});
  EXPECT_TRUE(DetectGpus(env).empty());
  WriteNvidiaSmi(dir, "echo 'NVIDIA-SMI has failed'; echo 0; exit 6");
  EXPECT_TRUE(DetectGpus(env).empty());
  EXPECT_TRUE(DetectGpus(MapEnvironment()).empty());  // no PATH at all
}

}  // namespace
}  // namespace drover

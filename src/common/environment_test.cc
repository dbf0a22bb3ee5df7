#include "drover/environment.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace drover {
namespace {

TEST(MapEnvironmentTest, GetSetUnset) {
  MapEnvironment env({{"A", "1"}}, "node7", 2);
  EXPECT_EQ(env.Get("A"), "1");
  EXPECT_EQ(env.Get("B"), std::nullopt);
  env.Set("B", "");
  EXPECT_EQ(env.Get("B"), "");  // set-but-empty differs from unset
  env.Unset("A");
  EXPECT_EQ(env.Get("A"), std::nullopt);
  EXPECT_EQ(env.HostName(), "node7");
  EXPECT_EQ(env.CountLocalGpus(), 2);
  EXPECT_EQ(env.Variables(), (std::map<std::string, std::string>{{"B", ""}}));
}

TEST(MapEnvironmentTest, HasTheInterfacesItIsGiven) {
  MapEnvironment env;
  EXPECT_TRUE(env.InterfaceAddresses().empty());
  std::vector<InterfaceAddress> interfaces = {{"lo", "127.0.0.1", true}, {"eth0", "10.0.0.5"}};
  env.set_interfaces(interfaces);
  EXPECT_EQ(env.InterfaceAddresses(), interfaces);
}

TEST(ProcessEnvironmentTest, ReadsAndWritesTheRealEnvironment) {
  Environment& env = ProcessEnvironment();
  env.Set("DROVER_ENVIRONMENT_TEST", "x=y");
  EXPECT_STREQ(std::getenv("DROVER_ENVIRONMENT_TEST"), "x=y");
  EXPECT_EQ(env.Get("DROVER_ENVIRONMENT_TEST"), "x=y");
  EXPECT_EQ(env.Variables().at("DROVER_ENVIRONMENT_TEST"), "x=y");
  env.Unset("DROVER_ENVIRONMENT_TEST");
  EXPECT_EQ(env.Get("DROVER_ENVIRONMENT_TEST"), std::nullopt);
  EXPECT_EQ(env.Variables().count("DROVER_ENVIRONMENT_TEST"), 0u);
  EXPECT_FALSE(env.HostName().empty());
}

TEST(ProcessEnvironmentTest, InterfaceAddressesAreNumericAndNamed) {
  for (const InterfaceAddress& interface : ProcessEnvironment().InterfaceAddresses()) {
    EXPECT_FALSE(interface.name.empty());
    unsigned char bytes[sizeof(in6_addr)];
    const int family = interface.address.find(':') == std::string::npos ? AF_INET : AF_INET6;
    EXPECT_EQ(::inet_pton(family, interface.address.c_str(), bytes), 1) << interface.address;
    if (interface.address == "127.0.0.1") {
      EXPECT_TRUE(interface.loopback);
    }
  }
}

TEST(ProcessEnvironmentTest, CudaVisibleDevicesCanOnlyHideGpus) {
  Environment& env = ProcessEnvironment();
  std::optional<std::string> saved = env.Get("CUDA_VISIBLE_DEVICES");
  env.Unset("CUDA_VISIBLE_DEVICES");
  int all = env.CountLocalGpus();
  env.Set("CUDA_VISIBLE_DEVICES", "");
  EXPECT_EQ(env.CountLocalGpus(), 0);
  env.Set("CUDA_VISIBLE_DEVICES", "-1");
  EXPECT_EQ(env.CountLocalGpus(), 0);
  env.Set("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
  EXPECT_EQ(env.CountLocalGpus(), all);  // listing more than exist shows no more
  if (saved) {
    env.Set("CUDA_VISIBLE_DEVICES", *saved);
  } else {
    env.Unset("CUDA_VISIBLE_DEVICES");
  }
}

}  // namespace
}  // namespace drover

namespace drover {
namespace {

TEST(ParseVisibleDevicesTest, StopsAtTheFirstInvalidEntryAsCudaDoes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ParseVisibleDevices(""), V{});
  EXPECT_EQ(ParseVisibleDevices("-1"), V{});
  EXPECT_EQ(ParseVisibleDevices("0,1"), (V{"0", "1"}));
  EXPECT_EQ(ParseVisibleDevices(" 2 , 3"), (V{"2", "3"}));
  EXPECT_EQ(ParseVisibleDevices("4,-1,5"), V{"4"});
  EXPECT_EQ(ParseVisibleDevices("4,,5"), V{"4"});
  EXPECT_EQ(ParseVisibleDevices("GPU-8f1c,GPU-77aa"), (V{"GPU-8f1c", "GPU-77aa"}));
}

}  // namespace
}  // namespace drover

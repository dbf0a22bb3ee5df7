#include "drover/environment.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

extern char** environ;

namespace drover {
namespace {

int CountDriverGpus() {
  std::error_code error;
  std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", error);
  if (error) return 0;
  int count = 0;
  for (const auto& entry : it) {
    (void)entry;
    ++count;
  }
  return count;
}

class RealEnvironment : public Environment {
 public:
  std::optional<std::string> Get(std::string_view name) const override {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  }
  void Set(std::string_view name, std::string_view value) override {
    ::setenv(std::string(name).c_str(), std::string(value).c_str(), 1);
  }
  void Unset(std::string_view name) override { ::unsetenv(std::string(name).c_str()); }
  std::map<std::string, std::string> Variables() const override {
    std::map<std::string, std::string> vars;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string_view text(*entry);
      const size_t equals = text.find('=');
      if (equals == std::string_view::npos || equals == 0) continue;
      // The first of a duplicated name wins, as getenv(3) finds it.
      vars.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
    }
    return vars;
  }
  std::string HostName() const override {
    char buffer[256] = {};
    if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
    return buffer;
  }
  std::vector<InterfaceAddress> InterfaceAddresses() const override {
    std::vector<InterfaceAddress> out;
    ifaddrs* interfaces = nullptr;
    if (::getifaddrs(&interfaces) != 0) return out;
    for (ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      const int family = i->ifa_addr->sa_family;
      const void* raw = nullptr;
      if (family == AF_INET) {
        raw = &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
      } else if (family == AF_INET6) {
        raw = &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      } else {
        continue;  // AF_PACKET and the like: no IP address
      }
      char text[INET6_ADDRSTRLEN] = {};
      if (::inet_ntop(family, raw, text, sizeof(text)) == nullptr) continue;
      out.push_back({i->ifa_name, text, (i->ifa_flags & IFF_LOOPBACK) != 0});
    }
    ::freeifaddrs(interfaces);
    return out;
  }
  int CountLocalGpus() const override {
    int driver_gpus = CountDriverGpus();
    std::optional<std::string> visible = Get("CUDA_VISIBLE_DEVICES");
    if (!visible) return driver_gpus;
    int listed = static_cast<int>(ParseVisibleDevices(*visible).size());
    return listed < driver_gpus ? listed : driver_gpus;
  }
};

}  // namespace

std::vector<std::string> ParseVisibleDevices(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (!list.empty() && start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string item(list.substr(start, comma - start));
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty() || item[0] == '-') break;
    out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

Environment& ProcessEnvironment() {
  static RealEnvironment* environment = new RealEnvironment();  // never destroyed
  return *environment;
}

std::optional<std::string> MapEnvironment::Get(std::string_view name) const {
  auto it = vars_.find(std::string(name));
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

void MapEnvironment::Set(std::string_view name, std::string_view value) {
  vars_[std::string(name)] = std::string(value);
}

void MapEnvironment::Unset(std::string_view name) {
  vars_.erase(std::string(name));
}

}  // namespace drover

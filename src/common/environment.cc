#include "drover/environment.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

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
  std::string HostName() const override {
    char buffer[256] = {};
    if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
    return buffer;
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

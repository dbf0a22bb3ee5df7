// Environment: the process environment and host facts (variables, host
// name, network interfaces, GPUs), passed in as an interface so resolvers,
// the agent and launchers can be tested with a fake (the way LevelDB passes
// its Env). They read environ, gethostname(2) and getifaddrs(3) only
// through it; main() and the Python module pass ProcessEnvironment(), tests
// a MapEnvironment.
//
// ProcessEnvironment reads and writes the real environ; like setenv(3) it is
// not safe to call Set() while other threads read the environment.
// MapEnvironment is a plain value, not thread-safe for concurrent mutation.

#ifndef DROVER_ENVIRONMENT_H_
#define DROVER_ENVIRONMENT_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace drover {

// The entries of a CUDA_VISIBLE_DEVICES-style list, as CUDA reads it: up to
// the first empty or negative entry ("-1" is the idiom for "none"), trimmed.
std::vector<std::string> ParseVisibleDevices(std::string_view list);

// One address of a network interface.
struct InterfaceAddress {
  std::string name;     // "eth0"
  std::string address;  // numeric, as inet_ntop(3) writes it: "10.0.0.5", "fe80::1"
  bool loopback = false;

  friend bool operator==(const InterfaceAddress&, const InterfaceAddress&) = default;
};

class Environment {
 public:
  virtual ~Environment() = default;

  // The value of variable `name`, or nullopt when it is unset.
  virtual std::optional<std::string> Get(std::string_view name) const = 0;
  virtual void Set(std::string_view name, std::string_view value) = 0;
  virtual void Unset(std::string_view name) = 0;
  // Every variable, by name: what a child that inherits the environment gets.
  virtual std::map<std::string, std::string> Variables() const = 0;

  // The short host name (gethostname(2)).
  virtual std::string HostName() const = 0;

  // The IPv4 and IPv6 addresses of this host's interfaces (getifaddrs(3)),
  // loopback included; empty when they cannot be listed.
  virtual std::vector<InterfaceAddress> InterfaceAddresses() const = 0;

  // Number of NVIDIA GPUs visible on this host, honouring CUDA_VISIBLE_DEVICES;
  // 0 when there are none or no driver.
  virtual int CountLocalGpus() const = 0;
};

// The real process environment. The returned object is stateless and lives for
// the whole program.
Environment& ProcessEnvironment();

// An in-memory environment for tests and for building a child's environment.
class MapEnvironment : public Environment {
 public:
  MapEnvironment() = default;
  explicit MapEnvironment(std::map<std::string, std::string> vars,
                          std::string host_name = "localhost", int gpus = 0)
      : vars_(std::move(vars)), host_name_(std::move(host_name)), gpus_(gpus) {}

  std::optional<std::string> Get(std::string_view name) const override;
  void Set(std::string_view name, std::string_view value) override;
  void Unset(std::string_view name) override;
  std::map<std::string, std::string> Variables() const override { return vars_; }
  std::string HostName() const override { return host_name_; }
  std::vector<InterfaceAddress> InterfaceAddresses() const override { return interfaces_; }
  int CountLocalGpus() const override { return gpus_; }

  const std::map<std::string, std::string>& vars() const { return vars_; }
  void set_host_name(std::string host_name) { host_name_ = std::move(host_name); }
  void set_interfaces(std::vector<InterfaceAddress> interfaces) {
    interfaces_ = std::move(interfaces);
  }
  void set_gpus(int gpus) { gpus_ = gpus; }

 private:
  std::map<std::string, std::string> vars_;
  std::string host_name_ = "localhost";
  std::vector<InterfaceAddress> interfaces_;  // none by default
  int gpus_ = 0;
};

}  // namespace drover

#endif  // DROVER_ENVIRONMENT_H_

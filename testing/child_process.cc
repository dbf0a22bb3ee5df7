#include "testing/child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <string_view>
#include <thread>

extern char** environ;

namespace drover::testing {
namespace {

constexpr char kBodyVariable[] = "DROVER_TEST_CHILD_BODY";
constexpr char kArgVariable[] = "DROVER_TEST_CHILD_ARG";

std::map<std::string, ChildBodyFunction>& Bodies() {
  static auto* bodies = new std::map<std::string, ChildBodyFunction>;
  return *bodies;
}

// In a child (the variables set), runs the body before any test and exits.
class ChildDispatch : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* name = std::getenv(kBodyVariable);
    if (name == nullptr) return;
    const std::string body(name);
    const char* arg_value = std::getenv(kArgVariable);
    const std::string arg(arg_value == nullptr ? "" : arg_value);
    ::unsetenv(kBodyVariable);
    ::unsetenv(kArgVariable);
    std::_Exit(Run(body, arg));
  }

 private:
  static int Run(const std::string& body, const std::string& arg) {
    auto found = Bodies().find(body);
    if (found == Bodies().end()) {
      std::fprintf(stderr, "child_process: no child body named '%s'\n", body.c_str());
      return 125;
    }
    int code = 126;
    try {
      code = found->second(arg);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child_process: body '%s' threw: %s\n", body.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "child_process: body '%s' threw\n", body.c_str());
    }
    std::fflush(stderr);
    return code;
  }
};

[[maybe_unused]] const ::testing::Environment* const kDispatch =
    ::testing::AddGlobalTestEnvironment(new ChildDispatch);

// The filter that selects the running test, so that the child's framework
// has a test to run and reaches the environment's SetUp.
std::string CurrentTestFilter() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test == nullptr) return "--gtest_filter=*";
  return std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
}

std::vector<std::string> ChildEnvironment(const ChildBody& body, const std::string& arg) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.starts_with(kBodyVariable) || text.starts_with(kArgVariable)) continue;
    env.emplace_back(text);
  }
  env.push_back(std::string(kBodyVariable) + "=" + body.name());
  env.push_back(std::string(kArgVariable) + "=" + arg);
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

ChildBody::ChildBody(const char* name, ChildBodyFunction function) : name_(name) {
  Bodies().emplace(name, function);
}

Child::Child(const ChildBody& body, const std::string& arg, const std::vector<int>& fds) {
  // Everything the child needs is made before fork().
  std::error_code ec;
  std::vector<std::string> argv_strings = {
      std::filesystem::read_symlink("/proc/self/exe", ec).string(), CurrentTestFilter()};
  std::vector<std::string> env_strings = ChildEnvironment(body, arg);
  std::vector<char*> argv = Pointers(argv_strings);
  std::vector<char*> envp = Pointers(env_strings);
  const int first_free = InheritedFd(static_cast<int>(fds.size()));
  // Copies above the target numbers, so that placing one never closes another.
  std::vector<int> copies;
  for (int fd : fds) copies.push_back(::fcntl(fd, F_DUPFD_CLOEXEC, first_free));
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_fd < 0 || ::dup2(null_fd, STDOUT_FILENO) < 0) ::_exit(127);
    for (size_t i = 0; i < copies.size(); ++i) {
      if (copies[i] < 0 || ::dup2(copies[i], InheritedFd(static_cast<int>(i))) < 0) ::_exit(127);
    }
    ::syscall(SYS_close_range, static_cast<unsigned>(first_free), ~0u, 0u);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    ::_exit(127);
  }
  pid_ = pid;
  for (int copy : copies) {
    if (copy >= 0) ::close(copy);
  }
  if (null_fd >= 0) ::close(null_fd);
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

void Child::Kill() {
  if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
}

std::optional<int> Child::Wait(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_ || (got < 0 && errno != EINTR)) {
      reaped_ = true;
      status_ = got == pid_ ? status : -1;
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace drover::testing

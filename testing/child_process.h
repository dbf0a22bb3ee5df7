// A child process for tests that runs a named body in a fresh exec of the
// test binary itself.
//
// Why not fork() and run a lambda in the copy: a test that forks while
// another of its threads (a service under test) is inside the allocator
// leaves the child a locked allocator. glibc's malloc unlocks it in the child;
// GCC 12's AddressSanitizer does not, and the child blocks forever on its
// first allocation (seen in 1 of ~300 runs of a FeedService test). Between
// fork and exec the child here only calls async-signal-safe functions.
//
// A body is registered at namespace scope and gets one string argument:
//
//   const ChildBody kWriter("writer", [](const std::string& arg) { ... return 0; });
//   Child child(kWriter, "30000 7", {channel.fd()});  // fd is the child's 3
//
// The exec'd binary runs the registered body from a global test environment
// (before any test) and exits with its return value: 125 for an unknown body,
// 126 for an exception.

#ifndef DROVER_TESTING_CHILD_PROCESS_H_
#define DROVER_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace drover::testing {

using ChildBodyFunction = int (*)(const std::string& arg);

// Registers `function` under `name` (unique within the test binary).
class ChildBody {
 public:
  ChildBody(const char* name, ChildBodyFunction function);
  const char* name() const { return name_; }

 private:
  const char* name_;
};

// The descriptor number under which a child sees `fds[index]`.
constexpr int InheritedFd(int index) {
  return 3 + index;
}

// Runs `body(arg)` in a child; `fds[i]` is open in it as InheritedFd(i),
// nothing else of the parent's but stdin and stderr (stdout is /dev/null:
// the child's test framework prints its banner there). The child dies with
// the test (PR_SET_PDEATHSIG). Killed and reaped on destruction if still
// running.
class Child {
 public:
  Child(const ChildBody& body, const std::string& arg, const std::vector<int>& fds = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  void Kill();
  // The wait(2) status once the child is gone; nullopt if it still runs after
  // `timeout` (it is left running).
  std::optional<int> Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace drover::testing

#endif  // DROVER_TESTING_CHILD_PROCESS_H_

// Janitor: a helper process that removes a process's temporary files when
// that process ends, however it ends (SIGKILL included), and stops the
// processes that still name them (an ssh ControlMaster left running with
// its socket in a removed directory).
//
// Janitor::Start runs `<drover> janitor` with a pipe on its stdin. Watch()
// and Forget() send it one line each ("+PATH", "-PATH"). When the pipe ends
// (this process closed it, or died), the janitor SIGTERMs every process
// whose command line names a watched directory, removes every watched path
// (directories with their contents) and exits. The destructor closes the
// pipe and waits (bounded) for the janitor to finish, so a path is gone
// once the Janitor is.
//
// Thread-safe. RunJanitor is the `drover janitor` side.

#ifndef DROVER_OS_JANITOR_H_
#define DROVER_OS_JANITOR_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/mutex.h"
#include "drover/status.h"

namespace drover::os {

class Janitor {
 public:
  // kIoError when the janitor cannot be started.
  static Result<std::unique_ptr<Janitor>> Start(const std::string& drover_binary);
  ~Janitor();
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // `path` (absolute) is removed when this process ends, unless forgotten.
  void Watch(const std::string& path);
  void Forget(const std::string& path);

 private:
  Janitor(pid_t pid, int pidfd, int pipe_fd) : pid_(pid), pidfd_(pidfd), pipe_fd_(pipe_fd) {}
  void Send(char op, const std::string& path);

  Mutex mu_;
  pid_t pid_;
  int pidfd_;
  int pipe_fd_ GUARDED_BY(mu_);
};

// Reads "+PATH" / "-PATH" lines from `fd` until its end, then cleans up as
// described above. Returns the exit code.
int RunJanitor(int fd);

}  // namespace drover::os

#endif  // DROVER_OS_JANITOR_H_

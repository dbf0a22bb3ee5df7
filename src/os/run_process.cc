#include "os/run_process.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "os/fd_io.h"
#include "os/sigpipe_block.h"
#include "os/subprocess.h"

namespace drover::os {

Result<CommandResult> RunProcess(const std::vector<std::string>& argv, const std::string& input,
                                 int timeout_s) {
  using Clock = std::chrono::steady_clock;
  SubprocessOptions spawn;
  spawn.argv = argv;
  spawn.pipe_output = true;
  spawn.pipe_stdin = true;
  Result<Subprocess> started = Subprocess::Spawn(spawn);
  if (!started.ok()) {
    return Status::IoError("cannot run " + argv.front() + ": " + started.status().message());
  }
  Subprocess process = std::move(started).value();
  const std::string timed_out =
      argv.front() + " gave no answer in " + std::to_string(timeout_s) + " s";
  // Input and output move together, so a command that answers before it has
  // read everything (or floods its output) never blocks the other side.
  SigpipeBlock no_sigpipe;
  SetNonBlocking(process.stdin_fd());
  size_t written = 0;
  if (input.empty()) process.CloseStdin();
  CommandResult result;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (process.stdout_fd() >= 0 || process.stderr_fd() >= 0) {
    pollfd fds[3] = {{process.stdout_fd(), POLLIN, 0},
                     {process.stderr_fd(), POLLIN, 0},
                     {process.stdin_fd(), POLLOUT, 0}};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status::DeadlineExceeded(timed_out);
    if (::poll(fds, 3, static_cast<int>(left)) < 0 && errno != EINTR) {
      return Status::IoError(std::string("poll: ") + std::strerror(errno));
    }
    if (process.stdin_fd() >= 0 && fds[2].revents != 0) {
      // A reader that is gone (EPIPE, POLLERR) takes no more: stop writing.
      if (!WriteAvailable(process.stdin_fd(), input, &written) || written == input.size()) {
        process.CloseStdin();
      }
    }
    if (process.stdout_fd() >= 0 && !ReadAvailable(process.stdout_fd(), &result.output)) {
      process.CloseStdout();
    }
    if (process.stderr_fd() >= 0 && !ReadAvailable(process.stderr_fd(), &result.error)) {
      process.CloseStderr();
    }
  }
  process.CloseStdin();
  std::optional<ExitStatus> status = process.Wait(deadline);
  if (!status) return Status::DeadlineExceeded(timed_out);
  result.exit_code = status->ShellCode();
  return result;
}

}  // namespace drover::os

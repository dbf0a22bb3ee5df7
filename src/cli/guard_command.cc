#include "cli/guard_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agent/process_guard.h"
#include "os/janitor.h"

namespace drover::cli {
namespace {

struct GuardFlags {
  double grace = 10;
  bool exit_with_stdin = false;
  int report_fd = -1;
  std::vector<std::string> remove_at_exit;
  std::vector<std::string> command;
};

int RunGuardCommand(const GuardFlags& flags) {
  GuardOptions options;
  options.command = flags.command;
  options.grace = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(flags.grace));
  options.exit_with_stdin = flags.exit_with_stdin;
  options.remove_at_exit = flags.remove_at_exit;
  if (flags.report_fd >= 0 && ::fcntl(flags.report_fd, F_SETFD, FD_CLOEXEC) == 0) {
    options.report_fd = flags.report_fd;  // not inherited by the program
  }
  return RunGuard(options);
}

}  // namespace

void AddGuardCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<GuardFlags>();
  CLI::App* guard = app.add_subcommand(
      "guard",
      "Run COMMAND so that nothing it starts outlives it: processes that leave its process\n"
      "group or session included (drover agent runs every node's program this way).");
  guard
      ->add_option("--grace", flags->grace,
                   "Seconds between SIGTERM and SIGKILL for what COMMAND leaves behind")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  guard->add_flag("--exit-with-stdin", flags->exit_with_stdin,
                  "Stop COMMAND and everything it started when stdin ends: ties them to the\n"
                  "life of the process that holds the other end");
  guard
      ->add_option("--remove-at-exit", flags->remove_at_exit,
                   "A file or directory to remove when the guard exits (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  guard
      ->add_option("--report-fd", flags->report_fd,
                   "Write 'pid N' (or 'error CODE MESSAGE') to this descriptor once COMMAND "
                   "started")
      ->group("");
  guard->add_option("command", flags->command, "The program and its arguments, after --")
      ->required();
  guard->footer(
      "SIGTERM, SIGINT, SIGHUP and SIGQUIT go to COMMAND's process group and every other\n"
      "process below it, SIGUSR1 and SIGUSR2 to COMMAND's group. When COMMAND ends, what it left\n"
      "gets SIGTERM, and SIGKILL after the grace time.\n"
      "COMMAND's stdin is /dev/null.\n"
      "Exit: COMMAND's exit code, or the signal that ended it; 127 when it cannot be started.");
  guard->callback([flags, exit_code] { *exit_code = RunGuardCommand(*flags); });
}

void AddJanitorCommand(CLI::App& app, int* exit_code) {
  CLI::App* janitor = app.add_subcommand(
      "janitor", "Remove a driver's temporary files when it ends (started by the driver)");
  janitor->group("");  // internal: not listed in `drover --help`
  janitor->callback([exit_code] { *exit_code = os::RunJanitor(STDIN_FILENO); });
}

}  // namespace drover::cli

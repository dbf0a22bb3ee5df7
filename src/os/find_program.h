// FindProgram: the executable a program name stands for, found the way
// execvp(3) finds it, so drover can say "not on PATH" before it starts
// anything, and a child is exec'd by full path (between fork and exec only
// async-signal-safe calls are allowed, which rules out a search there).
// The caller passes the search path in (its own PATH, or the one a child
// will get); nothing here reads the environment. Thread-safe.

#ifndef DROVER_OS_FIND_PROGRAM_H_
#define DROVER_OS_FIND_PROGRAM_H_

#include <optional>
#include <string>
#include <string_view>

namespace drover::os {

// `name` itself when it holds a '/' and is executable; else the first
// executable `DIR/name` over the ':'-separated `search_path`, an empty DIR
// meaning the current directory. nullopt when there is none, and for a
// bare name when `search_path` is nullopt (PATH unset).
std::optional<std::string> FindProgram(std::string_view name,
                                       const std::optional<std::string>& search_path);

// The small binary that runs `drover guard` and `drover janitor` with the
// same arguments (drover-guard) when it is installed beside `drover_binary`,
// else `drover_binary` itself: a process started only to guard or clean up
// then loads a few libraries, not all of drover's (bench/RESULTS.md).
std::string GuardBinaryBeside(const std::string& drover_binary);
// The same for `drover agent`: drover-agent beside `drover_binary`, else
// `drover_binary`.
std::string AgentBinaryBeside(const std::string& drover_binary);

}  // namespace drover::os

#endif  // DROVER_OS_FIND_PROGRAM_H_

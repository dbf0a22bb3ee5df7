// Quoting for a POSIX shell: what drover hands to `sh -c`, to ssh (whose
// remote side runs a shell) and to sbatch scripts. Pure functions;
// thread-safe.

#ifndef DROVER_OS_SHELL_QUOTE_H_
#define DROVER_OS_SHELL_QUOTE_H_

#include <string>
#include <vector>

namespace drover::os {

// One argument quoted for a POSIX shell: as it is when every character is
// safe unquoted, else in single quotes.
std::string ShellQuote(const std::string& word);
// The words quoted and joined by spaces: a command line a shell splits back
// into exactly these words.
std::string ShellJoin(const std::vector<std::string>& words);

}  // namespace drover::os

#endif  // DROVER_OS_SHELL_QUOTE_H_

// The processes below a process, read from /proc: what a process that is a
// child subreaper (PR_SET_CHILD_SUBREAPER) holds, since every orphan of its
// subtree is reparented to it, even one that called setsid() or changed its
// process group. Signalling such a tree by its members, not by process
// group, is how drover leaves nothing behind (docs/run.md, "Nothing left
// behind").
//
// A snapshot of /proc is racy by nature: a process may fork or exit between
// the read and the signal. Callers loop (KillDescendants does) until a
// snapshot is empty. Functions are thread-safe; they touch only /proc and the
// processes named.

#ifndef DROVER_OS_PROCESS_TREE_H_
#define DROVER_OS_PROCESS_TREE_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace drover::os {

struct ProcessEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  char state = '?';  // /proc/<pid>/stat's state: R, S, D, Z, T, ...
};

// Parses the text of /proc/<pid>/stat (whose command name may hold spaces
// and parentheses); nullopt when it is not one.
std::optional<ProcessEntry> ParseProcStat(const std::string& text);

// Every process /proc shows now.
std::vector<ProcessEntry> ListProcesses();

// The living (not zombie) processes whose parent chain leads to `root`,
// `root` excluded, parents before their children.
std::vector<pid_t> Descendants(pid_t root);

// Sends `signal` to every living descendant of `root`; returns how many it
// reached.
int SignalDescendants(pid_t root, int signal);

// Whether this process has a child, living or a zombie not yet reaped.
bool HasChildren();

// Reaps the zombies among this process's children. REQUIRES: no other code
// of this process waits for those children (their status is discarded).
void ReapZombieChildren();

// SIGKILLs the descendants of this process until none is left, reaping the
// ones that are (or became) its children, for at most `limit`. Returns
// whether none is left, not even a zombie child. REQUIRES: no other code of this process waits for
// the children it kills (their exit status is discarded).
bool KillOwnDescendants(std::chrono::milliseconds limit);

}  // namespace drover::os

#endif  // DROVER_OS_PROCESS_TREE_H_

#include "os/process_tree.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace drover::os {

std::optional<ProcessEntry> ParseProcStat(const std::string& text) {
  // "pid (comm) state ppid pgrp session ...": comm ends at the last ')'.
  const size_t open = text.find(" (");
  const size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcessEntry entry;
  char* end = nullptr;
  const long pid = std::strtol(text.c_str(), &end, 10);
  if (end != text.c_str() + open || pid <= 0) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  long ppid = -1, pgid = -1, sid = -1;
  if (!(rest >> entry.state >> ppid >> pgid >> sid)) return std::nullopt;
  entry.pid = static_cast<pid_t>(pid);
  entry.ppid = static_cast<pid_t>(ppid);
  entry.pgid = static_cast<pid_t>(pgid);
  entry.sid = static_cast<pid_t>(sid);
  return entry;
}

std::vector<ProcessEntry> ListProcesses() {
  std::vector<ProcessEntry> processes;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return processes;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string text;
    if (!std::getline(stat, text)) continue;  // gone meanwhile
    if (std::optional<ProcessEntry> parsed = ParseProcStat(text)) processes.push_back(*parsed);
  }
  ::closedir(proc);
  return processes;
}

std::vector<pid_t> Descendants(pid_t root) {
  std::multimap<pid_t, const ProcessEntry*> children;
  const std::vector<ProcessEntry> processes = ListProcesses();
  for (const ProcessEntry& process : processes) children.emplace(process.ppid, &process);
  std::vector<pid_t> found;
  std::vector<pid_t> parents = {root};
  while (!parents.empty()) {
    const pid_t parent = parents.back();
    parents.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      const ProcessEntry& child = *it->second;
      if (child.pid == root) continue;
      // A zombie cannot be signalled, but its own orphans are already
      // reparented; nothing below it to find.
      if (child.state == 'Z' || child.state == 'X') continue;
      found.push_back(child.pid);
      parents.push_back(child.pid);
    }
  }
  return found;
}

int SignalDescendants(pid_t root, int signal) {
  int reached = 0;
  for (pid_t pid : Descendants(root)) {
    if (::kill(pid, signal) == 0) ++reached;
  }
  return reached;
}

bool HasChildren() {
  siginfo_t info{};
  for (;;) {
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0) return true;
    if (errno != EINTR) return false;  // ECHILD
  }
}

void ReapZombieChildren() {
  const pid_t self = ::getpid();
  for (const ProcessEntry& process : ListProcesses()) {
    if (process.ppid != self || process.state != 'Z') continue;
    int status = 0;
    while (::waitpid(process.pid, &status, WNOHANG) < 0 && errno == EINTR) {
    }
  }
}

bool KillOwnDescendants(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  const pid_t self = ::getpid();
  for (;;) {
    const int killed = SignalDescendants(self, SIGKILL);
    ReapZombieChildren();
    // A child that died after the reaping is a zombie still to reap.
    if (killed == 0 && !HasChildren()) return true;
    if (std::chrono::steady_clock::now() >= until) {
      return Descendants(self).empty() && !HasChildren();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace drover::os

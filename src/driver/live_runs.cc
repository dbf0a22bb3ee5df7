#include "driver/live_runs.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace drover {
namespace {

namespace fs = std::filesystem;

bool Alive(int pid) {
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

}  // namespace

std::string LiveRunFile(const std::string& dir, int pid) {
  return dir + "/" + std::to_string(pid) + ".json";
}

std::string LiveRunsDir(const Environment& env) {
  std::optional<std::string> runtime = env.Get("XDG_RUNTIME_DIR");
  if (runtime && !runtime->empty() && fs::is_directory(*runtime)) return *runtime + "/drover";
  return "/tmp/drover-" + std::to_string(::getuid());
}

Status RegisterLiveRun(const std::string& dir, const LiveRun& run) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IoError("cannot create " + dir + ": " + std::strerror(errno));
  }
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::getuid() ||
      (info.st_mode & 077) != 0) {
    return Status::PermissionDenied(dir + " is not a private directory of this user; not " +
                                    "announcing the status server there");
  }
  nlohmann::json record{{"pid", run.pid},
                        {"url", run.url},
                        {"cluster_id", run.cluster_id},
                        {"log_dir", run.log_dir},
                        {"token_file", run.token_file},
                        {"started_at", run.started_at}};
  const std::string path = LiveRunFile(dir, run.pid);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << record.dump() << "\n";
    if (!out.flush()) return Status::IoError("cannot write " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

void UnregisterLiveRun(const std::string& dir, int pid) {
  std::remove(LiveRunFile(dir, pid).c_str());
}

std::vector<LiveRun> ListLiveRuns(const std::string& dir) {
  std::vector<LiveRun> runs;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json record = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;
    LiveRun run;
    try {
      run.pid = record.value("pid", 0);
      run.url = record.value("url", "");
      run.cluster_id = record.value("cluster_id", "");
      run.log_dir = record.value("log_dir", "");
      run.token_file = record.value("token_file", "");
      run.started_at = record.value("started_at", 0.0);
    } catch (const nlohmann::json::exception&) {
      continue;  // not one of ours
    }
    if (!Alive(run.pid)) {
      fs::remove(entry.path(), error);
      continue;
    }
    runs.push_back(std::move(run));
  }
  std::sort(runs.begin(), runs.end(),
            [](const LiveRun& a, const LiveRun& b) { return a.started_at < b.started_at; });
  return runs;
}

}  // namespace drover

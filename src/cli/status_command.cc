#include "cli/status_command.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/resolve_command.h"
#include "cli/status_client.h"
#include "driver/status_text.h"

namespace drover::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int ShowFinished(const RunStatusFlags& flags, const fs::path& record_path, std::ostream& out,
                 std::ostream& err) {
  std::ifstream in(record_path);
  std::stringstream text;
  text << in.rdbuf();
  json record = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    err << "drover status: " << record_path.string() << " is not a run record (JSON object)\n";
    return kExitFailure;
  }
  out << (flags.json ? record.dump(2) + "\n" : RenderStatus(record));
  return kExitOk;
}

}  // namespace

int ShowRunStatus(const RunStatusFlags& flags, std::ostream& out, std::ostream& err) {
  if (!flags.target.empty() && fs::is_directory(flags.target) &&
      fs::exists(fs::path(flags.target) / "run.json")) {
    return ShowFinished(flags, fs::path(flags.target) / "run.json", out, err);
  }
  Result<StatusServerRef> server = FindStatusServer(flags.target, flags.token_file);
  if (!server.ok()) {
    err << "drover status: " << server.status().message() << "\n";
    return kExitFailure;
  }
  Result<std::string> bearer = StatusBearer(*server);
  if (!bearer.ok()) {
    err << "drover status: " << bearer.status().message() << "\n";
    return kExitBadInput;
  }
  for (;;) {
    Result<json> cluster = GetStatusJson(server->url, "/api/cluster", *bearer);
    if (!cluster.ok()) {
      err << "drover status: " << cluster.status().message() << "\n";
      return kExitFailure;
    }
    if (flags.json) {
      out << cluster->dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    } else {
      if (flags.watch > 0 && ::isatty(STDOUT_FILENO)) out << "\033[H\033[2J";
      out << RenderStatus(*cluster);
    }
    out << std::flush;
    if (flags.watch <= 0 || RunEnded(*cluster)) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.watch));
    if (!::isatty(STDOUT_FILENO)) out << "\n";
  }
}

}  // namespace drover::cli

#include "driver/status_page_server.h"

#include <unistd.h>

#include <filesystem>

#include "driver/live_runs.h"

namespace drover {

Result<StatusPage> StartStatusPage(StatusPageOptions options, const ClusterToken& token,
                                   const RunStatus& status, std::ostream& err) {
  StatusPage page;
  // The bearer token crosses plain HTTP, so it is the status key, derived for
  // that purpose alone: whoever sees it can read the status, not join or
  // stop the cluster (docs/security.md).
  DROVER_ASSIGN_OR_RETURN(Credential status_key, Credential::ForStatus(token));
  options.server.bearer_token = status_key.ToText();
  if (!IsLoopbackAddress(options.server.address)) {
    // Whoever may read the logs on this host (0600: only this user) can
    // read the status; nobody else can.
    page.token_file = (std::filesystem::path(options.log_dir) / "status.token").string();
    DROVER_RETURN_IF_ERROR(status_key.WriteFile(page.token_file));
  }
  DROVER_ASSIGN_OR_RETURN(page.server, StatusServer::Start(std::move(options.server), status));
  if (!page.server->needs_token()) page.token_file.clear();
  err << "drover run: status page " << page.server->url();
  if (page.server->needs_token()) {
    err << " (wants the status key in " << page.token_file << ": open " << page.server->url()
        << "#token=<its content>)";
  }
  err << "\n" << std::flush;
  if (options.live_runs_dir.empty()) return page;
  LiveRun live;
  live.pid = static_cast<int>(::getpid());
  live.url = page.server->url();
  live.cluster_id = options.cluster_id;
  live.log_dir = options.log_dir;
  live.token_file = page.token_file;
  live.started_at = options.started_at_unix;
  if (Status announced = RegisterLiveRun(options.live_runs_dir, live); !announced.ok()) {
    err << "drover run: drover status will not find this run without its address: "
        << announced.message() << "\n";
    return page;
  }
  page.live_run_file = LiveRunFile(options.live_runs_dir, live.pid);
  return page;
}

}  // namespace drover

#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "driver/driver.h"
#include "driver/live_runs.h"
#include "driver/status_page_server.h"
#include "driver/status_text.h"
#include "os/duration_text.h"

// The driver's status server, its announcement to `drover status`, and the
// end of a run: the final snapshot, the summary and run.json
// (docs/status.md). driver.cc runs the rounds and publishes the snapshots.

namespace drover {
namespace {

namespace fs = std::filesystem;

double SecondsSince(Clock::time_point from) {
  return std::chrono::duration<double>(Clock::now() - from).count();
}

}  // namespace

Status Driver::StartStatusServer() {
  if (options_.status_port < 0) return Status::Ok();
  StatusPageOptions page;
  page.server.address = options_.status_address;
  page.server.port = options_.status_port;
  page.server.allowed_hosts = options_.status_hosts;
  page.log_dir = options_.log_dir;
  page.cluster_id = ClusterId();
  page.started_at_unix = started_at_unix_;
  page.live_runs_dir = options_.live_runs_dir;
  DROVER_ASSIGN_OR_RETURN(StatusPage started,
                          StartStatusPage(std::move(page), *options_.token, status_, err_));
  status_server_ = std::move(started.server);
  status_token_file_ = started.token_file;
  if (janitor_ && !started.live_run_file.empty()) janitor_->Watch(started.live_run_file);
  return Status::Ok();
}

void Driver::StopStatusServer() {
  if (!status_server_) return;
  if (options_.status_linger.count() > 0) {
    err_ << "drover run: serving the final state on " << status_server_->url() << " for "
         << os::SecondsText(options_.status_linger) << " (--status-linger)\n"
         << std::flush;
    std::vector<pollfd> fds;
    if (options_.signal_fd >= 0) fds.push_back({options_.signal_fd, POLLIN, 0});
    if (options_.stop_fd >= 0) fds.push_back({options_.stop_fd, POLLIN, 0});
    Clock::time_point until = Clock::now() + options_.status_linger;
    for (Clock::time_point now = Clock::now(); now < until; now = Clock::now()) {
      auto left = std::chrono::duration_cast<Milliseconds>(until - now);
      if (::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1) > 0) break;
    }
  }
  if (!options_.live_runs_dir.empty()) {
    UnregisterLiveRun(options_.live_runs_dir, static_cast<int>(::getpid()));
  }
  status_server_->Stop();
  status_server_.reset();
}

void Driver::Finish(int code) {
  RunSnapshot snapshot = status_.Snapshot();
  snapshot.phase = code == 0 ? "succeeded" : (code > 128 ? "interrupted" : "failed");
  snapshot.exit_code = code;
  snapshot.elapsed_s = SecondsSince(started_at_);
  if (snapshot.feed) {
    snapshot.feed->records_per_s = snapshot.feed->bytes_per_s = 0;
    snapshot.feed->eta_s.reset();
    snapshot.feed->epoch_eta_s.reset();
  }
  for (NodeSnapshot& node : snapshot.nodes) {
    node.heartbeat_age_s.reset();
    node.records_per_s = node.bytes_per_s = 0;
  }
  progress_.Clear();
  status_.Publish(snapshot);
  if (snapshot.nodes.empty()) return;  // nothing started
  nlohmann::json record = SnapshotToJson(snapshot);
  record["metric_history"] = status_.MetricHistoryJson();
  if (options_.summary) err_ << RenderSummary(record) << std::flush;
  const fs::path path = fs::path(options_.log_dir) / "run.json";
  std::ofstream out(path, std::ios::trunc);
  out << record.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!out.flush()) err_ << "drover run: cannot write " << path.string() << "\n";
}

namespace {

// The node whose reports stand for the run: the chief, else rank 0, else the
// first that reported.
const NodeSnapshot* LeadNode(const RunSnapshot& snapshot) {
  const NodeSnapshot* lead = nullptr;
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.metrics.empty()) continue;
    if (node.chief || (node.rank == 0 && (lead == nullptr || !lead->chief))) {
      lead = &node;
    } else if (lead == nullptr) {
      lead = &node;
    }
  }
  return lead;
}

}  // namespace

void Driver::ObserveTraining(RunSnapshot& snapshot) {
  const double t = snapshot.elapsed_s;
  bool any_step = false;
  for (NodeSnapshot& node : snapshot.nodes) {
    if (node.metrics.empty()) continue;
    status_.AddMetrics(node.Task(), t, node.metrics);
    node.step = HighestStep(node.metrics);
    if (!node.step) continue;
    any_step = true;
    node.step_rate = step_rates_[node.executor_id]
                         .Add(t, static_cast<uint64_t>(std::max<int64_t>(0, *node.step)), 0)
                         .first;
  }
  if (const NodeSnapshot* lead = LeadNode(snapshot)) {
    snapshot.metrics_task = lead->Task();
    snapshot.metrics = lead->metrics;
  }
  // Steps when the programs report them, else the feed; the ranked nodes
  // that still run.
  std::vector<NodeRate> rates;
  for (const NodeSnapshot& node : snapshot.nodes) {
    if (node.state != "running" || !node.rank) continue;
    if (any_step && node.step_rate) {
      rates.push_back({node.executor_id, node.Task(), node.host, *node.step_rate});
    } else if (!any_step && node.feed) {
      rates.push_back({node.executor_id, node.Task(), node.host, node.records_per_s});
    }
  }
  if (snapshot.phase != "running") rates.clear();
  for (const Straggler& straggler : stragglers_.Update(t, rates, any_step ? "step" : "feed")) {
    for (NodeSnapshot& node : snapshot.nodes) {
      if (node.executor_id == straggler.executor_id) node.straggler = straggler.text;
    }
    snapshot.stragglers.push_back(straggler.text);
  }
}

}  // namespace drover

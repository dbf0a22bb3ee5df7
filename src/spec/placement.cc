#include "drover/placement.h"

#include <algorithm>

#include "drover/host_port.h"

namespace drover {
namespace {

std::string TaskName(std::string_view job, int index) {
  return std::string(job) + ":" + std::to_string(index);
}

Result<Placement> Place(std::string_view job, int index, const std::string& address) {
  Result<std::pair<std::string, int>> host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status().WithContext("task " + TaskName(job, index));
  Placement placement;
  placement.job = std::string(job);
  placement.index = index;
  placement.host = host_port->first;
  placement.port = host_port->second;
  return placement;
}

// `ranked` are the training tasks in rank order; fills in each one's ranks
// and feed share.
void Rank(std::vector<Placement>& ranked) {
  std::vector<std::string> hosts;  // in order of first rank
  for (const Placement& task : ranked) {
    if (std::find(hosts.begin(), hosts.end(), task.host) == hosts.end()) hosts.push_back(task.host);
  }
  const int world_size = static_cast<int>(ranked.size());
  for (int r = 0; r < world_size; ++r) {
    Placement& task = ranked[static_cast<size_t>(r)];
    RankInfo info;
    info.rank = r;
    info.world_size = world_size;
    info.master_host = ranked.front().host;
    info.master_port = ranked.front().port;
    info.group_world_size = static_cast<int>(hosts.size());
    info.group_rank =
        static_cast<int>(std::find(hosts.begin(), hosts.end(), task.host) - hosts.begin());
    for (int other = 0; other < world_size; ++other) {
      const Placement& peer = ranked[static_cast<size_t>(other)];
      if (peer.host == task.host) {
        if (other < r) ++info.local_rank;
        ++info.local_world_size;
      }
      if (peer.job == task.job) {
        if (other < r) ++info.role_rank;
        ++info.role_world_size;
      }
    }
    task.rank = info;
    task.feed = FeedShare{r, world_size};
  }
}

}  // namespace

const std::vector<std::string>& TrainingJobs() {
  static const auto* jobs = new std::vector<std::string>{"chief", "master", "worker"};
  return *jobs;
}

bool IsTrainingJob(std::string_view job) {
  const std::vector<std::string>& jobs = TrainingJobs();
  return std::find(jobs.begin(), jobs.end(), job) != jobs.end();
}

bool IsChiefTask(const ClusterSpec& cluster, std::string_view job, int index) {
  if (job == "chief" || job == "master") return true;
  if (cluster.has_job("chief") || cluster.has_job("master")) return false;
  return job == "worker" && index == 0;
}

Result<std::vector<Placement>> LayOutPlacements(const ClusterSpec& cluster,
                                                const std::vector<std::string>& training_jobs) {
  std::vector<Placement> ranked;
  for (const std::string& job : training_jobs) {
    if (!cluster.has_job(job)) continue;
    DROVER_ASSIGN_OR_RETURN(ClusterSpec::TaskMap tasks, cluster.job_task_map(job));
    for (const auto& [index, address] : tasks) {
      DROVER_ASSIGN_OR_RETURN(Placement placement, Place(job, index, address));
      ranked.push_back(std::move(placement));
    }
  }
  Rank(ranked);
  std::vector<Placement> all = std::move(ranked);
  for (const std::string& job : cluster.jobs()) {
    if (std::find(training_jobs.begin(), training_jobs.end(), job) != training_jobs.end()) continue;
    DROVER_ASSIGN_OR_RETURN(ClusterSpec::TaskMap tasks, cluster.job_task_map(job));
    for (const auto& [index, address] : tasks) {
      // Only ranks need a port: an address of another job is kept as it is.
      Result<Placement> placement = Place(job, index, address);
      if (!placement.ok()) {
        placement = Placement{};
        placement->job = job;
        placement->index = index;
        placement->host = address;
      }
      all.push_back(std::move(placement).value());
    }
  }
  for (Placement& placement : all) {
    placement.chief = IsChiefTask(cluster, placement.job, placement.index);
  }
  return all;
}

Result<Placement> PlacementOf(const ClusterSpec& cluster, std::string_view job, int index,
                              const std::vector<std::string>& training_jobs) {
  DROVER_RETURN_IF_ERROR(cluster.task_address(job, index).status());
  DROVER_ASSIGN_OR_RETURN(std::vector<Placement> all, LayOutPlacements(cluster, training_jobs));
  for (Placement& placement : all) {
    if (placement.job == job && placement.index == index) return std::move(placement);
  }
  return Status::NotFound("task " + TaskName(job, index) + " is not in the cluster");
}

}  // namespace drover

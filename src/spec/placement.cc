#include "drover/placement.h"

#include <algorithm>
#include <unordered_map>

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
// and feed share. Linear in the tasks: a whole cluster is laid out at once.
void Rank(std::vector<Placement>& ranked) {
  struct Group {
    int index = 0;  // hosts: in order of first rank
    int size = 0;
  };
  std::unordered_map<std::string, Group> hosts;
  std::unordered_map<std::string, int> job_sizes;
  for (const Placement& task : ranked) {
    auto [host, added] = hosts.try_emplace(task.host);
    if (added) host->second.index = static_cast<int>(hosts.size()) - 1;
    ++host->second.size;
    ++job_sizes[task.job];
  }
  std::unordered_map<std::string, int> seen_on_host;
  std::unordered_map<std::string, int> seen_in_job;
  const int world_size = static_cast<int>(ranked.size());
  for (int r = 0; r < world_size; ++r) {
    Placement& task = ranked[static_cast<size_t>(r)];
    const Group& host = hosts.at(task.host);
    RankInfo info;
    info.rank = r;
    info.world_size = world_size;
    info.master_host = ranked.front().host;
    info.master_port = ranked.front().port;
    info.local_rank = seen_on_host[task.host]++;
    info.local_world_size = host.size;
    info.group_rank = host.index;
    info.group_world_size = static_cast<int>(hosts.size());
    info.role_rank = seen_in_job[task.job]++;
    info.role_world_size = job_sizes.at(task.job);
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

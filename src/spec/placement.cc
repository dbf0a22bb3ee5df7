#include "drover/placement.h"

#include <algorithm>
#include <climits>
#include <map>
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
  placement.ports = {static_cast<uint32_t>(host_port->second)};
  return placement;
}

// `ranked` are the training tasks in rank order; fills in each one's ranks
// and feed share. Linear in the tasks: a whole cluster is laid out at once.
void Rank(const std::vector<Placement*>& ranked) {
  struct Group {
    int index = 0;  // hosts: in order of first rank
    int size = 0;
  };
  std::unordered_map<std::string, Group> hosts;
  std::unordered_map<std::string, int> job_sizes;
  for (const Placement* task : ranked) {
    auto [host, added] = hosts.try_emplace(task->host);
    if (added) host->second.index = static_cast<int>(hosts.size()) - 1;
    ++host->second.size;
    ++job_sizes[task->job];
  }
  std::unordered_map<std::string, int> seen_on_host;
  std::unordered_map<std::string, int> seen_in_job;
  const int world_size = static_cast<int>(ranked.size());
  for (int r = 0; r < world_size; ++r) {
    Placement& task = *ranked[static_cast<size_t>(r)];
    const Placement& master = *ranked.front();
    const Group& host = hosts.at(task.host);
    RankInfo info;
    info.rank = r;
    info.world_size = world_size;
    PointAtMaster(master, info);
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

bool IsChief(bool has_chief_job, std::string_view job, int index) {
  if (job == "chief" || job == "master") return true;
  return !has_chief_job && job == "worker" && index == 0;
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

void PointAtMaster(const Placement& master, RankInfo& rank) {
  rank.master_host = master.host;
  rank.master_port = master.port();
  rank.store_port = master.ports.size() >= 2 ? static_cast<int>(master.ports[1]) : master.port();
}

std::string Placement::Task() const {
  return TaskName(job, index);
}

bool IsChiefTask(const ClusterSpec& cluster, std::string_view job, int index) {
  return IsChief(cluster.has_job("chief") || cluster.has_job("master"), job, index);
}

Status PlaceTasks(std::vector<Placement>& tasks, const std::vector<std::string>& training_jobs) {
  std::map<std::pair<std::string_view, int>, Placement*> by_task;
  bool has_chief_job = false;
  for (Placement& task : tasks) {
    if (!by_task.emplace(std::pair<std::string_view, int>(task.job, task.index), &task).second) {
      return Status::InvalidArgument("task " + task.Task() + " is placed twice");
    }
    has_chief_job = has_chief_job || task.job == "chief" || task.job == "master";
  }
  // by_task is sorted by job name, then index: pick the training jobs out of
  // it in their own order.
  std::vector<Placement*> ranked;
  for (const std::string& job : training_jobs) {
    for (auto it = by_task.lower_bound({job, INT_MIN});
         it != by_task.end() && it->first.first == job; ++it) {
      if (it->second->ports.empty()) {
        return Status::InvalidArgument("task " + it->second->Task() +
                                       " has no port: a training task needs one");
      }
      ranked.push_back(it->second);
    }
  }
  for (Placement& task : tasks) {
    task.chief = IsChief(has_chief_job, task.job, task.index);
    task.rank.reset();
    task.feed.reset();
  }
  if (!ranked.empty()) Rank(ranked);
  return Status::Ok();
}

Result<ClusterSpec> ClusterSpecOf(const std::vector<Placement>& tasks) {
  ClusterSpec spec;
  for (const Placement& task : tasks) {
    if (spec.task_address(task.job, task.index).ok()) {
      return Status::InvalidArgument("task " + task.Task() + " is placed twice");
    }
    std::string address = task.ports.empty() ? task.host : JoinHostPort(task.host, task.port());
    DROVER_RETURN_IF_ERROR(spec.SetTask(task.job, task.index, address));
  }
  return spec;
}

Result<std::vector<Placement>> LayOutPlacements(const ClusterSpec& cluster,
                                                const std::vector<std::string>& training_jobs) {
  std::vector<Placement> all;
  for (const std::string& job : training_jobs) {
    if (!cluster.has_job(job)) continue;
    DROVER_ASSIGN_OR_RETURN(ClusterSpec::TaskMap tasks, cluster.job_task_map(job));
    for (const auto& [index, address] : tasks) {
      DROVER_ASSIGN_OR_RETURN(Placement placement, Place(job, index, address));
      all.push_back(std::move(placement));
    }
  }
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
  DROVER_RETURN_IF_ERROR(PlaceTasks(all, training_jobs));
  // A job the spec names with no tasks still takes the chief role from worker 0.
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

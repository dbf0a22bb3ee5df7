#include "drover/placement.h"

#include <algorithm>
#include <numeric>
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

// `ranked` indexes the training tasks in rank order; fills in each one's
// ranks. Linear in the tasks: a whole cluster is laid out at once.
void Rank(const std::vector<TaskKey>& tasks, const std::vector<uint32_t>& ranked,
          PlacedRoles& out) {
  struct Group {
    uint32_t index = 0;  // hosts: in order of first rank
    uint32_t size = 0;
    uint32_t seen = 0;
  };
  struct Job {
    uint32_t size = 0;
    uint32_t seen = 0;
  };
  std::unordered_map<std::string_view, Group> hosts;
  std::unordered_map<std::string_view, Job> jobs;
  for (uint32_t i : ranked) {
    auto [host, added] = hosts.try_emplace(tasks[i].host);
    if (added) host->second.index = static_cast<uint32_t>(hosts.size()) - 1;
    ++host->second.size;
    ++jobs[tasks[i].job].size;
  }
  for (size_t r = 0; r < ranked.size(); ++r) {
    const TaskKey& task = tasks[ranked[r]];
    Group& host = hosts.at(task.host);
    Job& job = jobs.at(task.job);
    TaskRole& role = out.roles[ranked[r]];
    role.ranked = true;
    role.rank = static_cast<uint32_t>(r);
    role.local_rank = host.seen++;
    role.local_world_size = host.size;
    role.group_rank = host.index;
    role.role_rank = job.seen++;
    role.role_world_size = job.size;
  }
  out.world_size = static_cast<int>(ranked.size());
  out.group_world_size = static_cast<int>(hosts.size());
  out.master = ranked.front();
}

// Compares a task (by its index into `tasks`) with a job name, for
// equal_range over the tasks sorted by job.
struct JobOrder {
  const std::vector<TaskKey>& tasks;
  bool operator()(uint32_t task, std::string_view job) const { return tasks[task].job < job; }
  bool operator()(std::string_view job, uint32_t task) const { return job < tasks[task].job; }
};

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

Result<PlacedRoles> PlaceRoles(const std::vector<TaskKey>& tasks,
                               const std::vector<std::string>& training_jobs) {
  // The tasks' indices sorted by job name, then task index: a task placed
  // twice sits beside its twin, and each job's tasks are a run in order.
  std::vector<uint32_t> by_task(tasks.size());
  std::iota(by_task.begin(), by_task.end(), 0u);
  auto key = [&tasks](uint32_t i) { return std::pair(tasks[i].job, tasks[i].index); };
  std::sort(by_task.begin(), by_task.end(),
            [&key](uint32_t a, uint32_t b) { return key(a) < key(b); });
  bool has_chief_job = false;
  for (size_t i = 0; i < by_task.size(); ++i) {
    const TaskKey& task = tasks[by_task[i]];
    if (i > 0 && key(by_task[i - 1]) == key(by_task[i])) {
      return Status::InvalidArgument("task " + TaskName(task.job, task.index) + " is placed twice");
    }
    has_chief_job = has_chief_job || task.job == "chief" || task.job == "master";
  }
  std::vector<uint32_t> ranked;
  for (const std::string& job : training_jobs) {
    auto run =
        std::equal_range(by_task.begin(), by_task.end(), std::string_view(job), JobOrder{tasks});
    for (auto it = run.first; it != run.second; ++it) {
      const TaskKey& task = tasks[*it];
      if (!task.has_port) {
        return Status::InvalidArgument("task " + TaskName(task.job, task.index) +
                                       " has no port: a training task needs one");
      }
      ranked.push_back(*it);
    }
  }
  by_task = {};
  PlacedRoles out;
  out.roles.resize(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    out.roles[i].chief = IsChief(has_chief_job, tasks[i].job, tasks[i].index);
  }
  if (!ranked.empty()) Rank(tasks, ranked, out);
  return out;
}

RankInfo RankInfoOf(const TaskRole& role, int world_size, int group_world_size) {
  RankInfo info;
  info.rank = static_cast<int>(role.rank);
  info.world_size = world_size;
  info.local_rank = static_cast<int>(role.local_rank);
  info.local_world_size = static_cast<int>(role.local_world_size);
  info.group_rank = static_cast<int>(role.group_rank);
  info.group_world_size = group_world_size;
  info.role_rank = static_cast<int>(role.role_rank);
  info.role_world_size = static_cast<int>(role.role_world_size);
  return info;
}

Status PlaceTasks(std::vector<Placement>& tasks, const std::vector<std::string>& training_jobs) {
  std::vector<TaskKey> keys;
  keys.reserve(tasks.size());
  for (const Placement& task : tasks) {
    keys.push_back(TaskKey{task.job, task.index, task.host, !task.ports.empty()});
  }
  DROVER_ASSIGN_OR_RETURN(PlacedRoles placed, PlaceRoles(keys, training_jobs));
  for (size_t i = 0; i < tasks.size(); ++i) {
    Placement& task = tasks[i];
    const TaskRole& role = placed.roles[i];
    task.chief = role.chief;
    task.rank.reset();
    task.feed.reset();
    if (!role.ranked) continue;
    RankInfo info = RankInfoOf(role, placed.world_size, placed.group_world_size);
    PointAtMaster(tasks[*placed.master], info);
    task.rank = info;
    task.feed = FeedShare{info.rank, info.world_size};
  }
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

// Placement: where one task of a cluster sits and what it is for: its job and
// index, its host, ports and GPUs, whether it is the chief, its ranks among
// the training tasks and its share of the fed input.
//
// The rendezvous server lays out a formed cluster's placements once and
// sends them with the cluster (docs/protocol.md); the agent, the framework
// environment, feeding, the driver and the status views read them.
//
// The role rule lives here and nowhere else:
//  - the training jobs are chief, master and worker, in that order; their
//    tasks are ranked in that order and by task index (rank 0 is the
//    coordinator: MASTER_ADDR, JAX's coordinator) and each gets a share of
//    the input, in the same order;
//  - the chief is the chief or master task, or worker 0 in a cluster that
//    has neither (TensorFlow's rule);
//  - ps and evaluator tasks get neither a rank nor input.
// LOCAL_RANK counts earlier ranks on the same host; GROUP_RANK numbers hosts
// in order of their first rank, as torchrun numbers nodes.
//
// Values and pure functions; thread-safe.

#ifndef DROVER_PLACEMENT_H_
#define DROVER_PLACEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/cluster_spec.h"
#include "drover/status.h"

namespace drover {

// One task's position among the ranked (training) tasks.
struct RankInfo {
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
  int local_world_size = 0;
  int group_rank = 0;        // the host's index
  int group_world_size = 0;  // number of hosts
  int role_rank = 0;         // index among ranked tasks of the same job
  int role_world_size = 0;
  std::string master_host;
  int master_port = 0;  // rank 0's address port (a TensorFlow server takes it)
  // Rank 0's second reserved port, for torch's store (MASTER_PORT), when it
  // reserved one; else master_port.
  int store_port = 0;
  friend bool operator==(const RankInfo&, const RankInfo&) = default;
};

// Which share of the input a fed task gets, of how many.
struct FeedShare {
  int share = 0;
  int shares = 0;
  friend bool operator==(const FeedShare&, const FeedShare&) = default;
};

struct Placement {
  std::string job;
  int index = 0;
  std::string host;
  std::vector<uint32_t> ports;  // ports[0] is the task's address port
  std::vector<int32_t> gpus;    // the GPUs it may use; empty: none or not known
  bool chief = false;
  std::optional<RankInfo> rank;   // training tasks only
  std::optional<FeedShare> feed;  // training tasks only

  int port() const { return ports.empty() ? 0 : static_cast<int>(ports.front()); }
  std::string Task() const;  // "worker:1"
  friend bool operator==(const Placement&, const Placement&) = default;
};

// The training jobs, in rank order: {"chief", "master", "worker"}.
const std::vector<std::string>& TrainingJobs();
bool IsTrainingJob(std::string_view job);

// Whether task `job`:`index` is the chief of `cluster` (see above). True for
// the chief and master jobs even when `cluster` lacks them.
bool IsChiefTask(const ClusterSpec& cluster, std::string_view job, int index);

// Sets `rank`'s master_host, master_port and store_port from rank 0's
// placement: the one place that says which of its ports torch's store takes.
void PointAtMaster(const Placement& master, RankInfo& rank);

// Fills in every task's chief, ranks and feed share from its job, index and
// host, keeping the order of `tasks`. kInvalidArgument naming the task when
// two tasks have the same job and index, or a training task has no port.
Status PlaceTasks(std::vector<Placement>& tasks,
                  const std::vector<std::string>& training_jobs = TrainingJobs());

// What PlaceRoles reads of a task; the strings are borrowed for the call.
struct TaskKey {
  std::string_view job;
  int index = 0;
  std::string_view host;
  bool has_port = false;
};

// What PlaceTasks decides for one task, without a string: whether it is the
// chief and, for a training task, its ranks. The sizes every ranked task
// shares and rank 0 are PlacedRoles's. 28 bytes, where a Placement is about
// 300: what a rendezvous server of 100,000 nodes keeps of each.
struct TaskRole {
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t local_world_size = 0;
  uint32_t group_rank = 0;
  uint32_t role_rank = 0;
  uint32_t role_world_size = 0;
  bool chief = false;
  bool ranked = false;
  friend bool operator==(const TaskRole&, const TaskRole&) = default;
};

struct PlacedRoles {
  std::vector<TaskRole> roles;  // roles[i] is tasks[i]'s
  int world_size = 0;
  int group_world_size = 0;
  std::optional<size_t> master;  // rank 0's task; none when no task is ranked
};

// PlaceTasks on borrowed keys, the one implementation of the role rule:
// the same decisions and errors, without copying a string.
Result<PlacedRoles> PlaceRoles(const std::vector<TaskKey>& tasks,
                               const std::vector<std::string>& training_jobs = TrainingJobs());

// A ranked role as a RankInfo; its master fields are PointAtMaster's to set.
RankInfo RankInfoOf(const TaskRole& role, int world_size, int group_world_size);

// The cluster spec of placed tasks: job -> "host:ports[0]" (or the host alone
// for a task without ports).
Result<ClusterSpec> ClusterSpecOf(const std::vector<Placement>& tasks);

// Every task's placement: the training tasks in rank order, then the others
// in the cluster's job order, by index. `training_jobs` replaces TrainingJobs() (e.g. a
// resolver's caller that ranks only "worker"). kInvalidArgument naming the
// task when an address is not HOST:PORT.
Result<std::vector<Placement>> LayOutPlacements(
    const ClusterSpec& cluster, const std::vector<std::string>& training_jobs = TrainingJobs());

// One task's placement; kNotFound when `cluster` has no such task.
Result<Placement> PlacementOf(const ClusterSpec& cluster, std::string_view job, int index,
                              const std::vector<std::string>& training_jobs = TrainingJobs());

}  // namespace drover

#endif  // DROVER_PLACEMENT_H_

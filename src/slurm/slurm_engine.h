// SlurmEngine: drover inside a Slurm allocation (salloc, or an sbatch script;
// docs/slurm.md). Each agent (a node's, or one for a Slurm node's tasks:
// LaunchHost) is one task of its own job step,
//   srun --nodes=1 --ntasks=1 --nodelist=NODE --exact --kill-on-bad-exit=1 ...
// placed on the allocation's nodes in the order of SLURM_JOB_NODELIST, as
// many per node as SLURM_TASKS_PER_NODE gives (--ntasks-per-node). The node's
// cluster address is its NodeAddr (`scontrol show node`), since Slurm node
// names need not resolve. srun passes the driver's environment, so the agents
// find the rendezvous and their role from it; the node credential goes in on
// stdin (srun forwards it to the task) and its end of file stops the node, as
// with the ssh engine. Killing srun cancels the step: nothing is left on the
// nodes.

#ifndef DROVER_SLURM_SLURM_ENGINE_H_
#define DROVER_SLURM_SLURM_ENGINE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/environment.h"
#include "engine/engine.h"

namespace drover::slurm {

// The allocation drover runs in, from the variables Slurm sets.
struct Allocation {
  std::string job_id;
  std::vector<std::string> nodes;    // SLURM_JOB_NODELIST, expanded
  std::vector<int> tasks_per_node;   // SLURM_TASKS_PER_NODE, expanded (one per node)
  std::optional<int> gpus_per_task;  // SLURM_GPUS_PER_TASK
  std::optional<int> cpus_per_task;  // SLURM_CPUS_PER_TASK
};

// kFailedPrecondition when not inside an allocation (no SLURM_JOB_ID);
// kInvalidArgument naming the variable when one is malformed.
Result<Allocation> AllocationFromEnvironment(const Environment& env);

struct SlurmEngineOptions {
  Allocation allocation;
  std::string srun = "srun";
  std::string scontrol = "scontrol";
  std::string driver_address;             // "": the local address routed to the first node
  std::vector<std::string> srun_options;  // extra srun flags (--srun-option)
};

class SlurmEngine : public Engine {
 public:
  // Looks up each node's NodeAddr; kUnavailable when scontrol cannot say.
  static Result<std::unique_ptr<SlurmEngine>> Create(SlurmEngineOptions options);

  std::string name() const override { return "slurm"; }
  std::string rendezvous_host() const override { return driver_address_; }
  std::string agent_host(int executor_index) const override;
  // "node n2 (127.0.0.1)".
  std::string agent_location(int executor_index) const override;
  Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) override;
  // One step a node for its tasks' nodes (one task with their CPUs): not with
  // --gpus-per-task, whose GPUs Slurm binds a task each.
  bool StartsHostAgents() const override { return !options_.allocation.gpus_per_task; }
  std::vector<std::vector<int>> NodesByHost(int count) const override;
  Result<std::vector<std::unique_ptr<AgentProcess>>> LaunchHost(const HostLaunch& launch) override;

  int total_tasks() const { return static_cast<int>(slots_.size()); }
  // The Slurm node name of a task ("n2").
  const std::string& node_of(int executor_index) const;
  // The same, for an executor id ("2"); "" for one the allocation lacks.
  const std::string& NodeOfExecutor(const std::string& executor_id) const;

 private:
  explicit SlurmEngine(SlurmEngineOptions options) : options_(std::move(options)) {}
  // srun and its flags for one step on `node` named `name`, with the CPUs of
  // `tasks_worth` tasks.
  std::vector<std::string> StepArgv(const std::string& node, const std::string& name,
                                    int tasks_worth) const;
  static std::function<std::string(const os::ExitStatus&)> DescribeStepExit(
      const std::string& node);

  SlurmEngineOptions options_;
  std::map<std::string, std::string> addresses_;  // node name -> NodeAddr
  std::vector<std::string> slots_;                // executor index -> node name
  std::string driver_address_;
};

// NodeAddr of every node in `scontrol show node -o` output.
std::map<std::string, std::string> ParseNodeAddresses(std::string_view scontrol_output);

}  // namespace drover::slurm

#endif  // DROVER_SLURM_SLURM_ENGINE_H_

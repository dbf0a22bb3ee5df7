#include "slurm/slurm_engine.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "drover/hostlist.h"
#include "engine/launcher_agent.h"
#include "os/run_process.h"
#include "ssh/ssh_engine.h"

namespace drover::slurm {
namespace {

Result<std::optional<int>> PositiveVariable(const Environment& env, std::string_view name) {
  std::optional<std::string> text = env.Get(name);
  if (!text || text->empty()) return std::optional<int>();
  int value = 0;
  // Slurm writes "2" or, for some counts, "2(x3)": the first number holds.
  auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || value <= 0) {
    return Status::InvalidArgument(std::string(name) + "='" + *text + "' is not a positive number");
  }
  (void)end;
  return std::optional<int>(value);
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

}  // namespace

Result<Allocation> AllocationFromEnvironment(const Environment& env) {
  Allocation allocation;
  std::optional<std::string> job = env.Get("SLURM_JOB_ID");
  if (!job || job->empty()) {
    return Status::FailedPrecondition(
        "--engine slurm runs inside a Slurm allocation (salloc, or an sbatch script: "
        "SLURM_JOB_ID is not set); from outside, use drover submit");
  }
  allocation.job_id = *job;
  std::optional<std::string> nodelist = env.Get("SLURM_JOB_NODELIST");
  if (!nodelist) nodelist = env.Get("SLURM_NODELIST");
  if (!nodelist || nodelist->empty()) {
    return Status::InvalidArgument("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not");
  }
  Result<std::vector<std::string>> nodes = ExpandHostlist(*nodelist);
  if (!nodes.ok()) return nodes.status().WithContext("SLURM_JOB_NODELIST");
  allocation.nodes = std::move(nodes).value();
  std::optional<std::string> tasks = env.Get("SLURM_TASKS_PER_NODE");
  if (tasks && !tasks->empty()) {
    Result<std::vector<int>> counts = ExpandTasksPerNode(*tasks);
    if (!counts.ok()) return counts.status().WithContext("SLURM_TASKS_PER_NODE");
    allocation.tasks_per_node = std::move(counts).value();
    if (allocation.tasks_per_node.size() != allocation.nodes.size()) {
      return Status::InvalidArgument("SLURM_TASKS_PER_NODE='" + *tasks + "' gives " +
                                     std::to_string(allocation.tasks_per_node.size()) +
                                     " nodes, SLURM_JOB_NODELIST='" + *nodelist + "' " +
                                     std::to_string(allocation.nodes.size()));
    }
  } else {
    allocation.tasks_per_node.assign(allocation.nodes.size(), 1);
  }
  DROVER_ASSIGN_OR_RETURN(allocation.gpus_per_task, PositiveVariable(env, "SLURM_GPUS_PER_TASK"));
  DROVER_ASSIGN_OR_RETURN(allocation.cpus_per_task, PositiveVariable(env, "SLURM_CPUS_PER_TASK"));
  return allocation;
}

std::map<std::string, std::string> ParseNodeAddresses(std::string_view scontrol_output) {
  std::map<std::string, std::string> addresses;
  std::istringstream lines{std::string(scontrol_output)};
  for (std::string line; std::getline(lines, line);) {
    std::string name, address;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word.rfind("NodeName=", 0) == 0) name = word.substr(9);
      if (word.rfind("NodeAddr=", 0) == 0) address = word.substr(9);
    }
    if (!name.empty() && !address.empty()) addresses[name] = address;
  }
  return addresses;
}

Result<std::unique_ptr<SlurmEngine>> SlurmEngine::Create(SlurmEngineOptions options) {
  std::unique_ptr<SlurmEngine> engine(new SlurmEngine(std::move(options)));
  const Allocation& allocation = engine->options_.allocation;
  if (allocation.nodes.empty()) return Status::InvalidArgument("the allocation has no nodes");
  std::string nodes;
  for (size_t i = 0; i < allocation.nodes.size(); ++i) {
    nodes += (i == 0 ? "" : ",") + allocation.nodes[i];
    for (int task = 0; task < allocation.tasks_per_node[i]; ++task) {
      engine->slots_.push_back(allocation.nodes[i]);
    }
  }
  Result<os::CommandResult> shown =
      os::RunProcess({engine->options_.scontrol, "show", "node", "-o", nodes}, "", 30);
  if (!shown.ok() || shown->exit_code != 0) {
    return Status::Unavailable(
        "cannot look up the allocation's node addresses with scontrol show node: " +
        (shown.ok() ? shown->error : shown.status().message()));
  }
  engine->addresses_ = ParseNodeAddresses(shown->output);
  for (const std::string& node : allocation.nodes) {
    // A node scontrol does not describe keeps its name (it may resolve).
    engine->addresses_.emplace(node, node);
  }
  engine->driver_address_ = engine->options_.driver_address;
  if (engine->driver_address_.empty()) {
    const std::string& first = engine->addresses_[allocation.nodes.front()];
    if (IsLoopback(first)) {
      engine->driver_address_ = "127.0.0.1";
    } else {
      Result<std::string> local = ssh::LocalAddressTowards(first);
      if (!local.ok()) {
        return Status::Unavailable("cannot pick the driver address the nodes reach (" +
                                   local.status().message() + "); give --driver-address");
      }
      engine->driver_address_ = *local;
    }
  }
  return engine;
}

const std::string& SlurmEngine::node_of(int executor_index) const {
  static const std::string kNone;
  if (executor_index < 0 || static_cast<size_t>(executor_index) >= slots_.size()) return kNone;
  return slots_[static_cast<size_t>(executor_index)];
}

std::string SlurmEngine::agent_host(int executor_index) const {
  const std::string& node = node_of(executor_index);
  auto found = addresses_.find(node);
  return found == addresses_.end() ? node : found->second;
}

std::string SlurmEngine::agent_location(int executor_index) const {
  const std::string& node = node_of(executor_index);
  const std::string address = agent_host(executor_index);
  return "node " + node + (address == node ? "" : " (" + address + ")");
}

std::vector<std::string> SlurmEngine::StepArgv(const std::string& node, const std::string& name,
                                               int tasks_worth) const {
  const Allocation& allocation = options_.allocation;
  std::vector<std::string> argv = {options_.srun,        "--nodes=1", "--ntasks=1",
                                   "--nodelist=" + node, "--exact",   "--kill-on-bad-exit=1",
                                   "--job-name=" + name, "--input=0"};
  if (allocation.cpus_per_task) {
    argv.push_back("--cpus-per-task=" + std::to_string(*allocation.cpus_per_task * tasks_worth));
  }
  if (allocation.gpus_per_task) {
    argv.push_back("--gpus-per-task=" + std::to_string(*allocation.gpus_per_task));
  }
  argv.insert(argv.end(), options_.srun_options.begin(), options_.srun_options.end());
  return argv;
}

std::function<std::string(const os::ExitStatus&)> SlurmEngine::DescribeStepExit(
    const std::string& node) {
  const std::string where = "its task on " + node;
  // srun exits with its task's code, 128 + signal for a killed task (the
  // agent, or the program whose signal the agent passed on).
  return [where](const os::ExitStatus& status) {
    const int code = status.exit_code();
    if (status.signaled()) return "its srun was " + status.ToString();
    if (code > 128 && code < 128 + 65) {
      return where + " was killed by " + os::SignalName(code - 128) + " (srun exit code " +
             std::to_string(code) + ")";
    }
    return where + " ended with exit code " + std::to_string(code);
  };
}

const std::string& SlurmEngine::NodeOfExecutor(const std::string& executor_id) const {
  int index = -1;
  std::from_chars(executor_id.data(), executor_id.data() + executor_id.size(), index);
  return node_of(index);
}

Result<std::unique_ptr<AgentProcess>> SlurmEngine::Launch(const AgentLaunch& launch) {
  const std::string& node = NodeOfExecutor(launch.executor_id);
  if (node.empty()) {
    return Status::InvalidArgument("cannot start executor " + launch.executor_id +
                                   ": the allocation has " + std::to_string(slots_.size()) +
                                   " tasks");
  }
  std::vector<std::string> agent = launch.argv;
  DROVER_ASSIGN_OR_RETURN(std::string token, TokenToStdin(&agent));
  // Not "--unbuffered": the agent writes whole lines.
  std::vector<std::string> argv = StepArgv(node, "drover-" + launch.executor_id, 1);
  argv.insert(argv.end(), agent.begin(), agent.end());
  return StartThroughLauncher(launch.executor_id, argv, token, DescribeStepExit(node));
}

std::vector<std::vector<int>> SlurmEngine::NodesByHost(int count) const {
  return GroupByHost(std::min(count, total_tasks()), [this](int i) { return node_of(i); });
}

Result<std::vector<std::unique_ptr<AgentProcess>>> SlurmEngine::LaunchHost(
    const HostLaunch& launch) {
  DROVER_ASSIGN_OR_RETURN(RelayedHostAgent agent, RelayedHostAgentArgv(launch));
  const std::string& node = NodeOfExecutor(agent.ids.front());
  for (const std::string& id : agent.ids) {
    if (node.empty() || NodeOfExecutor(id) != node) {
      return Status::InvalidArgument("executors " + agent.ids.front() + " and " + id +
                                     " are not tasks of one node");
    }
  }
  // One task with the CPUs of the node's tasks; frames, not lines, so srun
  // forwards them as they come.
  std::vector<std::string> argv =
      StepArgv(node, "drover-" + agent.ids.front() + "-" + agent.ids.back(),
               static_cast<int>(agent.ids.size()));
  argv.push_back("--unbuffered");
  argv.insert(argv.end(), agent.agent_argv.begin(), agent.agent_argv.end());
  return StartHostThroughLauncher(agent.ids, argv, agent.credentials, DescribeStepExit(node));
}

}  // namespace drover::slurm

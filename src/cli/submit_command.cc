#include "cli/submit_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/resolve_command.h"
#include "cli/status_command.h"
#include "drover/environment.h"
#include "engine/local_engine.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"
#include "slurm/slurm_jobs.h"

namespace drover::cli {
namespace {

// Slurm's client commands, found on this process's PATH.
slurm::SlurmTools ClientTools() {
  slurm::SlurmTools tools;
  tools.search_path = ProcessEnvironment().Get("PATH");
  return tools;
}

using Clock = std::chrono::steady_clock;

struct SubmitFlags {
  std::string engine;
  slurm::SubmitOptions job;
  std::string log_dir;
  bool follow = false;
  std::vector<std::string> command;  // the words after --
};

struct CancelFlags {
  std::string job_id;
  std::string signal;
};

// Set by SIGINT/SIGTERM while --follow runs.
volatile std::sig_atomic_t g_follow_signal = 0;

void OnFollowSignal(int signal) {
  g_follow_signal = signal;
}

// The words of `args` before the first "--": the options submit does not
// know, for `drover run` in the job.
std::vector<std::string> WordsBeforeMark(const std::vector<std::string>& args) {
  auto mark = std::find(args.begin(), args.end(), "--");
  return std::vector<std::string>(args.begin(), mark);
}

// ./drover-logs/submit-YYYYmmdd-HHMMSS[-N], created.
Result<std::string> MakeLogDir(const std::string& given) {
  std::error_code error;
  if (!given.empty()) {
    std::filesystem::path dir = std::filesystem::absolute(given, error).lexically_normal();
    std::filesystem::create_directories(dir, error);
    if (error) {
      return Status::IoError("cannot create the log directory " + dir.string() + ": " +
                             error.message());
    }
    return dir.string();
  }
  std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  std::filesystem::path parent = std::filesystem::current_path(error) / "drover-logs";
  std::filesystem::create_directories(parent, error);
  if (error) {
    return Status::IoError("cannot create " + parent.string() + ": " + error.message());
  }
  for (int n = 1; n < 1000; ++n) {
    std::string name = std::string("submit-") + stamp + (n == 1 ? "" : "-" + std::to_string(n));
    std::filesystem::path dir = parent / name;
    // create_directory is false when it exists: another submit this second.
    if (std::filesystem::create_directory(dir, error)) return dir.string();
    if (error) return Status::IoError("cannot create " + dir.string() + ": " + error.message());
  }
  return Status::IoError("cannot find a free log directory under " + parent.string());
}

Status WriteScript(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::trunc);
  file << text;
  file.close();
  if (!file) return Status::IoError("cannot write " + path);
  if (::chmod(path.c_str(), 0755) != 0) {
    return Status::IoError("chmod " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

// "COMPLETED (exit code 0)", "CANCELLED (exit code 143, SIGTERM)".
std::string Outcome(const slurm::JobInfo& job) {
  std::string text = job.state + " (exit code " + std::to_string(slurm::JobExitCode(job));
  if (job.signal != 0) text += ", " + os::SignalName(job.signal);
  return text + ")";
}

// Streams what the job writes to its output file as the file grows.
class OutputFollower {
 public:
  explicit OutputFollower(std::string path) : path_(std::move(path)) {}

  // Before the file is opened, Slurm's StdOut is the better name.
  void SetPath(const std::string& path) {
    if (!fd_.valid() && !path.empty()) path_ = path;
  }
  const std::string& path() const { return path_; }

  // Copies what is new to `out`; whether anything was.
  bool Pump(std::ostream& out) {
    if (!fd_.valid()) {
      fd_.Reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd_.valid()) return false;
    }
    const int fd = fd_.get();
    // A requeued job starts its output file again.
    struct stat info {};
    if (::fstat(fd, &info) == 0 && info.st_size < ::lseek(fd, 0, SEEK_CUR)) {
      ::lseek(fd, 0, SEEK_SET);
    }
    bool grew = false;
    char buffer[65536];
    for (;;) {
      ssize_t got = ::read(fd, buffer, sizeof(buffer));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      out.write(buffer, got);
      grew = true;
    }
    if (grew) out.flush();
    return grew;
  }

 private:
  std::string path_;
  os::UniqueFd fd_;
};

// --follow: the job's output until it ends, then its exit code.
int Follow(const slurm::SlurmTools& tools, const std::string& job_id, OutputFollower& output,
           std::ostream& out, std::ostream& err) {
  struct sigaction action {};
  action.sa_handler = OnFollowSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: the wait between polls ends at once
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  g_follow_signal = 0;
  auto restore = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  };

  constexpr auto kPoll = std::chrono::milliseconds(500);
  constexpr auto kGiveUpOnErrors = std::chrono::seconds(60);
  std::optional<slurm::JobInfo> ended;
  // Slurm not answering: retried for a while (slurmctld restarting).
  bool failing = false;
  Clock::time_point failing_since;
  std::string last_state;
  int quiet_polls = 0;
  for (;;) {
    if (g_follow_signal != 0) {
      output.Pump(out);
      int signal = g_follow_signal;
      err << "drover submit: stopped following job " << job_id << "; it goes on (drover cancel "
          << job_id << " ends it; output in " << output.path() << ")\n";
      restore();
      return 128 + signal;
    }
    const bool grew = output.Pump(out);
    if (!ended) {
      Result<std::optional<slurm::JobInfo>> shown = slurm::ShowJob(tools, job_id);
      if (!shown.ok()) {
        if (shown.status().code() == Status::Code::kNotFound) {
          err << "drover submit: " << shown.status().message() << "\n";
          restore();
          return kExitFailure;
        }
        if (!failing) failing_since = Clock::now();
        failing = true;
        if (Clock::now() - failing_since > kGiveUpOnErrors) {
          err << "drover submit: stopped following job " << job_id << ": "
              << shown.status().message() << "\n";
          restore();
          return kExitFailure;
        }
      } else if (!shown->has_value()) {
        // Gone from slurmctld's memory (MinJobAge) before we saw it end.
        output.Pump(out);
        restore();
        if (std::optional<slurm::JobInfo> accounted = slurm::AccountedJob(tools, job_id)) {
          err << "drover submit: job " << job_id << " " << Outcome(*accounted) << "\n";
          return slurm::JobExitCode(*accounted);
        }
        err << "drover submit: job " << job_id
            << " finished (state unknown: scontrol no longer knows it)\n";
        return kExitFailure;
      } else {
        failing = false;
        const slurm::JobInfo& job = **shown;
        output.SetPath(job.std_out);
        if (slurm::IsFinalState(job.state)) {
          ended = job;
        } else if (job.state != last_state) {
          err << "drover submit: job " << job_id << " is " << job.state;
          if (job.state == "RUNNING" && !job.nodes.empty()) {
            err << " on " << job.nodes;
          } else if (!job.reason.empty() && job.reason != "None") {
            err << " (" << job.reason << ")";
          }
          err << "\n";
        }
        last_state = job.state;
      }
    }
    if (ended) {
      // The job has ended; its last lines may still be on their way to the file.
      quiet_polls = grew ? 0 : quiet_polls + 1;
      if (quiet_polls >= 2) break;
    }
    std::this_thread::sleep_for(kPoll);
  }
  restore();
  output.Pump(out);
  err << "drover submit: job " << job_id << " " << Outcome(*ended) << "\n";
  return slurm::JobExitCode(*ended);
}

int RunSubmit(SubmitFlags flags, const std::vector<std::string>& extras) {
  std::ostream& err = std::cerr;
  if (flags.engine != "slurm") {
    err << "drover submit: --engine takes slurm (the only engine with a queue to submit to), "
           "not '"
        << flags.engine << "'\n";
    return kExitBadInput;
  }
  flags.job.run_options = WordsBeforeMark(extras);
  flags.job.command = flags.command;
  if (flags.job.command.empty()) {
    err << "drover submit: no command; give it after --, e.g. drover submit --engine slurm "
           "--nodes 2 --time 10 -- python3 train.py\n";
    return kExitBadInput;
  }
  if (Status valid = slurm::CheckTimeLimit(flags.job.time); !valid.ok()) {
    err << "drover submit: " << valid.message() << "\n";
    return kExitBadInput;
  }
  Result<std::string> self = SelfExecutable();
  if (!self.ok()) {
    err << "drover submit: " << self.status().message() << "\n";
    return kExitFailure;
  }
  flags.job.drover_binary = *self;
  std::error_code error;
  flags.job.working_dir = std::filesystem::current_path(error).string();
  if (error) {
    err << "drover submit: the current directory: " << error.message() << "\n";
    return kExitFailure;
  }
  // Check what can be checked before anything is written.
  flags.job.log_dir = "/nonexistent";
  if (Result<std::string> trial = slurm::BatchScript(flags.job); !trial.ok()) {
    err << "drover submit: " << trial.status().message() << "\n";
    return kExitBadInput;
  }
  Result<std::string> log_dir = MakeLogDir(flags.log_dir);
  if (!log_dir.ok()) {
    err << "drover submit: " << log_dir.status().message() << "\n";
    return kExitFailure;
  }
  flags.job.log_dir = *log_dir;
  Result<std::string> script = slurm::BatchScript(flags.job);
  if (!script.ok()) {
    err << "drover submit: " << script.status().message() << "\n";
    return kExitBadInput;
  }
  const std::string script_path = flags.job.log_dir + "/job.sbatch";
  if (Status written = WriteScript(script_path, *script); !written.ok()) {
    err << "drover submit: " << written.message() << "\n";
    return kExitFailure;
  }

  slurm::SlurmTools tools = ClientTools();
  std::string warnings;
  Result<std::string> job_id = slurm::SubmitScript(tools, script_path, &warnings);
  if (!job_id.ok()) {
    if (job_id.status().code() == Status::Code::kFailedPrecondition) {
      // sbatch's own words ("sbatch: error: invalid partition specified: x").
      err << job_id.status().message() << "\n";
      err << "drover submit: sbatch refused the job (script: " << script_path << ")\n";
    } else {
      err << "drover submit: " << job_id.status().message() << "\n";
    }
    return kExitFailure;
  }
  if (!warnings.empty()) err << warnings << "\n";
  const std::string output_path = slurm::OutputPath(flags.job.log_dir, *job_id);
  err << "drover submit: submitted job " << *job_id << "; output in " << output_path << "\n";
  std::cout << *job_id << std::endl;
  if (!flags.follow) return kExitOk;
  OutputFollower output(output_path);
  return Follow(tools, *job_id, output, std::cout, err);
}

void PrintJob(const slurm::JobInfo& job, const std::vector<slurm::JobStep>& steps,
              std::ostream& out) {
  out << "job " << job.job_id << " (" << job.name << "): " << job.state << "\n";
  auto row = [&out](const std::string& label, const std::string& value) {
    out << "  " << std::left << std::setw(11) << label << value << "\n";
  };
  if (!job.nodes.empty()) {
    row("nodes", job.nodes + " (" + std::to_string(job.num_nodes) + ")");
  }
  if (!job.partition.empty()) row("partition", job.partition);
  row("time", job.run_time + " of " + job.time_limit);
  if (!job.reason.empty() && job.reason != "None") row("reason", job.reason);
  if (slurm::IsFinalState(job.state)) {
    std::string code = std::to_string(job.exit_code);
    if (job.signal != 0) code += " (" + os::SignalName(job.signal) + ")";
    row("exit code", code);
  }
  if (!job.std_out.empty()) row("output", job.std_out);
  if (steps.empty()) return;
  size_t id_width = 4, name_width = 4, time_width = 4;
  for (const slurm::JobStep& step : steps) {
    id_width = std::max(id_width, step.step_id.size());
    name_width = std::max(name_width, step.name.size());
    time_width = std::max(time_width, step.time.size());
  }
  out << "  steps:\n";
  auto step_row = [&](const std::string& id, const std::string& name, const std::string& time,
                      const std::string& nodes) {
    out << "    " << std::left << std::setw(static_cast<int>(id_width) + 2) << id
        << std::setw(static_cast<int>(name_width) + 2) << name
        << std::setw(static_cast<int>(time_width) + 2) << time << nodes << "\n";
  };
  step_row("STEP", "NAME", "TIME", "NODES");
  for (const slurm::JobStep& step : steps) step_row(step.step_id, step.name, step.time, step.nodes);
}

int RunStatus(const RunStatusFlags& flags) {
  std::ostream& err = std::cerr;
  if (flags.list || !flags.other.empty() ||
      ClassifyStatusTarget(flags.target) != StatusTarget::kSlurmJob) {
    return ShowRunStatus(flags, std::cout, err);
  }
  const std::string& target = flags.target;
  slurm::SlurmTools tools = ClientTools();
  Result<std::optional<slurm::JobInfo>> shown = slurm::ShowJob(tools, target);
  if (!shown.ok()) {
    err << "drover status: " << shown.status().message() << "\n";
    return kExitFailure;
  }
  if (!shown->has_value()) {
    if (std::optional<slurm::JobInfo> accounted = slurm::AccountedJob(tools, target)) {
      std::cout << "job " << target << ": " << accounted->state << " (exit code "
                << accounted->exit_code << ")\n";
      return kExitOk;
    }
    err << "drover status: no job " << target << "\n";
    return kExitFailure;
  }
  const slurm::JobInfo& job = **shown;
  std::vector<slurm::JobStep> steps;
  if (job.state == "RUNNING") {
    Result<std::vector<slurm::JobStep>> listed = slurm::ListSteps(tools, target);
    if (listed.ok()) steps = std::move(listed).value();
  }
  PrintJob(job, steps, std::cout);
  return kExitOk;
}

int RunCancel(const CancelFlags& flags) {
  std::ostream& err = std::cerr;
  if (!slurm::IsJobId(flags.job_id)) {
    err << "drover cancel: '" << flags.job_id
        << "' is not a Slurm job id (digits, or JOB_TASK for an array task)\n";
    return kExitBadInput;
  }
  slurm::SlurmTools tools = ClientTools();
  // scancel says nothing and exits 0 for a job it does not know: ask first.
  Result<std::optional<slurm::JobInfo>> shown = slurm::ShowJob(tools, flags.job_id);
  if (!shown.ok()) {
    err << "drover cancel: " << shown.status().message() << "\n";
    return kExitFailure;
  }
  if (!shown->has_value()) {
    err << "drover cancel: no job " << flags.job_id << "\n";
    return kExitFailure;
  }
  if (slurm::IsFinalState((*shown)->state)) {
    err << "drover cancel: job " << flags.job_id << " has already ended (" << (*shown)->state
        << ")\n";
    return kExitFailure;
  }
  if (Status cancelled = slurm::CancelJob(tools, flags.job_id, flags.signal); !cancelled.ok()) {
    if (cancelled.code() == Status::Code::kFailedPrecondition) {
      err << cancelled.message() << "\n";  // scancel's own words
    } else {
      err << "drover cancel: " << cancelled.message() << "\n";
    }
    return kExitFailure;
  }
  if (flags.signal.empty()) {
    err << "drover cancel: cancelled job " << flags.job_id << "\n";
  } else {
    err << "drover cancel: sent " << flags.signal << " to job " << flags.job_id << "\n";
  }
  return kExitOk;
}

void AddSubmit(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<SubmitFlags>();
  CLI::App* submit = app.add_subcommand(
      "submit",
      "Submit COMMAND as a Slurm batch job that runs `drover run --engine slurm` in its\n"
      "allocation; print the job id on stdout and, with --follow, the job's output until it\n"
      "ends (docs/slurm.md). Options submit does not know go to `drover run` in the job.");
  // The run options pass through: unknown options, and their values, stay in
  // remaining() (the command positional takes only words after --).
  submit->allow_extras();
  submit->validate_positionals();
  submit->add_option("--engine", flags->engine, "Where the job goes: slurm")->required();
  submit->add_option("--nodes,-N", flags->job.nodes, "Slurm nodes to allocate (sbatch --nodes)")
      ->required()
      ->check(CLI::PositiveNumber);
  submit
      ->add_option("--time,-t", flags->job.time,
                   "Time limit: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
      ->required();
  submit
      ->add_option("--ntasks-per-node", flags->job.ntasks_per_node,
                   "drover nodes (agents) per Slurm node")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  submit->add_option("--gpus-per-task", flags->job.gpus_per_task, "GPUs for each drover node")
      ->check(CLI::NonNegativeNumber);
  submit->add_option("--cpus-per-task", flags->job.cpus_per_task, "CPUs for each drover node")
      ->check(CLI::PositiveNumber);
  submit->add_option("--partition,-p", flags->job.partition,
                     "Slurm partition (default: the "
                     "cluster's)");
  submit->add_option("--job-name,-J", flags->job.job_name, "Slurm job name")->capture_default_str();
  submit
      ->add_option("--sbatch-option", flags->job.sbatch_options,
                   "One more #SBATCH line, e.g. --sbatch-option=--mem=8G or\n"
                   "--sbatch-option account=ml (repeatable)")
      ->allow_extra_args(false);
  submit->add_option("--log-dir", flags->log_dir,
                     "Where job.sbatch, slurm-<id>.out and run-<id>/ go (default\n"
                     "./drover-logs/submit-<time>; must be visible on the nodes)");
  submit->add_flag("--follow,-f", flags->follow,
                   "Print the job's output as it comes and exit with its exit code");
  CLI::Validator after_mark(
      [submit](std::string&) -> std::string {
        std::vector<std::string> seen = submit->remaining();
        return std::find(seen.begin(), seen.end(), "--") != seen.end() ? "" : "a run option";
      },
      "", "after --");
  submit->add_option("command", flags->command, "The program and its arguments, after --")
      ->check(after_mark);
  submit->footer(
      "Examples:\n"
      "  drover submit --engine slurm --nodes 2 --time 30 --follow -- python3 train.py\n"
      "  JOB=$(drover submit --engine slurm -N 3 -t 1:00:00 --gpus-per-task 1 \\\n"
      "        --workers 2 --ps 1 --input 'data/*.csv' --epochs 40 -- python3 train.py)\n"
      "  drover status $JOB; drover cancel $JOB\n"
      "Exit codes: 0 submitted (with --follow: the job's exit code; 128+signal when it was\n"
      "killed, 1 when it failed otherwise), 1 sbatch refused or failed, 2 bad input.");
  submit->callback(
      [flags, submit, exit_code] { *exit_code = RunSubmit(*flags, submit->remaining()); });
}

void AddStatus(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<RunStatusFlags>();
  CLI::App* status = app.add_subcommand(
      "status",
      "Show a run: its phase, rendezvous, feed progress and every node (role, host, pid,\n"
      "state, heartbeat, exit, records), from a running driver's status server or a\n"
      "finished run's log directory; or a Slurm job drover submitted. With --list, the\n"
      "finished runs of a directory; with two runs, the two side by side.");
  status->add_option("target", flags->target,
                     "HOST:PORT of a driver's status server (drover run printed it), a run's\n"
                     "log directory (or its run id under ./drover-logs), a Slurm job id, or\n"
                     "etcd://HOST:PORT[,...]/RUN (nodes formed through etcd);\n"
                     "none: the run going on here. With --list: the directory of runs");
  status->add_option("other", flags->other,
                     "A second run (log directory, run id or HOST:PORT): compare the two");
  status->add_flag("--list", flags->list,
                   "List the finished runs in TARGET (default ./drover-logs), newest first:\n"
                   "id, start, duration, result, nodes, records, last metrics, command");
  status->add_option("--token-file", flags->token_file,
                     "For a status server beyond loopback: the run's status.token, or the\n"
                     "cluster token (only the status key derived from it is sent)");
  status->add_flag("--json", flags->json, "Print the status server's /api/cluster JSON");
  flags->etcd.AddTo(status, "etcd:// targets: ");
  status->add_option("--watch", flags->watch, "Redraw every SECONDS until the run ends")
      ->check(CLI::PositiveNumber);
  status->footer(
      "Examples:\n"
      "  drover status                       # the run going on here\n"
      "  drover status 127.0.0.1:41231 --json\n"
      "  drover status drover-logs/run-20261125-080000-1a2b\n"
      "  drover status --list                # the runs in ./drover-logs\n"
      "  drover status run-20261125-080000-1a2b run-20261125-093000-3c4d\n"
      "  drover status 1234                  # a Slurm job from drover submit\n"
      "  drover status etcd://127.0.0.1:2379/run1  # agents formed through etcd\n"
      "Exit codes: 0 shown, 1 nothing to show (no such run or job, unreachable, refused),\n"
      "2 bad input.");
  status->callback([flags, exit_code] { *exit_code = RunStatus(*flags); });
}

void AddCancel(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<CancelFlags>();
  CLI::App* cancel = app.add_subcommand(
      "cancel", "Cancel a Slurm job (scancel), or send its processes a signal with --signal.");
  cancel->add_option("job", flags->job_id, "The Slurm job id")->required();
  cancel->add_option("--signal,-s", flags->signal,
                     "Send this signal (USR1, TERM, 10, ...) instead of cancelling");
  cancel->footer(
      "Exit codes: 0 done, 1 no such job, already ended, or scancel failed, 2 bad "
      "input.");
  cancel->callback([flags, exit_code] { *exit_code = RunCancel(*flags); });
}

}  // namespace

StatusTarget ClassifyStatusTarget(const std::string& target) {
  return slurm::IsJobId(target) ? StatusTarget::kSlurmJob : StatusTarget::kAddress;
}

void AddSubmitCommands(CLI::App& app, int* exit_code) {
  AddSubmit(app, exit_code);
  AddStatus(app, exit_code);
  AddCancel(app, exit_code);
}

}  // namespace drover::cli

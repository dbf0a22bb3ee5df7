// Slurm batch jobs from outside an allocation (`drover submit`, `drover
// status`, `drover cancel`; docs/slurm.md): the batch script that runs
// `drover run --engine slurm` in the allocation, the job's state as
// `scontrol show job -o` reports it, and the client commands (sbatch,
// scontrol, squeue, scancel, sacct) run through PATH with a timeout each.
//
// Plain functions over values; the Slurm commands are run as child processes
// (drover::os::Subprocess), so every call here may block up to
// SlurmTools::timeout_s. Nothing here keeps state; thread-safe.

#ifndef DROVER_SLURM_SLURM_JOBS_H_
#define DROVER_SLURM_SLURM_JOBS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"
#include "os/run_process.h"

namespace drover::slurm {

// What `drover submit` asks of Slurm and of the `drover run` in the job.
struct SubmitOptions {
  int nodes = 1;
  int ntasks_per_node = 1;
  std::string time;  // Slurm's --time syntax (CheckTimeLimit)
  std::optional<int> gpus_per_task;
  std::optional<int> cpus_per_task;
  std::string partition;  // "": the cluster's default
  std::string job_name = "drover";
  // Each becomes one `#SBATCH OPTION` line ("--mem=4G"; "mem=4G" gets the "--").
  std::vector<std::string> sbatch_options;
  // Absolute paths: where the script, sbatch's output and the run's logs go;
  // where the job starts; the drover binary the job runs.
  std::string log_dir;
  std::string working_dir;
  std::string drover_binary;
  // `drover run` options, verbatim ("--workers", "2", "--input", "d/*.csv").
  std::vector<std::string> run_options;
  std::vector<std::string> command;  // REQUIRES: not empty
};

// kInvalidArgument unless `time` is one of Slurm's forms: MINUTES, MM:SS,
// HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED/INFINITE.
Status CheckTimeLimit(std::string_view time);

// Whether `text` names a Slurm job: digits, optionally _TASK for an array
// task ("1234", "1234_7").
bool IsJobId(std::string_view text);

// "<log_dir>/slurm-%j.out": sbatch's --output pattern, and the path for a job.
std::string OutputPattern(const std::string& log_dir);
std::string OutputPath(const std::string& log_dir, const std::string& job_id);

// The batch script: #!/bin/bash, the #SBATCH lines, `cd` to the working
// directory, `exec drover run --engine slurm --log-dir <log_dir>/run-$SLURM_JOB_ID
// <run options> -- <command>`, every word shell-quoted. kInvalidArgument for
// a bad --time, counts below 1, or a value sbatch cannot take on an #SBATCH
// line (a double quote or a newline).
Result<std::string> BatchScript(const SubmitOptions& options);

// The job id in `sbatch --parsable` output ("1234" or "1234;cluster").
// kInvalidArgument when there is none.
Result<std::string> ParseSubmittedJobId(std::string_view sbatch_output);

// One job as `scontrol show job -o` shows it.
struct JobInfo {
  std::string job_id;
  std::string name;
  std::string state;   // "PENDING", "RUNNING", "COMPLETED", "CANCELLED", ...
  std::string reason;  // "None", "Resources", "NonZeroExitCode", ...
  int exit_code = 0;   // ExitCode=A:B: A, the batch script's code
  int signal = 0;      //                B, the signal that ended it
  std::string nodes;   // NodeList, "n[1-2]"; "" before the job starts
  int num_nodes = 0;
  std::string std_out;  // StdOut, with %j resolved by Slurm
  std::string run_time;
  std::string time_limit;
  std::string partition;
};

// Every job in `scontrol show job -o` output (one per line; an array has
// several). Values may hold spaces ("JobName=a b"): a word without '=' or
// starting like a key continues the value before it.
std::vector<JobInfo> ParseJobs(std::string_view scontrol_output);

// Whether `state` is one a job does not leave: COMPLETED, FAILED, CANCELLED,
// TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL, DEADLINE.
bool IsFinalState(std::string_view state);

// The exit code `drover submit --follow` ends with for a finished job: the
// script's code; else 128 + the signal; else 0 for COMPLETED and 1 otherwise.
int JobExitCode(const JobInfo& job);

// "COMPLETED|0:0" lines of `sacct -X -n -P -o State,ExitCode` for the job;
// nullopt when there are none. Only state, exit_code and signal are set.
std::optional<JobInfo> ParseSacct(std::string_view sacct_output, const std::string& job_id);

// One job step of `squeue -h -s -o "%i|%j|%M|%N"`.
struct JobStep {
  std::string step_id;  // "12.0", "12.batch"
  std::string name;
  std::string time;
  std::string nodes;
};
std::vector<JobStep> ParseSteps(std::string_view squeue_output);

// The Slurm client commands, looked up in PATH.
struct SlurmTools {
  std::string sbatch = "sbatch";
  std::string scontrol = "scontrol";
  std::string squeue = "squeue";
  std::string scancel = "scancel";
  std::string sacct = "sacct";
  int timeout_s = 60;
  // Where a bare program name above is looked up: the caller's PATH
  // (Environment::Get("PATH")); nullopt finds only names with a '/'.
  std::optional<std::string> search_path;
};

// Runs argv to its end; the result's `error` is its stderr, verbatim.
// kNotFound naming the program when it is not on PATH (Slurm's client
// commands not installed here); kDeadlineExceeded after tools.timeout_s;
// kIoError when it cannot be started.
Result<os::CommandResult> RunSlurmCommand(const std::vector<std::string>& argv,
                                          const SlurmTools& tools);

// `sbatch --parsable SCRIPT`: the job id. kFailedPrecondition carrying
// sbatch's stderr verbatim when it refuses ("sbatch: error: invalid
// partition specified: x"); errors of RunSlurmCommand as they are.
// `warnings` gets whatever sbatch wrote on stderr when it succeeded.
Result<std::string> SubmitScript(const SlurmTools& tools, const std::string& script_path,
                                 std::string* warnings);

// `scontrol show job -o JOB`: nullopt when Slurm does not know the job
// (never did, or forgot it after MinJobAge). kUnavailable with scontrol's
// message when it fails otherwise (slurmctld down).
Result<std::optional<JobInfo>> ShowJob(const SlurmTools& tools, const std::string& job_id);

// The job from accounting (sacct); nullopt when sacct is absent, accounting
// is disabled, or it does not know the job.
std::optional<JobInfo> AccountedJob(const SlurmTools& tools, const std::string& job_id);

// The job's running steps (`squeue -s -j JOB`); empty when there are none.
Result<std::vector<JobStep>> ListSteps(const SlurmTools& tools, const std::string& job_id);

// `scancel [--signal=SIG] JOB`. kFailedPrecondition carrying scancel's
// stderr verbatim when it fails.
Status CancelJob(const SlurmTools& tools, const std::string& job_id, const std::string& signal);

}  // namespace drover::slurm

#endif  // DROVER_SLURM_SLURM_JOBS_H_

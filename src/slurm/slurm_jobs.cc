#include "slurm/slurm_jobs.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "os/find_program.h"
#include "os/shell_quote.h"

namespace drover::slurm {
namespace {

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

// A value on an #SBATCH line: sbatch splits the line at blanks and takes
// double quotes, so a value with blanks is quoted and one with a quote or a
// newline cannot be written at all.
Result<std::string> SbatchValue(const std::string& what, const std::string& value) {
  if (value.find_first_of("\"\n\r") != std::string::npos) {
    return Status::InvalidArgument(what + " '" + value +
                                   "' holds a double quote or a newline, which an #SBATCH line "
                                   "cannot carry");
  }
  if (value.find_first_of(" \t") != std::string::npos) return "\"" + value + "\"";
  return value;
}

// "A:B" of ExitCode=.
void ParseExitCode(std::string_view text, JobInfo* job) {
  std::vector<std::string_view> parts = Split(text, ':');
  if (parts.size() >= 1 && AllDigits(parts[0]))
    job->exit_code = std::atoi(std::string(parts[0]).c_str());
  if (parts.size() >= 2 && AllDigits(parts[1]))
    job->signal = std::atoi(std::string(parts[1]).c_str());
}

// A word of `scontrol -o` output that starts a new Key=Value: the key is
// letters, digits and the ':' '/' '_' '.' of "AllocNode:Sid", "CPUs/Task".
bool StartsKey(std::string_view word) {
  size_t equals = word.find('=');
  if (equals == std::string_view::npos || equals == 0) return false;
  if (!std::isalpha(static_cast<unsigned char>(word.front()))) return false;
  for (char c : word.substr(0, equals)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != ':' && c != '/' && c != '_' &&
        c != '.') {
      return false;
    }
  }
  return true;
}

JobInfo ParseJobLine(std::string_view line) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (std::string_view word : Split(line, ' ')) {
    if (word.empty()) continue;
    if (StartsKey(word) || fields.empty()) {
      size_t equals = word.find('=');
      fields.emplace_back(
          std::string(word.substr(0, equals)),
          equals == std::string_view::npos ? "" : std::string(word.substr(equals + 1)));
    } else {
      fields.back().second += " ";
      fields.back().second += word;
    }
  }
  JobInfo job;
  for (const auto& [key, value] : fields) {
    if (key == "JobId") {
      job.job_id = value;
    } else if (key == "JobName") {
      job.name = value;
    } else if (key == "JobState") {
      job.state = value;
    } else if (key == "Reason") {
      job.reason = value;
    } else if (key == "ExitCode") {
      ParseExitCode(value, &job);
    } else if (key == "NodeList") {
      job.nodes = value == "(null)" ? "" : value;
    } else if (key == "NumNodes") {
      // "2" or a range "2-3" while pending.
      job.num_nodes = std::atoi(value.c_str());
    } else if (key == "StdOut") {
      job.std_out = value;
    } else if (key == "RunTime") {
      job.run_time = value;
    } else if (key == "TimeLimit") {
      job.time_limit = value;
    } else if (key == "Partition") {
      job.partition = value;
    }
  }
  // Array tasks: JobId is the task's own id; ArrayJobId_ArrayTaskId is how
  // the user names it.
  std::string array_job, array_task;
  for (const auto& [key, value] : fields) {
    if (key == "ArrayJobId") array_job = value;
    if (key == "ArrayTaskId") array_task = value;
  }
  if (!array_job.empty() && !array_task.empty()) job.job_id = array_job + "_" + array_task;
  return job;
}

std::string FirstLine(const std::string& text) {
  std::string_view trimmed = Trim(text);
  return std::string(trimmed.substr(0, trimmed.find('\n')));
}

}  // namespace

Status CheckTimeLimit(std::string_view time) {
  const Status bad = Status::InvalidArgument(
      "--time '" + std::string(time) +
      "' is not a Slurm time limit: give MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS");
  if (time == "UNLIMITED" || time == "INFINITE" || time == "unlimited" || time == "infinite") {
    return Status::Ok();
  }
  std::string_view clock = time;
  if (size_t dash = time.find('-'); dash != std::string_view::npos) {
    if (!AllDigits(time.substr(0, dash))) return bad;
    clock = time.substr(dash + 1);
    // D-HH, D-HH:MM, D-HH:MM:SS
    std::vector<std::string_view> parts = Split(clock, ':');
    if (parts.size() > 3) return bad;
    for (std::string_view part : parts) {
      if (!AllDigits(part) || part.size() > 2) return bad;
    }
    return Status::Ok();
  }
  // MINUTES, MM:SS, HH:MM:SS
  std::vector<std::string_view> parts = Split(clock, ':');
  if (parts.size() > 3) return bad;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!AllDigits(parts[i])) return bad;
    if (i > 0 && parts[i].size() > 2) return bad;
  }
  return Status::Ok();
}

bool IsJobId(std::string_view text) {
  size_t underscore = text.find('_');
  if (underscore == std::string_view::npos) return AllDigits(text);
  return AllDigits(text.substr(0, underscore)) && AllDigits(text.substr(underscore + 1));
}

std::string OutputPattern(const std::string& log_dir) {
  return log_dir + "/slurm-%j.out";
}

std::string OutputPath(const std::string& log_dir, const std::string& job_id) {
  return log_dir + "/slurm-" + job_id + ".out";
}

Result<std::string> BatchScript(const SubmitOptions& options) {
  DROVER_RETURN_IF_ERROR(CheckTimeLimit(options.time));
  if (options.nodes < 1) return Status::InvalidArgument("--nodes must be at least 1");
  if (options.ntasks_per_node < 1) {
    return Status::InvalidArgument("--ntasks-per-node must be at least 1");
  }
  if (options.command.empty()) return Status::InvalidArgument("no command to run");
  std::vector<std::string> lines = {
      "#!/bin/bash",
      "# Written by `drover submit`: runs `drover run --engine slurm` in the allocation.",
      "#SBATCH --nodes=" + std::to_string(options.nodes),
      "#SBATCH --ntasks-per-node=" + std::to_string(options.ntasks_per_node),
      "#SBATCH --time=" + options.time,
  };
  DROVER_ASSIGN_OR_RETURN(std::string name, SbatchValue("--job-name", options.job_name));
  if (options.job_name.empty()) return Status::InvalidArgument("--job-name is empty");
  lines.push_back("#SBATCH --job-name=" + name);
  DROVER_ASSIGN_OR_RETURN(std::string output,
                          SbatchValue("--log-dir", OutputPattern(options.log_dir)));
  lines.push_back("#SBATCH --output=" + output);
  if (options.gpus_per_task) {
    lines.push_back("#SBATCH --gpus-per-task=" + std::to_string(*options.gpus_per_task));
  }
  if (options.cpus_per_task) {
    lines.push_back("#SBATCH --cpus-per-task=" + std::to_string(*options.cpus_per_task));
  }
  if (!options.partition.empty()) {
    DROVER_ASSIGN_OR_RETURN(std::string partition, SbatchValue("--partition", options.partition));
    lines.push_back("#SBATCH --partition=" + partition);
  }
  for (const std::string& option : options.sbatch_options) {
    if (option.find_first_of("\n\r") != std::string::npos || Trim(option).empty()) {
      return Status::InvalidArgument("--sbatch-option '" + option +
                                     "' is empty or holds a newline");
    }
    std::string text(Trim(option));
    lines.push_back("#SBATCH " + (text.front() == '-' ? text : "--" + text));
  }
  lines.push_back("");
  lines.push_back("cd " + os::ShellQuote(options.working_dir) + " || exit 1");
  std::string exec = "exec " + os::ShellQuote(options.drover_binary) +
                     " run --engine slurm --log-dir " + os::ShellQuote(options.log_dir + "/run-") +
                     "\"$SLURM_JOB_ID\"";
  if (!options.run_options.empty()) exec += " " + os::ShellJoin(options.run_options);
  exec += " -- " + os::ShellJoin(options.command);
  lines.push_back(exec);
  std::string script;
  for (const std::string& line : lines) script += line + "\n";
  return script;
}

Result<std::string> ParseSubmittedJobId(std::string_view sbatch_output) {
  // --parsable: "ID" or "ID;CLUSTER" on the last line (warnings may precede).
  std::string_view text = Trim(sbatch_output);
  size_t newline = text.rfind('\n');
  std::string_view line = newline == std::string_view::npos ? text : text.substr(newline + 1);
  std::string_view id = Trim(line.substr(0, line.find(';')));
  if (!IsJobId(id)) {
    return Status::InvalidArgument("sbatch --parsable printed no job id: '" + std::string(text) +
                                   "'");
  }
  return std::string(id);
}

std::vector<JobInfo> ParseJobs(std::string_view scontrol_output) {
  std::vector<JobInfo> jobs;
  for (std::string_view line : Split(scontrol_output, '\n')) {
    line = Trim(line);
    if (line.rfind("JobId=", 0) != 0) continue;
    jobs.push_back(ParseJobLine(line));
  }
  return jobs;
}

bool IsFinalState(std::string_view state) {
  // "CANCELLED by 0" in some versions' output.
  std::string_view word = state.substr(0, state.find(' '));
  for (std::string_view final_state : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                       "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}) {
    if (word == final_state) return true;
  }
  return false;
}

int JobExitCode(const JobInfo& job) {
  if (job.exit_code != 0) return job.exit_code;
  if (job.signal != 0) return 128 + job.signal;
  return job.state == "COMPLETED" ? 0 : 1;
}

std::optional<JobInfo> ParseSacct(std::string_view sacct_output, const std::string& job_id) {
  for (std::string_view line : Split(sacct_output, '\n')) {
    std::vector<std::string_view> fields = Split(Trim(line), '|');
    if (fields.size() < 2 || fields[0].empty()) continue;
    JobInfo job;
    job.job_id = job_id;
    job.state = std::string(fields[0].substr(0, fields[0].find(' ')));
    ParseExitCode(fields[1], &job);
    return job;
  }
  return std::nullopt;
}

std::vector<JobStep> ParseSteps(std::string_view squeue_output) {
  std::vector<JobStep> steps;
  for (std::string_view line : Split(squeue_output, '\n')) {
    std::vector<std::string_view> fields = Split(Trim(line), '|');
    if (fields.size() < 4 || fields[0].empty()) continue;
    steps.push_back({std::string(fields[0]), std::string(fields[1]), std::string(fields[2]),
                     std::string(fields[3])});
  }
  return steps;
}

Result<os::CommandResult> RunSlurmCommand(const std::vector<std::string>& argv,
                                          const SlurmTools& tools) {
  if (argv.empty()) return Status::InvalidArgument("no Slurm command to run");
  std::optional<std::string> program = os::FindProgram(argv.front(), tools.search_path);
  if (!program) {
    return Status::NotFound("'" + argv.front() +
                            "' is not on PATH: Slurm's client commands are not installed here "
                            "(or PATH lacks them)");
  }
  std::vector<std::string> resolved = argv;
  resolved.front() = *program;
  return os::RunProcess(resolved, "", tools.timeout_s);
}

Result<std::string> SubmitScript(const SlurmTools& tools, const std::string& script_path,
                                 std::string* warnings) {
  DROVER_ASSIGN_OR_RETURN(os::CommandResult done,
                          RunSlurmCommand({tools.sbatch, "--parsable", script_path}, tools));
  if (done.exit_code != 0) {
    std::string message(Trim(done.error));
    if (message.empty()) {
      message = tools.sbatch + " failed (exit code " + std::to_string(done.exit_code) + ")";
    }
    return Status::FailedPrecondition(message);
  }
  if (warnings != nullptr) *warnings = std::string(Trim(done.error));
  return ParseSubmittedJobId(done.output);
}

Result<std::optional<JobInfo>> ShowJob(const SlurmTools& tools, const std::string& job_id) {
  DROVER_ASSIGN_OR_RETURN(os::CommandResult done,
                          RunSlurmCommand({tools.scontrol, "show", "job", "-o", job_id}, tools));
  if (done.exit_code != 0) {
    if (done.error.find("Invalid job id") != std::string::npos) {
      return std::optional<JobInfo>();
    }
    std::string message = FirstLine(done.error);
    return Status::Unavailable(
        "scontrol show job " + job_id + ": " +
        (message.empty() ? "exit code " + std::to_string(done.exit_code) : message));
  }
  std::vector<JobInfo> jobs = ParseJobs(done.output);
  if (jobs.empty()) return std::optional<JobInfo>();
  for (const JobInfo& job : jobs) {
    if (job.job_id == job_id) return std::optional<JobInfo>(job);
  }
  return std::optional<JobInfo>(jobs.front());
}

std::optional<JobInfo> AccountedJob(const SlurmTools& tools, const std::string& job_id) {
  Result<os::CommandResult> done =
      RunSlurmCommand({tools.sacct, "-X", "-n", "-P", "-o", "State,ExitCode", "-j", job_id}, tools);
  if (!done.ok() || done->exit_code != 0) return std::nullopt;
  return ParseSacct(done->output, job_id);
}

Result<std::vector<JobStep>> ListSteps(const SlurmTools& tools, const std::string& job_id) {
  DROVER_ASSIGN_OR_RETURN(
      os::CommandResult done,
      RunSlurmCommand({tools.squeue, "-h", "-s", "-j", job_id, "-o", "%i|%j|%M|%N"}, tools));
  if (done.exit_code != 0) {
    return Status::Unavailable("squeue -s -j " + job_id + ": " + FirstLine(done.error));
  }
  return ParseSteps(done.output);
}

Status CancelJob(const SlurmTools& tools, const std::string& job_id, const std::string& signal) {
  std::vector<std::string> argv = {tools.scancel};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(job_id);
  DROVER_ASSIGN_OR_RETURN(os::CommandResult done, RunSlurmCommand(argv, tools));
  // scancel may say "error:" and still exit 0 (a job id it does not know).
  std::string message(Trim(done.error));
  if (done.exit_code != 0 || message.find("error") != std::string::npos) {
    if (message.empty()) {
      message = tools.scancel + " failed (exit code " + std::to_string(done.exit_code) + ")";
    }
    return Status::FailedPrecondition(message);
  }
  return Status::Ok();
}

}  // namespace drover::slurm

// `drover submit`, `drover status`, `drover cancel`: Slurm batch jobs from
// outside an allocation (docs/slurm.md). submit writes a batch script that
// runs `drover run --engine slurm` in the allocation, hands it to sbatch and
// can follow the job's output to its end; status and cancel look a job up
// and end it. Registered on the CLI app by AddSubmitCommands; the work is in
// src/slurm/slurm_jobs.h.

#ifndef DROVER_CLI_SUBMIT_COMMAND_H_
#define DROVER_CLI_SUBMIT_COMMAND_H_

#include <CLI/CLI.hpp>
#include <string>

namespace drover::cli {

// Adds submit, status and cancel; their callbacks store the exit code in *exit_code.
void AddSubmitCommands(CLI::App& app, int* exit_code);

// What `drover status TARGET` looks at: a Slurm job id (digits, optionally
// _TASK), or else the address of a driver's status page.
enum class StatusTarget { kSlurmJob, kAddress };
StatusTarget ClassifyStatusTarget(const std::string& target);

}  // namespace drover::cli

#endif  // DROVER_CLI_SUBMIT_COMMAND_H_

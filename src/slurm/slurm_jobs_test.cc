// drover submit's batch script, Slurm's time syntax, and what scontrol,
// sacct and squeue print. (Runs against a real Slurm are in
// tests/slurm/test_slurm_submit.py.)

#include "slurm/slurm_jobs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "testing/status_matchers.h"

namespace drover::slurm {
namespace {

using ::drover::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

SubmitOptions Options() {
  SubmitOptions options;
  options.nodes = 2;
  options.time = "10";
  options.log_dir = "/home/u/drover-logs/submit-1";
  options.working_dir = "/home/u/project";
  options.drover_binary = "/opt/drover/bin/drover";
  options.command = {"python3", "train.py"};
  return options;
}

// What bash's word splitting makes of `words`, printed one per line.
std::string ThroughShell(const std::string& words) {
  Result<os::CommandResult> done = RunSlurmCommand(
      {"/bin/bash", "-c", "SLURM_JOB_ID=77; for w in " + words + "; do echo \"<$w>\"; done"},
      SlurmTools());
  EXPECT_TRUE(done.ok()) << done.status().ToString();
  return done.ok() ? done->output : "";
}

TEST(BatchScriptTest, DefaultsGiveTheWholeScript) {
  ASSERT_OK_AND_ASSIGN(std::string script, BatchScript(Options()));
  EXPECT_EQ(script,
            "#!/bin/bash\n"
            "# Written by `drover submit`: runs `drover run --engine slurm` in the allocation.\n"
            "#SBATCH --nodes=2\n"
            "#SBATCH --ntasks-per-node=1\n"
            "#SBATCH --time=10\n"
            "#SBATCH --job-name=drover\n"
            "#SBATCH --output=/home/u/drover-logs/submit-1/slurm-%j.out\n"
            "\n"
            "cd /home/u/project || exit 1\n"
            "exec /opt/drover/bin/drover run --engine slurm --log-dir "
            "/home/u/drover-logs/submit-1/run-\"$SLURM_JOB_ID\" -- python3 train.py\n");
}

TEST(BatchScriptTest, EveryOptionHasItsLine) {
  SubmitOptions options = Options();
  options.ntasks_per_node = 4;
  options.time = "1-00:00";
  options.gpus_per_task = 1;
  options.cpus_per_task = 8;
  options.partition = "gpu";
  options.job_name = "digits";
  options.sbatch_options = {"--mem=8G", "account=ml", " --exclusive "};
  ASSERT_OK_AND_ASSIGN(std::string script, BatchScript(options));
  for (const char* line :
       {"#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=4\n", "#SBATCH --time=1-00:00\n",
        "#SBATCH --job-name=digits\n", "#SBATCH --gpus-per-task=1\n", "#SBATCH --cpus-per-task=8\n",
        "#SBATCH --partition=gpu\n", "#SBATCH --mem=8G\n", "#SBATCH --account=ml\n",
        "#SBATCH --exclusive\n"}) {
    EXPECT_THAT(script, HasSubstr(line));
  }
  // The #SBATCH lines come before the first command, or sbatch ignores them.
  EXPECT_LT(script.rfind("#SBATCH"), script.find("\ncd "));
}

TEST(BatchScriptTest, RunOptionsAndCommandAreQuoted) {
  SubmitOptions options = Options();
  options.run_options = {"--input", "data/*.csv", "--epochs", "40", "--workers", "2", "--ps", "1"};
  options.command = {"sh", "-c", "echo it's $DROVER_EXECUTOR_ID"};
  ASSERT_OK_AND_ASSIGN(std::string script, BatchScript(options));
  EXPECT_THAT(script, HasSubstr(" run --engine slurm --log-dir "
                                "/home/u/drover-logs/submit-1/run-\"$SLURM_JOB_ID\" --input "
                                "'data/*.csv' --epochs 40 --workers 2 --ps 1 -- sh -c "
                                "'echo it'\\''s $DROVER_EXECUTOR_ID'\n"));
  // The shell gives drover the words as they were given, and the job id.
  std::string exec_line = script.substr(script.find("exec "));
  exec_line = exec_line.substr(5, exec_line.size() - 6);
  EXPECT_EQ(ThroughShell(exec_line),
            "</opt/drover/bin/drover>\n<run>\n<--engine>\n<slurm>\n<--log-dir>\n"
            "</home/u/drover-logs/submit-1/run-77>\n<--input>\n<data/*.csv>\n<--epochs>\n<40>\n"
            "<--workers>\n<2>\n<--ps>\n<1>\n<-->\n<sh>\n<-c>\n"
            "<echo it's $DROVER_EXECUTOR_ID>\n");
}

TEST(BatchScriptTest, PathsWithBlanksAreQuotedForBothShellAndSbatch) {
  SubmitOptions options = Options();
  options.log_dir = "/home/u/my logs";
  options.working_dir = "/home/u/my project";
  options.drover_binary = "/opt/my drover/drover";
  options.job_name = "a b";
  ASSERT_OK_AND_ASSIGN(std::string script, BatchScript(options));
  EXPECT_THAT(script, HasSubstr("#SBATCH --output=\"/home/u/my logs/slurm-%j.out\"\n"));
  EXPECT_THAT(script, HasSubstr("#SBATCH --job-name=\"a b\"\n"));
  EXPECT_THAT(script, HasSubstr("cd '/home/u/my project' || exit 1\n"));
  EXPECT_THAT(script, HasSubstr("exec '/opt/my drover/drover' run --engine slurm --log-dir "
                                "'/home/u/my logs/run-'\"$SLURM_JOB_ID\" -- "));
}

TEST(BatchScriptTest, RefusesWhatAnSbatchLineCannotCarry) {
  SubmitOptions options = Options();
  options.log_dir = "/tmp/a\"b";
  EXPECT_THAT(BatchScript(options),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("double quote")));
  options = Options();
  options.job_name = "x\ny";
  EXPECT_THAT(BatchScript(options),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("--job-name")));
  options = Options();
  options.sbatch_options = {"--mem=1G\n#SBATCH --x"};
  EXPECT_THAT(BatchScript(options),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("--sbatch-option")));
  options = Options();
  options.sbatch_options = {"  "};
  EXPECT_THAT(BatchScript(options), StatusIs(Status::Code::kInvalidArgument, HasSubstr("empty")));
}

TEST(BatchScriptTest, RefusesBadCountsTimeAndNoCommand) {
  SubmitOptions options = Options();
  options.nodes = 0;
  EXPECT_THAT(BatchScript(options), StatusIs(Status::Code::kInvalidArgument, HasSubstr("--nodes")));
  options = Options();
  options.ntasks_per_node = 0;
  EXPECT_THAT(BatchScript(options),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("--ntasks-per-node")));
  options = Options();
  options.time = "10m";
  EXPECT_THAT(BatchScript(options), StatusIs(Status::Code::kInvalidArgument, HasSubstr("10m")));
  options = Options();
  options.command.clear();
  EXPECT_THAT(BatchScript(options), StatusIs(Status::Code::kInvalidArgument, HasSubstr("command")));
}

TEST(TimeLimitTest, TakesSlurmsForms) {
  for (const char* time : {"0", "10", "90", "5:30", "01:00:00", "100:00:00", "2-0", "1-12",
                           "1-12:30", "1-12:30:15", "UNLIMITED", "INFINITE"}) {
    EXPECT_OK(CheckTimeLimit(time)) << time;
  }
}

TEST(TimeLimitTest, RefusesTheRest) {
  for (const char* time : {"", "10m", "1h", "1:2:3:4", "1:", ":30", "1-", "-5", "1-2-3", "1-100",
                           "1-1:1:1:1", "5:300", "a:b", "1.5", " 10"}) {
    EXPECT_THAT(CheckTimeLimit(time),
                StatusIs(Status::Code::kInvalidArgument, HasSubstr("MINUTES, MM:SS")))
        << "'" << time << "'";
  }
}

TEST(JobIdTest, DigitsAndArrayTasks) {
  EXPECT_TRUE(IsJobId("1"));
  EXPECT_TRUE(IsJobId("123456"));
  EXPECT_TRUE(IsJobId("12_3"));
  EXPECT_FALSE(IsJobId(""));
  EXPECT_FALSE(IsJobId("12_"));
  EXPECT_FALSE(IsJobId("_3"));
  EXPECT_FALSE(IsJobId("12_3_4"));
  EXPECT_FALSE(IsJobId("localhost:8080"));
  EXPECT_FALSE(IsJobId("10.0.0.1"));
  EXPECT_FALSE(IsJobId("-1"));
}

TEST(SubmittedJobIdTest, ParsableOutput) {
  ASSERT_OK_AND_ASSIGN(std::string id, ParseSubmittedJobId("1234\n"));
  EXPECT_EQ(id, "1234");
  ASSERT_OK_AND_ASSIGN(id, ParseSubmittedJobId("1234;cluster1\n"));
  EXPECT_EQ(id, "1234");
  ASSERT_OK_AND_ASSIGN(id, ParseSubmittedJobId("sbatch: warning: something\n77\n"));
  EXPECT_EQ(id, "77");
  EXPECT_THAT(ParseSubmittedJobId(""),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("no job id")));
  EXPECT_THAT(ParseSubmittedJobId("Submitted batch job 5"),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("Submitted batch job 5")));
}

TEST(OutputPathTest, PatternAndJob) {
  EXPECT_EQ(OutputPattern("/l"), "/l/slurm-%j.out");
  EXPECT_EQ(OutputPath("/l", "42"), "/l/slurm-42.out");
}

// Slurm 22.05's `scontrol show job -o` for a job that failed.
constexpr char kFailedJob[] =
    "JobId=3 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 "
    "Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 "
    "RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-25T01:19:11 "
    "Partition=debug AllocNode:Sid=localhost:17988 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=n1 BatchHost=n1 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "Command=(null) WorkDir=/tmp StdErr=/tmp/sj-3.out StdIn=/dev/null StdOut=/tmp/sj-3.out "
    "Power= \n";

TEST(ParseJobsTest, AFailedJob) {
  std::vector<JobInfo> jobs = ParseJobs(kFailedJob);
  ASSERT_EQ(jobs.size(), 1u);
  const JobInfo& job = jobs[0];
  EXPECT_EQ(job.job_id, "3");
  EXPECT_EQ(job.name, "wrap");
  EXPECT_EQ(job.state, "FAILED");
  EXPECT_EQ(job.reason, "NonZeroExitCode");
  EXPECT_EQ(job.exit_code, 3);
  EXPECT_EQ(job.signal, 0);
  EXPECT_EQ(job.nodes, "n1");
  EXPECT_EQ(job.num_nodes, 1);
  EXPECT_EQ(job.std_out, "/tmp/sj-3.out");
  EXPECT_EQ(job.run_time, "00:00:01");
  EXPECT_EQ(job.time_limit, "UNLIMITED");
  EXPECT_EQ(job.partition, "debug");
  EXPECT_TRUE(IsFinalState(job.state));
  EXPECT_EQ(JobExitCode(job), 3);
}

TEST(ParseJobsTest, ValuesWithBlanksAndAPendingJob) {
  std::vector<JobInfo> jobs = ParseJobs(
      "JobId=9 JobName=a b c JobState=PENDING Reason=Resources ExitCode=0:0 "
      "RunTime=00:00:00 TimeLimit=00:10:00 NodeList=(null) NumNodes=2-3 "
      "StdOut=/tmp/my logs/slurm-9.out Power=\n");
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].name, "a b c");
  EXPECT_EQ(jobs[0].state, "PENDING");
  EXPECT_EQ(jobs[0].reason, "Resources");
  EXPECT_EQ(jobs[0].nodes, "");
  EXPECT_EQ(jobs[0].num_nodes, 2);
  EXPECT_EQ(jobs[0].std_out, "/tmp/my logs/slurm-9.out");
  EXPECT_FALSE(IsFinalState(jobs[0].state));
}

TEST(ParseJobsTest, ArrayTasksAreNamedJobUnderscoreTask) {
  std::vector<JobInfo> jobs = ParseJobs(
      "JobId=13 ArrayJobId=12 ArrayTaskId=1 JobName=x JobState=RUNNING ExitCode=0:0\n"
      "JobId=12 ArrayJobId=12 ArrayTaskId=2 JobName=x JobState=COMPLETED ExitCode=0:0\n"
      "\n"
      "not a job line\n");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id, "12_1");
  EXPECT_EQ(jobs[1].job_id, "12_2");
}

TEST(ExitCodeTest, CodeThenSignalThenState) {
  auto job = [](const std::string& state, const std::string& exit_code) {
    std::vector<JobInfo> jobs =
        ParseJobs("JobId=1 JobState=" + state + " ExitCode=" + exit_code + "\n");
    EXPECT_EQ(jobs.size(), 1u);
    return jobs.front();
  };
  EXPECT_EQ(JobExitCode(job("COMPLETED", "0:0")), 0);
  EXPECT_EQ(JobExitCode(job("FAILED", "3:0")), 3);
  EXPECT_EQ(JobExitCode(job("FAILED", "137:0")), 137);
  JobInfo cancelled = job("CANCELLED", "0:15");
  EXPECT_EQ(cancelled.signal, 15);
  EXPECT_EQ(JobExitCode(cancelled), 128 + 15);
  EXPECT_EQ(JobExitCode(job("CANCELLED", "0:0")), 1);
  EXPECT_EQ(JobExitCode(job("TIMEOUT", "0:0")), 1);
  EXPECT_EQ(JobExitCode(job("NODE_FAIL", "0:0")), 1);
  EXPECT_EQ(JobExitCode(job("FAILED", "2:9")), 2);
  // Malformed: nothing taken from it.
  JobInfo odd = job("FAILED", "x:y");
  EXPECT_EQ(odd.exit_code, 0);
  EXPECT_EQ(odd.signal, 0);
  EXPECT_EQ(JobExitCode(odd), 1);
}

TEST(FinalStateTest, Lists) {
  for (const char* state : {"COMPLETED", "FAILED", "CANCELLED", "CANCELLED by 0", "TIMEOUT",
                            "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}) {
    EXPECT_TRUE(IsFinalState(state)) << state;
  }
  for (const char* state :
       {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", ""}) {
    EXPECT_FALSE(IsFinalState(state)) << state;
  }
}

TEST(SacctTest, FirstLine) {
  std::optional<JobInfo> job = ParseSacct("CANCELLED by 0|0:15\n", "7");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->job_id, "7");
  EXPECT_EQ(job->state, "CANCELLED");
  EXPECT_EQ(JobExitCode(*job), 143);
  job = ParseSacct("COMPLETED|0:0\n", "7");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(JobExitCode(*job), 0);
  EXPECT_FALSE(ParseSacct("", "7").has_value());
  EXPECT_FALSE(ParseSacct("\n", "7").has_value());
}

TEST(StepsTest, SqueueOutput) {
  std::vector<JobStep> steps = ParseSteps("4.0|sleep|0:01|n[1-2]\n4.batch|batch|0:02|n1\n\n");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step_id, "4.0");
  EXPECT_EQ(steps[0].name, "sleep");
  EXPECT_EQ(steps[0].time, "0:01");
  EXPECT_EQ(steps[0].nodes, "n[1-2]");
  EXPECT_EQ(steps[1].step_id, "4.batch");
}

TEST(SlurmCommandTest, MissingProgramIsNotFound) {
  SlurmTools tools;
  EXPECT_THAT(
      RunSlurmCommand({"drover-no-such-sbatch", "--parsable"}, tools),
      StatusIs(Status::Code::kNotFound, HasSubstr("drover-no-such-sbatch' is not on PATH")));
  tools.sbatch = "/nonexistent/sbatch";
  EXPECT_THAT(SubmitScript(tools, "/tmp/x", nullptr),
              StatusIs(Status::Code::kNotFound, HasSubstr("/nonexistent/sbatch")));
}

// A stand-in for a Slurm command: a shell script in a temporary directory.
std::string FakeTool(const std::string& name, const std::string& body) {
  std::string dir = ::testing::TempDir() + "/slurm_jobs_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// A bare name is looked up on the search path the caller gives, not on this
// process's PATH.
TEST(SlurmCommandTest, BareNamesAreFoundOnTheGivenSearchPath) {
  const std::string squeue = FakeTool("squeue", "echo '7.0|job|0:01|n1'");
  SlurmTools tools;
  EXPECT_THAT(RunSlurmCommand({"squeue"}, tools).status(),
              StatusIs(Status::Code::kNotFound, HasSubstr("not on PATH")));
  tools.search_path = "/nonexistent:" + std::filesystem::path(squeue).parent_path().string();
  ASSERT_OK_AND_ASSIGN(os::CommandResult done, RunSlurmCommand({"squeue"}, tools));
  EXPECT_EQ(done.output, "7.0|job|0:01|n1\n");
}

TEST(SlurmCommandTest, RefusalCarriesStderrVerbatim) {
  SlurmTools tools;
  tools.sbatch =
      FakeTool("sbatch", "echo 'sbatch: error: invalid partition specified: nope' >&2; exit 1");
  EXPECT_THAT(SubmitScript(tools, "/tmp/job.sbatch", nullptr),
              StatusIs(Status::Code::kFailedPrecondition,
                       ::testing::Eq("sbatch: error: invalid partition specified: nope")));
  tools.sbatch = FakeTool("sbatch", "echo 'sbatch: warning: odd' >&2; echo \"42;c1 $1 $2\"");
  std::string warnings;
  Result<std::string> id = SubmitScript(tools, "/tmp/job.sbatch", &warnings);
  // "42;c1 --parsable /tmp/job.sbatch": the id before ';'.
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "42");
  EXPECT_EQ(warnings, "sbatch: warning: odd");
}

TEST(SlurmCommandTest, ShowJobKnowsUnknownJobsAndFailures) {
  SlurmTools tools;
  tools.scontrol =
      FakeTool("scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
  ASSERT_OK_AND_ASSIGN(std::optional<JobInfo> job, ShowJob(tools, "99"));
  EXPECT_FALSE(job.has_value());
  tools.scontrol = FakeTool(
      "scontrol",
      "echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; "
      "exit 1");
  EXPECT_THAT(ShowJob(tools, "99"), StatusIs(Status::Code::kUnavailable,
                                             HasSubstr("Unable to contact slurm controller")));
  tools.scontrol =
      FakeTool("scontrol", "echo \"JobId=$4 JobName=x JobState=RUNNING ExitCode=0:0\"");
  ASSERT_OK_AND_ASSIGN(job, ShowJob(tools, "5"));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->job_id, "5");
  EXPECT_EQ(job->state, "RUNNING");
}

TEST(SlurmCommandTest, CancelErrorsAreVerbatim) {
  SlurmTools tools;
  tools.scancel =
      FakeTool("scancel", "echo \"scancel: error: Kill job error on job id $#: $*\" >&2; exit 1");
  EXPECT_THAT(
      CancelJob(tools, "7", "USR1"),
      StatusIs(Status::Code::kFailedPrecondition,
               ::testing::Eq("scancel: error: Kill job error on job id 2: --signal=USR1 7")));
  // An error on stderr with exit code 0 is still an error.
  tools.scancel = FakeTool("scancel", "echo 'scancel: error: nope' >&2; exit 0");
  EXPECT_THAT(CancelJob(tools, "7", ""),
              StatusIs(Status::Code::kFailedPrecondition, HasSubstr("nope")));
  tools.scancel = FakeTool("scancel", "exit 0");
  EXPECT_OK(CancelJob(tools, "7", ""));
}

TEST(SlurmCommandTest, OutputAndCode) {
  SlurmTools tools;
  ASSERT_OK_AND_ASSIGN(os::CommandResult done,
                       RunSlurmCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, tools));
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_EQ(done.output, "out\n");
  EXPECT_EQ(done.error, "err\n");
}

}  // namespace
}  // namespace drover::slurm

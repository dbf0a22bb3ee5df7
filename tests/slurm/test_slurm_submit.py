"""`drover submit`, `drover status` and `drover cancel` against the real Slurm
of conftest.py: a job's output followed to its end, its exit code, a running
job looked at and cancelled, the errors of sbatch and of unknown jobs. Every
test cancels what it submitted and leaves the queue empty; every process the
jobs start carries DROVER_TEST_MARK (sbatch passes the environment), and none
may be left when a test ends."""

import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from cluster_util import MARK_VARIABLE, assert_no_leftovers, marked_processes, new_mark

REPO = Path(__file__).resolve().parents[2]
DROVER = os.path.abspath(os.environ.get("DROVER_BIN", str(REPO / "build" / "bin" / "drover")))


@pytest.fixture
def jobs(slurm, monkeypatch):
    """The ids of the jobs a test submits: cancelled, whatever happens."""
    mark = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, mark)
    submitted = []
    yield submitted
    try:
        for job in submitted:
            slurm.run("scancel", job)
        slurm.wait_idle()
        assert_no_leftovers(mark, wait=30.0)
    finally:
        for pid, _ in marked_processes(mark):
            os.kill(pid, signal.SIGKILL)


def drover(slurm, *args, cwd=None, timeout=180, env=None):
    return subprocess.run([DROVER, *args], env=env or slurm.env(), cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def submit(slurm, jobs, tmp_path, *args, command, follow=True, timeout=180):
    done = drover(slurm, "submit", "--engine", "slurm", "--time", "5",
                  "--log-dir", str(tmp_path / "logs"), *(["--follow"] if follow else []), *args,
                  "--", *command, cwd=tmp_path, timeout=timeout)
    found = re.search(r"submitted job (\d+)", done.stderr)
    if found:
        jobs.append(found.group(1))
    return done


def job_id_of(done):
    """The bare job id: submit's first line on stdout."""
    lines = done.stdout.splitlines()
    assert lines and re.fullmatch(r"\d+", lines[0]), (done.stdout, done.stderr)
    return lines[0]


def wait_for_status(slurm, job, pattern, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = drover(slurm, "status", job, timeout=60)
        if re.search(pattern, status.stdout):
            return status
        time.sleep(0.3)
    pytest.fail("drover status %s never matched %r; last:\n%s%s" %
                (job, pattern, status.stdout, status.stderr))


def test_follow_prints_the_jobs_output_and_exits_0(slurm, jobs, tmp_path):
    done = submit(slurm, jobs, tmp_path, "--nodes", "1",
                  command=["sh", "-c", "echo 'hello from the job'; echo to-stderr >&2"])
    assert done.returncode == 0, done.stdout + done.stderr
    job = job_id_of(done)
    assert "[worker:0] hello from the job" in done.stdout
    assert "to-stderr" in done.stdout
    log_dir = tmp_path / "logs"
    assert "drover submit: submitted job %s; output in %s/slurm-%s.out" % (
        job, log_dir, job) in done.stderr
    assert "drover submit: job %s COMPLETED (exit code 0)" % job in done.stderr
    script = log_dir / "job.sbatch"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    text = script.read_text()
    assert "#SBATCH --nodes=1\n" in text and "#SBATCH --time=5\n" in text
    assert "cd %s" % tmp_path in text
    assert (log_dir / ("run-" + job)).is_dir()


def test_a_failing_commands_exit_code_comes_back(slurm, jobs, tmp_path):
    done = submit(slurm, jobs, tmp_path, "--nodes", "1", command=["sh", "-c", "exit 3"])
    job = job_id_of(done)
    # drover run exits 1 when a node fails; the job's ExitCode carries it.
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exited with exit code 3" in done.stdout
    assert "drover submit: job %s FAILED (exit code 1)" % job in done.stderr
    shown = slurm.run("scontrol", "show", "job", "-o", job).stdout
    assert "ExitCode=1:0" in shown


def test_two_nodes_each_print_their_executor_id(slurm, jobs, tmp_path):
    done = submit(slurm, jobs, tmp_path, "--nodes", "2",
                  command=["sh", "-c", "echo hi from $DROVER_EXECUTOR_ID"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[worker:0] hi from 0" in done.stdout
    assert "[worker:1] hi from 1" in done.stdout


def test_run_options_are_forwarded(slurm, jobs, tmp_path):
    done = submit(slurm, jobs, tmp_path, "--nodes", "2", "--workers", "1", "--ps", "1", "--tee",
                  "--job-name", "fwd test", "--sbatch-option", "comment=drover-fwd",
                  command=["sh", "-c", "echo \"role $DROVER_EXECUTOR_ID\" '*'"])
    assert done.returncode == 0, done.stdout + done.stderr
    job = job_id_of(done)
    assert "[ps:0] role 0 *" in done.stdout
    assert "[worker:0] role 1 *" in done.stdout
    # --tee reached drover run; the log dir is the job's own.
    assert (tmp_path / "logs" / ("run-" + job) / "drover.log").is_file()
    shown = slurm.run("scontrol", "show", "job", "-o", job).stdout
    assert "JobName=fwd test " in shown
    assert "Comment=drover-fwd" in shown
    script = (tmp_path / "logs" / "job.sbatch").read_text()
    assert "#SBATCH --job-name=\"fwd test\"\n" in script
    assert "--workers 1 --ps 1 --tee -- sh -c 'echo \"role $DROVER_EXECUTOR_ID\" '\\''*'\\'''" \
        in script


def test_status_of_a_running_job_then_cancel(slurm, jobs, tmp_path):
    done = submit(slurm, jobs, tmp_path, "--nodes", "2", command=["sleep", "60"], follow=False,
                  timeout=60)
    assert done.returncode == 0, done.stderr
    job = job_id_of(done)
    assert done.stdout == job + "\n"
    status = wait_for_status(slurm, job, r"STEP\s+NAME")
    assert status.returncode == 0
    assert re.search(r"^job %s \(drover\): RUNNING$" % job, status.stdout, re.M), status.stdout
    assert re.search(r"^  nodes\s+n\[\d-\d\] \(2\)$", status.stdout, re.M), status.stdout
    assert re.search(r"^  time\s+\S+ of 00:05:00$", status.stdout, re.M), status.stdout
    assert "output     %s/slurm-%s.out" % (tmp_path / "logs", job) in status.stdout
    assert re.search(r"^    %s\.batch\s+batch" % job, status.stdout, re.M), status.stdout

    cancelled = drover(slurm, "cancel", job, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stderr == "drover cancel: cancelled job %s\n" % job
    status = wait_for_status(slurm, job, r"CANCELLED")
    assert re.search(r"^job %s \(drover\): CANCELLED$" % job, status.stdout, re.M), status.stdout
    # drover run in the job ends on scancel's SIGTERM: 143, or Slurm's 0:15.
    assert re.search(r"^  exit code  (143|0 \(SIGTERM\))$", status.stdout, re.M), status.stdout

    again = drover(slurm, "cancel", job, timeout=60)
    assert again.returncode == 1
    assert "drover cancel: job %s has already ended (CANCELLED)" % job in again.stderr


def test_interrupting_follow_leaves_the_job_running(slurm, jobs, tmp_path):
    argv = [DROVER, "submit", "--engine", "slurm", "--nodes", "1", "--time", "5", "--log-dir",
            str(tmp_path / "logs"), "--follow", "--", "sh", "-c", "echo started; sleep 60"]
    follower = subprocess.Popen(argv, env=slurm.env(), cwd=tmp_path, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = follower.stdout.readline().strip()
        assert re.fullmatch(r"\d+", job), job
        jobs.append(job)
        # Wait until the job's output has come through the follower.
        deadline = time.monotonic() + 60
        seen = ""
        while "started" not in seen and time.monotonic() < deadline:
            seen += follower.stdout.readline()
        assert "[worker:0] started" in seen
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 128 + signal.SIGINT, err
    assert "drover submit: stopped following job %s; it goes on (drover cancel %s" % (
        job, job) in err
    status = drover(slurm, "status", job, timeout=60)
    assert "RUNNING" in status.stdout, status.stdout + status.stderr
    cancelled = drover(slurm, "cancel", job, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr


def test_a_bad_partition_gives_sbatchs_error(slurm, jobs, tmp_path):
    done = submit(slurm, jobs, tmp_path, "--nodes", "1", "--partition", "no-such-partition",
                  command=["true"])
    assert done.returncode == 1
    assert done.stdout == ""
    assert re.search(r"^sbatch: error: .*[Pp]artition", done.stderr, re.M), done.stderr
    assert "drover submit: sbatch refused the job (script: %s)" % (
        tmp_path / "logs" / "job.sbatch") in done.stderr


def test_without_sbatch_on_path(slurm, tmp_path):
    done = drover(slurm, "submit", "--engine", "slurm", "--nodes", "1", "--time", "5",
                  "--log-dir", str(tmp_path / "logs"), "--", "true",
                  env=slurm.env(PATH=str(tmp_path)), timeout=60)
    assert done.returncode == 1
    assert "drover submit: 'sbatch' is not on PATH" in done.stderr


def test_unknown_jobs(slurm):
    status = drover(slurm, "status", "999999", timeout=60)
    assert (status.returncode, status.stderr) == (1, "drover status: no job 999999\n")
    cancelled = drover(slurm, "cancel", "999999", timeout=60)
    assert (cancelled.returncode, cancelled.stderr) == (1, "drover cancel: no job 999999\n")
    # Not a job id: the address of a driver's status server (docs/status.md).
    address = drover(slurm, "status", "127.0.0.1:1", timeout=60)
    assert address.returncode == 1
    assert "cannot reach a status server at http://127.0.0.1:1" in address.stderr


def test_bad_input_is_refused_before_sbatch(slurm, tmp_path):
    for args, message in [
        (["--engine", "local", "--nodes", "1", "--time", "5", "--", "true"],
         "--engine takes slurm"),
        (["--engine", "slurm", "--nodes", "1", "--time", "5min", "--", "true"],
         "--time '5min' is not a Slurm time limit"),
        (["--engine", "slurm", "--nodes", "1", "--time", "5", "--epochs", "2", "true"],
         "no command; give it after --"),
    ]:
        done = drover(slurm, "submit", *args, cwd=tmp_path, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
    assert not (tmp_path / "drover-logs").exists()

"""`drover run --engine slurm` inside a real Slurm allocation (salloc on the
local cluster of conftest.py): the digits job, task placement, a killed task,
a node whose slurmd dies, an interrupted driver. Every node of this cluster
is this machine, so the tests see the tasks in /proc: each process drover
starts carries DROVER_TEST_MARK (srun passes the environment), and none may
be left, nor any job in the queue, when a test ends."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from cluster_util import (MARK_VARIABLE, assert_no_leftovers, established_tcp_connections,
                          marked_processes, new_mark, wait_for)

REPO = Path(__file__).resolve().parents[2]
DROVER = os.path.abspath(os.environ.get("DROVER_BIN", str(REPO / "build" / "bin" / "drover")))
EXAMPLE = REPO / "examples" / "digits"
PYTHON = "/usr/bin/python3"


@pytest.fixture
def mark(slurm, monkeypatch):
    value = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, value)
    yield value
    try:
        assert_no_leftovers(value, wait=30.0)
        slurm.wait_idle()
    finally:
        for pid, _ in marked_processes(value):
            os.kill(pid, signal.SIGKILL)
        slurm.run("scancel", "--user", "root")


def pythonpath():
    """The test's PYTHONPATH, absolute: the jobs run in other directories."""
    return ":".join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p)


def salloc(slurm, allocation, *run_args, command, timeout=300, popen=False):
    argv = ["salloc", "--immediate=60", *allocation, DROVER, "run", "--engine", "slurm",
            "--grace", "2", *run_args, "--", *command]
    env = slurm.env(PYTHONPATH=pythonpath())
    if popen:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)


def programs(mark, prefix):
    return [pid for pid, cmdline in marked_processes(mark) if cmdline.startswith(prefix)]


def agent_of(mark, needle):
    """The one agent whose command line holds `needle` ("--executor-id 1 ")."""
    found = [pid for pid, cmdline in marked_processes(mark)
             if cmdline.startswith(DROVER + " agent ") and needle in cmdline]
    assert len(found) == 1, marked_processes(mark)
    return found[0]


def test_digits_in_an_allocation_reaches_95_percent(slurm, mark, tmp_path):
    data = tmp_path / "digits-data"
    subprocess.run([PYTHON, str(EXAMPLE / "make_csv.py"), str(data)], check=True,
                   capture_output=True)
    done = salloc(slurm, ["--nodes=3", "--ntasks-per-node=1"], "--log-dir", str(tmp_path / "logs"),
                  "--input", str(data / "train-*.csv"), "--epochs", "40",
                  command=[PYTHON, str(EXAMPLE / "train.py"), "--test", str(data / "test.csv")],
                  timeout=540)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "drover run: 3 nodes on the slurm engine" in output, output
    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1 and float(accuracies[0]) >= 0.95, output
    assert "[worker:0] worker:0: rank 0 of 3, chief=True" in output, output


def test_tasks_follow_the_allocation(slurm, mark):
    command = ["sh", "-c", 'echo "$DROVER_EXECUTOR_ID on $SLURMD_NODENAME in job $SLURM_JOB_ID"']
    done = salloc(slurm, ["--nodes=2", "--ntasks-per-node=2"], command=command)
    assert done.returncode == 0, done.stderr
    placed = dict(re.findall(r"^\[worker:\d\] (\d) on (n\d) in job \d+$", done.stdout,
                             re.MULTILINE))
    assert len(placed) == 4, done.stdout
    # Node order of the allocation, two tasks each.
    assert placed["0"] == placed["1"] and placed["2"] == placed["3"] != placed["0"], placed


def agents(mark):
    """pid -> command line of the live `drover agent` processes of this test."""
    return {pid: cmdline for pid, cmdline in marked_processes(mark)
            if cmdline.startswith(DROVER + " agent ")}


def test_one_step_a_node_runs_its_tasks_and_keeps_each_exit_code(slurm, mark, tmp_path):
    """Two nodes of two tasks: one step and one agent a node (srun --ntasks=1
    with both tasks' CPUs), each task's output and exit code apart. $0: a
    directory every node sees; task 3 waits for the others, then fails."""
    sync = tmp_path / "sync"
    sync.mkdir()
    program = ('id=$DROVER_EXECUTOR_ID; echo "$id on $SLURMD_NODENAME"; touch "$0/started.$id"; '
               'while [ ! -e "$0/go" ]; do sleep 0.05; done; echo "last from $id"; '
               '[ "$id" != 3 ] && touch "$0/done.$id" && exit 0; '
               'until [ "$(ls "$0" | grep -c done)" = 3 ]; do sleep 0.05; done; exit 3')
    process = salloc(slurm, ["--nodes=2", "--ntasks-per-node=2"], command=["sh", "-c", program,
                                                                          str(sync)], popen=True)
    try:
        wait_for(lambda: len(list(sync.glob("started.*"))) == 4, "every task's program")
        running = agents(mark)
        connections = [established_tcp_connections(pid) for pid in running]
        (sync / "go").touch()
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert len(running) == 2, running
    assert all("--node " in cmdline and ":-:" in cmdline for cmdline in running.values()), running
    # Each agent carries its node's two tasks on one rendezvous connection.
    assert connections == [1, 1], (connections, running)
    assert process.returncode == 1, err
    placed = dict(re.findall(r"^\[worker:\d\] (\d) on (n\d)$", out, re.MULTILINE))
    assert placed["0"] == placed["1"] and placed["2"] == placed["3"] != placed["0"], out
    for executor in range(4):
        assert "[worker:%d] last from %d" % (executor, executor) in out, out
        assert re.search(r"^worker:%d +%d .* exit code %d " % (
            executor, executor, 3 if executor == 3 else 0), err, re.MULTILINE), err
    assert re.search(r"drover run: worker:3 \(executor 3 on node n\d \(127\.0\.0\.1\)\) "
                     r"failed: exit code 3", err), err


def test_outside_an_allocation_is_a_clear_error(slurm, mark):
    done = subprocess.run([DROVER, "run", "--engine", "slurm", "--", "true"], env=slurm.env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "inside a Slurm allocation" in done.stderr and "drover submit" in done.stderr


def test_more_nodes_than_tasks_is_bad_input(slurm, mark):
    done = salloc(slurm, ["--nodes=1", "--ntasks=1"], "--nodes", "2", command=["true"])
    assert done.returncode == 2, done.stderr
    assert "2 nodes asked, but the allocation has 1 tasks" in done.stderr


@pytest.mark.parametrize("allocation,victim,failed", [
    # A task a node: executor 1's own agent.
    (["--nodes=3", "--ntasks-per-node=1"], "--executor-id 1 ", r"worker:1 \(executor 1"),
    # Two tasks a node under one agent: both fail with it, the first one named.
    (["--nodes=2", "--ntasks-per-node=2"], "--node 0:-::-", r"worker:[01] \(executor [01]"),
])
def test_killed_task_is_reported_with_node_and_task(slurm, mark, allocation, victim, failed):
    # Each program leaves a descendant in its group and one in a session of
    # its own; the mark fixture checks that none outlives the run.
    command = ["sh", "-c", "sleep 300 & setsid sleep 300 & echo ready; wait"]
    process = salloc(slurm, allocation, command=command, popen=True)
    try:
        tasks = 3 if allocation[1].endswith("=1") else 4
        wait_for(lambda: len(programs(mark, "sleep 300")) == 2 * tasks,
                 "two descendants of each task")
        os.kill(agent_of(mark, victim), signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 1, err
    assert re.search(r"drover run: %s on node n\d \(127\.0\.0\.1\)\) failed: "
                     r"its task on n\d was killed by SIGKILL" % failed, err), err


def test_elastic_run_goes_on_without_a_task_whose_agent_died(slurm, mark):
    """--nodes 2:3 in a 3-node allocation: the agent of executor 1 (its srun
    step) is SIGKILLed; the other two steps' agents stay up and their
    programs start again as a group of two."""
    program = ('echo "round=$DROVER_RESTART_COUNT world=$WORLD_SIZE"; '
               '[ "$DROVER_RESTART_COUNT" = 0 ] && exec sleep 300; exit 0')
    process = salloc(slurm, ["--nodes=3", "--ntasks-per-node=1"], "--nodes", "2:3",
                     command=["sh", "-c", program], popen=True)
    try:
        wait_for(lambda: len(programs(mark, "sleep 300")) == 3, "a program on each node")
        os.kill(agent_of(mark, "--executor-id 1 "), signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 0, err
    assert "re-forming the group with 2 nodes (round 1) after worker:1 on " in err, err
    lines = out.splitlines()
    assert "[worker:0] round=1 world=2" in lines and "[worker:1] round=1 world=2" in lines, out


@pytest.mark.parametrize("per_node", [1, 2])  # an agent a task; one for a node's two
def test_interrupted_driver_ends_every_step(slurm, mark, per_node):
    process = salloc(slurm, ["--nodes=2", "--ntasks-per-node=%d" % per_node],
                     command=["sleep", "300"], popen=True)
    try:
        wait_for(lambda: len(programs(mark, "sleep 300")) == 2 * per_node, "every task's program")
        driver = [pid for pid, cmdline in marked_processes(mark)
                  if cmdline.startswith(DROVER + " run ")]
        assert len(driver) == 1
        os.kill(driver[0], signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert "SIGTERM received" in err, err
    assert_no_leftovers(mark, wait=30.0)


def environ_of(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(entry.split(b"=", 1) for entry in f.read().split(b"\0") if b"=" in entry)


def node_of(pid):
    """The SLURMD_NODENAME of a live process; None once it is gone."""
    try:
        return environ_of(pid).get(b"SLURMD_NODENAME")
    except OSError:
        return None


def test_node_whose_slurmd_dies_is_reported_and_the_job_ends(slurm, mark):
    process = salloc(slurm, ["--nodes=3", "--ntasks-per-node=1"], command=["sleep", "300"],
                     popen=True)
    node = None
    try:
        wait_for(lambda: len(programs(mark, "sleep 300")) == 3, "a program on each node")
        agent = agent_of(mark, "--executor-id 1 ")
        node = environ_of(agent)[b"SLURMD_NODENAME"].decode()
        with open("/proc/%d/stat" % agent) as f:
            stepd = int(f.read().rsplit(")", 1)[1].split()[1])
        # The node goes down at once: its slurmd, the step daemon and the task.
        victims = [slurm.slurmd_pid(node), stepd]
        victims += [pid for pid, _ in marked_processes(mark)
                    if node_of(pid) == node.encode()]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # gone with the step daemon killed just before (its death signal)
        out, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        if node is not None:
            slurm.restart_slurmd(node)
    assert process.returncode == 1, err
    assert re.search(r"drover run: worker:1 \(executor 1 on node %s \(127\.0\.0\.1\)\) failed: "
                     % node, err), err


def test_digits_through_drover_submit_reaches_95_percent(slurm, mark, tmp_path):
    data = tmp_path / "digits-data"
    subprocess.run([PYTHON, str(EXAMPLE / "make_csv.py"), str(data)], check=True,
                   capture_output=True)
    log_dir = tmp_path / "submitted"
    done = subprocess.run(
        [DROVER, "submit", "--engine", "slurm", "--nodes", "3", "--time", "10", "--log-dir",
         str(log_dir), "--follow", "--grace", "2", "--input", str(data / "train-*.csv"),
         "--epochs", "40", "--", PYTHON, str(EXAMPLE / "train.py"), "--test",
         str(data / "test.csv")],
        env=slurm.env(PYTHONPATH=pythonpath()), cwd=tmp_path,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=540)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    job = done.stdout.splitlines()[0].strip()
    assert job.isdigit(), output
    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1 and float(accuracies[0]) >= 0.95, output
    assert "3 nodes on the slurm engine" in output, output
    assert re.search(r"job %s COMPLETED" % job, done.stderr), done.stderr

"""The main job: `drover run --nodes 2 --input ...` of examples/digits/train.py,
real PyTorch DDP over gloo on two local nodes fed CSV shards through drover's
data feed, must reach test accuracy >= 0.95 and save the model. Needs Debian's
python3-torch and python3-sklearn (scripts/deps.sh) and the Python module."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

DROVER = os.path.abspath(os.environ.get("DROVER_BIN", "build/bin/drover"))
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "examples", "digits")
TRAIN = os.path.join(EXAMPLE, "train.py")


def clean_env():
    """This environment without what an outer launcher or cluster set."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE",
                                 "LOCAL_", "GROUP_", "OMPI_", "SLURM_"))}


def make_data(tmp_path):
    """The example's CSV shards and test set (make_csv.py)."""
    data = tmp_path / "digits-data"
    subprocess.run(["/usr/bin/python3", os.path.join(EXAMPLE, "make_csv.py"), str(data)],
                   check=True, capture_output=True)
    return data


def test_two_nodes_train_digits_to_95_percent(tmp_path):
    for module in ("torch", "sklearn"):
        done = subprocess.run(["/usr/bin/python3", "-c", f"import {module}"], capture_output=True)
        if done.returncode != 0:
            pytest.fail(f"/usr/bin/python3 cannot import {module}: scripts/deps.sh installs "
                        "python3-torch and python3-sklearn")
    log_dir = tmp_path / "logs"
    env = clean_env()
    data = make_data(tmp_path)
    done = subprocess.run(
        [DROVER, "run", "--nodes", "2", "--log-dir", str(log_dir), "--grace", "2",
         "--input", str(data / "train-*.csv"), "--epochs", "40", "--",
         "/usr/bin/python3", TRAIN, "--test", str(data / "test.csv")],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=540)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output

    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1, f"the chief (worker:0) prints the accuracy once:\n{output}"
    assert float(accuracies[0]) >= 0.95, output
    assert not re.search(r"^\[worker:1\] test accuracy", output, re.MULTILINE), \
        "only the chief reports"

    model = log_dir / "digits_mlp.pt"
    assert model.is_file() and model.stat().st_size > 1000, (sorted(log_dir.iterdir()), output)
    assert (log_dir / "worker-0.log").is_file() and (log_dir / "worker-1.log").is_file()

    # The script takes its role from drover.context() and its rows from the feed.
    assert "[worker:0] worker:0: rank 0 of 2, chief=True" in output, output
    fed = re.findall(r"^\[worker:0\] epoch 40: .*; ([0-9]+) in all\)$", output, re.MULTILINE)
    assert fed and int(fed[0]) == 40 * 674, output  # its 2 of the 4 shards, 40 times

    # What it reported (drover.report): the run's record and the summary show
    # the learning curve of each worker and the chief's final accuracy.
    record = json.loads((log_dir / "run.json").read_text())
    assert record["metrics_task"] == "worker:0"
    assert record["metrics"]["epoch"] == 40 and record["metrics"]["test_accuracy"] >= 0.95, record
    for task in ("worker:0", "worker:1"):
        losses = [p[2] for p in record["metric_history"]["train_loss"][task]]
        assert len(losses) >= 2 and losses[-1] < losses[0], (task, losses)
    assert "metrics (worker:0): epoch 40  test_accuracy 0.9" in done.stderr, done.stderr


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(b"RANK="):
                    return int(entry[5:])
    except OSError:
        pass
    return None


def wait_for_first_checkpoint(proc, log_dir):
    """Progress, not the clock: the chief's first checkpoint (after epoch 1)."""
    checkpoint = log_dir / "digits_checkpoint.pt"
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not checkpoint.exists() and proc.poll() is not None:
        stdout, stderr = proc.communicate()
        raise AssertionError(f"drover exited ({proc.returncode}) before the first checkpoint:\n"
                             + stdout + stderr)
    assert checkpoint.exists(), "no checkpoint was written"


def rank_1_processes(test_csv):
    """The pids of worker:1's program (and its guard, which pgrep finds too)."""
    pids = [int(pid) for pid in subprocess.run(
        ["pgrep", "-f", f"train.py --test {test_csv}"], capture_output=True,
        text=True).stdout.split() if rank_of(int(pid)) == 1]
    assert pids, "worker:1's program was not found"
    return pids


def test_a_worker_killed_mid_run_resumes_from_its_checkpoint_and_commit(tmp_path):
    """train.py checkpoints and commits its feed every epoch: worker:1 is
    SIGKILLed once the first checkpoint exists, and the next round (the
    --max-restarts) resumes the model from the checkpoint and the feed from
    the commits, still reaching 0.95."""
    log_dir = tmp_path / "logs"
    env = clean_env()
    data = make_data(tmp_path)
    test_csv = str(data / "test.csv")
    proc = subprocess.Popen(
        [DROVER, "run", "--nodes", "2", "--log-dir", str(log_dir), "--grace", "2",
         "--max-restarts", "1", "--input", str(data / "train-*.csv"), "--epochs", "40", "--",
         "/usr/bin/python3", TRAIN, "--test", test_csv],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for_first_checkpoint(proc, log_dir)
        victims = rank_1_processes(test_csv)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=540)
    finally:
        proc.kill()
    output = stdout + stderr
    assert proc.returncode == 0, output
    assert output.count("re-forming the group (restart 1 of 1)") == 1, output
    assert "resumes after its last commit" in output, output
    assert re.search(r"^\[worker:0\] resuming from the checkpoint of epoch \d+$", output,
                     re.MULTILINE), output
    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1 and float(accuracies[0]) >= 0.95, output


def test_elastic_run_loses_a_node_and_still_reaches_95_percent(tmp_path):
    """The main job elastic: `--nodes 2:3 --max-restarts 3`, three workers
    fed on demand (an elastic run's dynamic feed); once the first checkpoint
    exists the agent of worker:1 is SIGKILLed, as a host would die. The two
    left re-form without it, resume the model from the checkpoint and the
    feed from the commits, and still reach 0.95."""
    log_dir = tmp_path / "logs"
    data = make_data(tmp_path)
    test_csv = str(data / "test.csv")
    proc = subprocess.Popen(
        [DROVER, "run", "--nodes", "2:3", "--log-dir", str(log_dir), "--grace", "2",
         "--max-restarts", "3", "--input", str(data / "train-*.csv"), "--epochs", "40", "--",
         "/usr/bin/python3", TRAIN, "--test", test_csv],
        env=clean_env(), cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for_first_checkpoint(proc, log_dir)
        programs = rank_1_processes(test_csv)
        # Up from the program (or its guard, which pgrep finds too) to its agent.
        agent = programs[0]
        while b"\0agent\0" not in open(f"/proc/{agent}/cmdline", "rb").read():
            agent = int(open(f"/proc/{agent}/stat").read().rsplit(")", 1)[1].split()[1])
            assert agent > 1, "worker:1's agent was not found"
        os.kill(agent, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=540)
    finally:
        proc.kill()
    output = stdout + stderr
    assert proc.returncode == 0, output
    assert "re-forming the group with 2 nodes (round 1)" in output, output
    assert "its agent was killed by SIGKILL" in output, output
    assert re.search(r"^\[worker:0\] worker:0: rank 0 of 2, chief=True$", output,
                     re.MULTILINE), output
    assert re.search(r"^\[worker:0\] resuming from the checkpoint of epoch \d+$", output,
                     re.MULTILINE), output
    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1 and float(accuracies[0]) >= 0.95, output

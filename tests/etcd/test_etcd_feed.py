"""Feeding through etcd (#18): the plan, each round's queue, the claims and the
commit points are etcd keys (src/feed/etcd_feed_ledger.h), so the driver is on
no path of the feed. The quick start's main job trains fed through etcd; a
driver SIGKILLed mid-feed and attached again sees the run through a program
that dies, every record consumed once relative to the commits; agents with no
driver feed a plan given by hand. Faults wait for progress (records read),
never for the clock."""

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(HERE))

from feed_check import (assert_each_record_once, consumed_by_epoch,  # noqa: E402
                        records_in_round, write_csv, write_good_then_bad_tfrecords)
from test_etcd_run import (DROVER, PYTHON, TRAIN, WAIT_S, agents, clean_env,  # noqa: E402,F401
                           drover_status, etcd, mark, start_driver, wait_for)

FEED_READER = os.path.abspath(os.environ.get("DROVER_FEED_READER",
                                             str(REPO / "build" / "bin" / "feed_reader")))


# The digits job reads its feed with drover's Python module (not in the
# sanitizer builds).
DROVER_PYTHONPATH = os.environ.get("DROVER_PYTHONPATH", "")


@pytest.mark.skipif(not DROVER_PYTHONPATH, reason="needs the Python module (DROVER_PYTHONPATH)")
def test_the_quick_start_job_fed_through_etcd(tmp_path, mark, etcd):
    for module in ("torch", "sklearn"):
        if subprocess.run([PYTHON, "-c", f"import {module}"]).returncode != 0:
            pytest.fail(f"{PYTHON} cannot import {module}: scripts/deps.sh installs it")
    data = tmp_path / "data"
    subprocess.run([PYTHON, str(REPO / "examples" / "digits" / "make_csv.py"), str(data)],
                   check=True, capture_output=True, timeout=300)
    driver = start_driver(tmp_path, mark, "--rendezvous", etcd.address("quickstart"), "--nodes",
                          "2", "--input", str(data / "train-*.csv"), "--epochs", "40", "--",
                          PYTHON, str(TRAIN), "--test", str(data / "test.csv"),
                          PYTHONPATH=DROVER_PYTHONPATH)
    code = driver.wait(timeout=WAIT_S)
    log = (tmp_path / "driver.log").read_text()
    assert code == 0, log
    accuracy = [float(line.split()[-1]) for line in log.splitlines()
                if line.startswith("[worker:0] test accuracy:")]
    assert accuracy and accuracy[0] >= 0.95, log
    # The programs' log directory is the run's: the model is saved there.
    assert (tmp_path / "logs" / "etcd-quickstart" / "digits_mlp.pt").exists(), log


def test_a_driver_killed_mid_feed_and_attached_again_feeds_every_record_once(
        tmp_path, mark, etcd):
    """Both programs hold after their first records until the driver is
    dead; then executor 1's program SIGKILLs itself mid-feed, so the nodes
    form round 1 with no driver, the queue left after the commits worked out
    in etcd. The driver attached again sees the run to its end."""
    total = 6000
    write_csv(tmp_path / "data.csv", 0, total)
    out = tmp_path / "seen"
    go = tmp_path / "go"
    die_after = 1500
    reader = (f"exec {FEED_READER} --out {out} --batch 50 --append --commit-every 2 "
              f"--hold $DROVER_EXECUTOR_ID={go} --hold-after 300")
    address = etcd.address("feedkill")
    driver = start_driver(tmp_path, mark, "--rendezvous", address, "--nodes", "2", "--input",
                          str(tmp_path / "data.csv"), "--split-bytes", "8000", "--queue-bytes",
                          "65536", "--epochs", "2", "--max-restarts", "3", "--grace", "2", "--",
                          "sh", "-c",
                          f'if [ "$DROVER_EXECUTOR_ID" = 1 ]; then {reader} --die-after '
                          f'{die_after} --die-in-rounds 1; else {reader}; fi')

    def held(executor):
        path = Path(f"{out}.{executor}")
        return path.exists() and "#held" in path.read_text()

    wait_for(lambda: held(0) and held(1), "both programs to read their first records", [driver])
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    attached = start_driver(tmp_path, mark, "--attach", address, name="attached")
    # The attached driver serves the status page while the programs hold.
    wait_for(lambda: "status page http" in (tmp_path / "attached.log").read_text(),
             "the attached driver's status page", [attached])
    url = re.search(r"status page (http://\S+)", (tmp_path / "attached.log").read_text())[1]
    with urllib.request.urlopen(url + "api/cluster", timeout=30) as answer:
        cluster = json.load(answer)
    assert cluster["engine"] == "etcd" and cluster["phase"] == "running", cluster
    assert sorted(n["job"] + ":" + str(n["task_index"]) for n in cluster["nodes"]) == \
        ["worker:0", "worker:1"], cluster
    go.touch()
    code = attached.wait(timeout=WAIT_S)
    log = (tmp_path / "attached.log").read_text()
    assert code == 0, log
    assert "every node's program finished" in log, log
    record = json.loads((tmp_path / "logs" / "etcd-feedkill" / "run.json").read_text())
    assert record["phase"] == "succeeded" and record["exit_code"] == 0, record
    assert [n["state"] for n in record["nodes"]] == ["finished", "finished"], record
    died = records_in_round(f"{out}.1", 0) >= die_after
    agent_logs = "".join(p.read_text() for p in (tmp_path / "logs" / "etcd-feedkill").glob("*.log"))
    if died:
        assert "round 1:" in log, log
        assert "the feed resumes after the last commits" in agent_logs, agent_logs
    assert_each_record_once(consumed_by_epoch(out), total, 2, (died, log))


def test_a_node_failed_by_a_bad_record_is_failed_with_what_its_program_read(
        tmp_path, mark, etcd):
    """As with the built-in rendezvous (src/cli/tests/test_feed_cli.py): the
    failed node's counts up to the failure are kept with its error in etcd
    (its status key goes with its lease as its agent exits), so the run's
    record says the node failed, why, and what its program read, however
    short the run. A small queue keeps the feeder just ahead of the program."""
    write_good_then_bad_tfrecords(tmp_path / "bad.tfrecord", 20000)
    out = tmp_path / "seen"
    driver = start_driver(tmp_path, mark, "--rendezvous", etcd.address("badrecord"), "--nodes",
                          "1", "--input", str(tmp_path / "bad.tfrecord"), "--balance", "dynamic",
                          "--queue-bytes", "65536", "--", FEED_READER, "--out", str(out),
                          "--batch", "64")
    code = driver.wait(timeout=WAIT_S)
    log = (tmp_path / "driver.log").read_text()
    assert code == 1 and "record 20000" in log, log
    with open(f"{out}.0") as f:
        written = sum(1 for _ in f)
    assert written > 19000, (written, log)
    node = json.loads((tmp_path / "logs" / "etcd-badrecord" / "run.json").read_text())["nodes"][0]
    assert node["state"] == "failed" and "record 20000" in node["error"], node
    # The count takes a queue batch in when the program starts on it (8 KiB
    # with this queue: 70 of these 116-byte records), and the program, killed
    # by the stop, may not have written its last 64.
    assert node["feed"] and written <= node["feed"]["records"] <= written + 70 + 64, (written, node)


def write_plan(path, data, epochs=1):
    plan = {"mode": "train", "format": "csv", "epochs": epochs, "balance": "dynamic",
            "partitions": [{"path": str(data), "begin": 0, "end": data.stat().st_size}]}
    path.write_text(json.dumps(plan))


def test_agents_without_a_driver_feed_a_plan_given_by_hand(tmp_path, agents):
    total = 2000
    write_csv(tmp_path / "data.csv", 0, total)
    write_plan(tmp_path / "plan.json", tmp_path / "data.csv", epochs=2)
    out = tmp_path / "seen"
    run = agents("byhand")
    for executor in ("a", "b"):
        run.start(executor, "--nodes", "2", "--feed-plan", str(tmp_path / "plan.json"),
                  command=[FEED_READER, "--out", str(out), "--batch", "50", "--append"])
    assert [run.wait("a"), run.wait("b")] == [0, 0], run.log("a") + run.log("b")
    assert_each_record_once(consumed_by_epoch(out), total, 2, run.log("a") + run.log("b"))

    # A third agent given other input is refused, naming both.
    write_plan(tmp_path / "other.json", tmp_path / "plan.json")
    late = run.start("c", "--nodes", "2", "--feed-plan", str(tmp_path / "other.json"),
                     command=["true"])
    assert late.wait(timeout=WAIT_S) == 1
    assert "is fed another plan (1 partitions from " + str(tmp_path / "data.csv") in \
        run.log("c"), run.log("c")


def test_equal_shares_through_etcd_are_bad_input(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 10)
    done = subprocess.run([DROVER, "run", "--rendezvous", "etcd://127.0.0.1:1/r", "--nodes", "2",
                           "--input", str(tmp_path / "data.csv"), "--balance", "equal", "--",
                           "true"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "a run through etcd feeds with --balance dynamic" in done.stderr, done.stderr

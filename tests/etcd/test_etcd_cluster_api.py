"""drover.Cluster (Python) on an etcd rendezvous (#18): the nodes form through
etcd, so the run outlives the Python process that started it. Each test runs
its driver script in a process of its own (Debian's /usr/bin/python3 with the
built module), as a user's script would run: the framework mode with a ps,
train() and inference() through each node's feed socket, a failing main_fun
raising NodeError, and the Python driver SIGKILLed while the nodes run, the
run then taken up by `drover run --attach`. Faults wait for progress (files
the programs write), never for the clock."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_etcd_run import (PYTHON, WAIT_S, attach_and_finish, clean_env, etcd,  # noqa: E402,F401
                           mark, wait_for)

DROVER_PYTHONPATH = os.environ.get("DROVER_PYTHONPATH", "")
pytestmark = pytest.mark.skipif(not DROVER_PYTHONPATH,
                                reason="needs the Python module (DROVER_PYTHONPATH)")

# Main functions the scripts below share; they travel to the nodes by value.
PRELUDE = '''
import json, os, sys, time
import cloudpickle
import drover

cloudpickle.register_pickle_by_value(sys.modules[__name__])
ADDRESS, WORK = sys.argv[1], sys.argv[2]


def say_role(args, ctx):
    path = os.path.join(args, "%s-%d" % (ctx.job_name, ctx.task_index))
    with open(path, "w") as out:
        json.dump({"spec": ctx.cluster_spec.as_dict(), "executor": ctx.executor_id}, out)
    if ctx.job_name == "ps":
        while True:  # as a parameter server does: the run's end stops it
            time.sleep(0.1)
    # The run ends once the others are done: wait for a ps to start, or it
    # may never start (its agent finds the run over before it read the cluster).
    ps = os.path.join(args, "ps-0")
    deadline = time.time() + 120
    while "ps" in ctx.cluster_spec.jobs and not os.path.exists(ps) and time.time() < deadline:
        time.sleep(0.05)


def count_records(args, ctx):
    feed = ctx.get_data_feed(train_mode=True)
    seen = []
    while not feed.should_stop():
        batch = feed.next_batch(5)
        if not batch:
            break
        seen.extend([feed.epoch, record] for record in batch)
    with open(os.path.join(args, "worker-%d.json" % ctx.task_index), "w") as out:
        json.dump(seen, out)


def square(args, ctx):
    feed = ctx.get_data_feed(train_mode=False)
    while not feed.should_stop():
        batch = feed.next_batch(4)
        if not batch:
            break
        feed.batch_results([record * record for record in batch])
'''


def run_script(tmp_path, mark, address, body, name="script"):
    """Starts `body` (after PRELUDE) as a driver script; returns the process."""
    script = tmp_path / f"{name}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([PYTHON, str(script), address, str(work)], cwd=tmp_path,
                            env=clean_env(mark, PYTHONPATH=DROVER_PYTHONPATH),
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finished(tmp_path, process, name="script"):
    """The script's exit code and its output."""
    try:
        code = process.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code = None
    return code, (tmp_path / f"{name}.log").read_text()


def test_a_cluster_with_a_ps_forms_through_etcd(tmp_path, mark, etcd):
    process = run_script(tmp_path, mark, etcd.address("api-roles"), '''
        cluster = drover.Cluster.run(drover.engines.Local(), say_role, WORK, num_executors=3,
                                     num_ps=1, master_node="chief", rendezvous=ADDRESS,
                                     reservation_timeout=120, status_port=0)
        print("ID", cluster.cluster_id)
        print("STATUS", cluster.status_url(), cluster.status()["cluster_id"])
        print("INFO", json.dumps(cluster.cluster_info))
        print("DIR", cluster.drover_log_dir)
        cluster.shutdown()
        print("SHUT DOWN")
    ''')
    code, log = finished(tmp_path, process)
    assert code == 0, log
    assert "ID etcd-api-roles" in log, log
    assert "STATUS http://127.0.0.1:" in log and " etcd-api-roles\n" in log, log
    info = json.loads(log.split("INFO ", 1)[1].splitlines()[0])
    assert sorted((n["job_name"], n["task_index"]) for n in info) == [
        ("chief", 0), ("ps", 0), ("worker", 0)], info
    work = tmp_path / "work"
    chief = json.loads((work / "chief-0").read_text())
    assert sorted(chief["spec"]) == ["chief", "ps", "worker"], chief
    assert (work / "ps-0").exists() and (work / "worker-0").exists()
    # The run's logs, main_fun and run.json are in drover-logs/etcd-RUN.
    run_dir = tmp_path / "drover-logs" / "etcd-api-roles"
    assert f"DIR {run_dir}" in log, log
    assert len(list(run_dir.glob("main_fun-run-*.pkl"))) == 1
    assert json.loads((run_dir / "run.json").read_text())["phase"] == "succeeded"


def test_train_and_inference_feed_each_node_through_etcd(tmp_path, mark, etcd):
    process = run_script(tmp_path, mark, etcd.address("api-feed"), '''
        partitions = [[p * 100 + i for i in range(n)] for p, n in enumerate([12, 7, 0, 9])]
        cluster = drover.Cluster.run(drover.engines.Local(), count_records, WORK,
                                     num_executors=2, rendezvous=ADDRESS,
                                     input_mode=drover.InputMode.FEED, reservation_timeout=120)
        cluster.train(partitions, num_epochs=2)
        cluster.shutdown()
        cluster = drover.Cluster.run(drover.engines.Local(), square, WORK, num_executors=2,
                                     rendezvous=ADDRESS + "-inference",
                                     input_mode=drover.InputMode.FEED, reservation_timeout=120)
        print("RESULTS", json.dumps(cluster.inference([[1, 2, 3], [4], [5, 6]])))
        cluster.shutdown()
    ''')
    code, log = finished(tmp_path, process)
    assert code == 0, log
    seen = []
    for task in (0, 1):
        seen += [tuple(pair) for pair in
                 json.loads((tmp_path / "work" / f"worker-{task}.json").read_text())]
    records = [p * 100 + i for p, n in enumerate([12, 7, 0, 9]) for i in range(n)]
    # 28 records to 2 nodes: equal shares of 14, each epoch, every record once.
    assert sorted(seen) == sorted((epoch, r) for epoch in (0, 1) for r in records), seen
    results = json.loads(log.split("RESULTS ", 1)[1].splitlines()[0])
    assert results == [1, 4, 9, 16, 25, 36], log


def test_a_failing_main_fun_raises_node_error_through_etcd(tmp_path, mark, etcd):
    process = run_script(tmp_path, mark, etcd.address("api-fail"), '''
        def fail(args, ctx):
            if ctx.task_index == 1:
                raise ValueError("bad shard on " + ctx.job_name)
            time.sleep(600)

        cluster = drover.Cluster.run(drover.engines.Local(), fail, WORK, num_executors=2,
                                     rendezvous=ADDRESS, reservation_timeout=120)
        try:
            cluster.shutdown()
        except drover.NodeError as error:
            print("NODE", error.node, "LOG", error.log)
            print("MESSAGE", str(error).replace("\\n", " | "))
    ''')
    code, log = finished(tmp_path, process)
    assert code == 0, log
    assert "NODE worker:1 LOG " in log, log
    message = log.split("MESSAGE ", 1)[1]
    assert "ValueError: bad shard on worker" in message, log
    node_log = log.split("NODE worker:1 LOG ", 1)[1].split()[0]
    assert "bad shard" in Path(node_log).read_text()


def test_the_python_driver_killed_leaves_the_run_going_and_attach_ends_it(tmp_path, mark, etcd):
    address = etcd.address("api-attach")
    process = run_script(tmp_path, mark, address, '''
        def wait_for_done(args, ctx):
            with open(os.path.join(args, "started-%d" % ctx.task_index), "w") as out:
                out.write(str(os.getpid()))
            while not os.path.exists(os.path.join(args, "done")):
                time.sleep(0.05)
            print("task %d done" % ctx.task_index, flush=True)

        cluster = drover.Cluster.run(drover.engines.Local(), wait_for_done, WORK,
                                     num_executors=2, rendezvous=ADDRESS,
                                     reservation_timeout=120)
        print("FORMED", flush=True)
        cluster.shutdown()
    ''')
    work = tmp_path / "work"
    wait_for(lambda: len(list(work.glob("started-*"))) == 2, "both programs to start", [process])
    wait_for(lambda: "FORMED" in (tmp_path / "script.log").read_text(), "the script's cluster",
             [process])
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    programs = [int(path.read_text()) for path in work.glob("started-*")]
    for pid in programs:
        os.kill(pid, 0)  # still there: the run goes on without its Python driver
    log = attach_and_finish(tmp_path, mark, address, work / "done")
    assert "[worker:0] task 0 done" in log and "[worker:1] task 1 done" in log, log


def test_bad_etcd_arguments_are_value_errors(tmp_path, mark):
    process = run_script(tmp_path, mark, "unused", '''
        for engine, kwargs in [
                (drover.engines.Local(), {"rendezvous": "http://127.0.0.1:2379/run"}),
                (drover.engines.Local(), {"rendezvous": "etcd://127.0.0.1:2379"}),
                (drover.engines.Local(), {"driver_timeout": 5}),
                (drover.engines.Local(), {"etcd_user": "root"}),
                (drover.engines.Local(), {"rendezvous": "etcd://127.0.0.1:2379/r",
                                          "driver_timeout": -1})]:
            try:
                drover.Cluster.run(engine, say_role, WORK, num_executors=1, **kwargs)
                print("ACCEPTED", kwargs)
            except ValueError as error:
                print("REFUSED", error)
    ''')
    code, log = finished(tmp_path, process)
    assert code == 0, log
    assert "ACCEPTED" not in log, log
    assert log.count("REFUSED") == 5, log
    assert "etcd://HOST:PORT[,HOST:PORT...]/RUN', got 'http://" in log, log
    assert "driver_timeout needs rendezvous='etcd://HOST:PORT/RUN'" in log, log
    assert "etcd_user needs rendezvous=" in log, log

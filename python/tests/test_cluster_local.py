"""drover.Cluster on the local engine: real agents and real node processes on
this host, fed through their shared-memory queues."""

import collections
import json
import os
import sys

import cloudpickle
import pytest

import drover
import cluster_util
from cluster_util import in_tmp_path, mark  # noqa: F401 (fixtures)
from cluster_util import count_records, seen_records

# The nodes cannot import this file: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(cluster_util)


@pytest.fixture(autouse=True)
def _in_tmp_path(in_tmp_path):
    """Every test here runs in its tmp_path (cluster_util.in_tmp_path)."""


def run(main_fun, args, **kwargs):
    kwargs.setdefault("num_executors", 2)
    kwargs.setdefault("reservation_timeout", 60)
    return drover.Cluster.run(drover.engines.Local(), main_fun, args, **kwargs)


def test_train_feeds_every_record_once_per_epoch(tmp_path, mark):
    partitions = [[{"id": p * 100 + i, "x": [i, p]} for i in range(n)]
                  for p, n in enumerate([30, 0, 17, 50, 1])]
    cluster = run(count_records, str(tmp_path), input_mode=drover.InputMode.FEED)
    assert cluster.num_executors == 2
    assert [n["job_name"] for n in cluster.cluster_info] == ["worker", "worker"]
    assert cluster.cluster_meta["cluster_template"] == {"worker": [0, 1]}
    cluster.train(partitions, num_epochs=3)
    cluster.shutdown()
    seen = [(epoch, record["id"]) for epoch, record in seen_records(tmp_path, (0, 1))]
    expected = [(epoch, r["id"]) for epoch in range(3) for p in partitions for r in p]
    assert sorted(seen) == sorted(expected)


@pytest.mark.parametrize("remainder, each, fed", [
    ("pad", 11, ["p0-0"]),   # 21 records: the first fed again
    ("drop", 10, []),        # the last to nobody
])
def test_train_gives_every_fed_node_an_equal_share(tmp_path, mark, remainder, each, fed):
    sizes = [7, 3, 5, 6]
    partitions = [["p%d-%d" % (p, i) for i in range(n)] for p, n in enumerate(sizes)]
    cluster = run(count_records, str(tmp_path), input_mode=drover.InputMode.FEED,
                  num_executors=3, num_ps=1)
    cluster.train(partitions, num_epochs=2, remainder=remainder)
    cluster.shutdown()
    for task in (0, 1):
        per_epoch = collections.Counter(epoch for epoch, _ in seen_records(tmp_path, [task]))
        assert per_epoch == {0: each, 1: each}, (task, per_epoch)
    # Shares are contiguous runs of the records in order.
    first = [record for epoch, record in seen_records(tmp_path, [0]) if epoch == 0]
    assert first == [r for p in partitions for r in p][:each]
    everything = [r for p in partitions for r in p]
    expected = everything + fed if remainder == "pad" else everything[:-1]
    got = [record for epoch, record in seen_records(tmp_path, (0, 1)) if epoch == 1]
    assert sorted(got) == sorted(expected)
    assert not (tmp_path / "ps-0.json").exists()


def test_train_refuses_an_unknown_remainder(tmp_path, mark):
    cluster = run(count_records, str(tmp_path), input_mode=drover.InputMode.FEED)
    try:
        with pytest.raises(ValueError, match="remainder is 'pad' or 'drop'"):
            cluster.train([[1]], remainder="even")
    finally:
        cluster.train([[1]])
        cluster.shutdown()


def square_results(args, ctx):
    feed = ctx.get_data_feed(train_mode=False)
    while not feed.should_stop():
        batch = feed.next_batch(4)
        if not batch:
            break
        feed.batch_results([{"in": record, "out": record * record, "by": ctx.task_index}
                            for record in batch])


def test_inference_returns_one_result_per_record_in_order(tmp_path, mark):
    partitions = [list(range(p * 10, p * 10 + n)) for p, n in enumerate([9, 0, 13, 1, 6])]
    cluster = run(square_results, None, input_mode=drover.InputMode.FEED)
    results = cluster.inference(partitions)
    cluster.shutdown()
    flat = [r for p in partitions for r in p]
    assert [r["in"] for r in results] == flat
    assert [r["out"] for r in results] == [r * r for r in flat]
    assert {r["by"] for r in results} == {0, 1}


def mapped_columns(args, ctx):
    feed = ctx.get_data_feed(train_mode=True, input_mapping={"a": "x", "b": "y"})
    rows = 0
    while not feed.should_stop():
        batch = feed.next_batch(10)
        if len(batch["x"]) == 0:
            break
        assert batch["x"].dtype.kind == "f" and batch["y"].dtype.kind == "i"
        assert (batch["y"] == batch["x"] * 2).all()
        rows += len(batch["x"])
    with open(os.path.join(args, "rows-%d" % ctx.task_index), "w") as out:
        out.write(str(rows))


def test_dataframe_rows_with_input_mapping(tmp_path, mark):
    pandas = pytest.importorskip("pandas")
    frames = [pandas.DataFrame({"a": [float(i) for i in range(k, k + 20)],
                                "b": [2 * i for i in range(k, k + 20)]}) for k in (0, 20, 40)]
    cluster = run(mapped_columns, str(tmp_path), input_mode=drover.InputMode.FEED)
    cluster.train(frames)
    cluster.shutdown()
    assert sum(int((tmp_path / ("rows-%d" % i)).read_text()) for i in (0, 1)) == 60


def fail_on_worker_1(args, ctx):
    if ctx.task_index == 1:
        def deep(n):
            if n == 0:
                raise ValueError("bad hyper-parameter %r" % args)
            deep(n - 1)
        deep(3)


def test_a_node_exception_surfaces_with_its_traceback(tmp_path, mark):
    cluster = run(fail_on_worker_1, "lr=-1")
    with pytest.raises(drover.NodeError) as raised:
        cluster.shutdown(timeout=60)
    error = raised.value
    assert error.node == "worker:1"
    assert error.reason == "exit code 1"
    assert "Traceback (most recent call last):" in error.traceback
    assert "ValueError: bad hyper-parameter 'lr=-1'" in error.traceback
    assert "in deep" in error.traceback
    assert "worker:1" in str(error) and "bad hyper-parameter" in str(error)
    assert os.path.exists(error.log)


def fail_while_fed(args, ctx):
    feed = ctx.get_data_feed(train_mode=True)
    feed.next_batch(3)
    if ctx.task_index == 0:
        raise RuntimeError("out of memory, pretend")
    while not feed.should_stop() and feed.next_batch(3):
        pass


def test_a_node_failing_during_train_raises_node_error_from_train(tmp_path, mark):
    cluster = run(fail_while_fed, None, input_mode=drover.InputMode.FEED)
    with pytest.raises(drover.NodeError) as raised:
        cluster.train([list(range(100000))] * 4, num_epochs=5)
    assert raised.value.node == "worker:0"
    assert "out of memory, pretend" in raised.value.traceback
    cluster.shutdown()  # already finished: a no-op


def never_reads(args, ctx):
    import time
    ctx.get_data_feed(train_mode=True)
    time.sleep(600)


def test_feed_timeout_names_the_node(tmp_path, mark):
    cluster = run(never_reads, None, input_mode=drover.InputMode.FEED, num_executors=1,
                  queue_bytes=64 << 10, grace=1.0)
    with pytest.raises(TimeoutError) as raised:
        cluster.train([[b"x" * 1000] * 1000], feed_timeout=1)
    assert "worker:0" in str(raised.value)
    assert "1 s" in str(raised.value)
    with pytest.raises(TimeoutError):
        cluster.shutdown(timeout=1)


def ignores_the_end(args, ctx):
    import time
    time.sleep(600)


def test_shutdown_timeout_stops_every_node(tmp_path, mark):
    cluster = run(ignores_the_end, None, num_executors=2, grace=1.0)
    with pytest.raises(TimeoutError) as raised:
        cluster.shutdown(timeout=1)
    assert "stopped" in str(raised.value)


def framework_mode(args, ctx):
    with open(os.path.join(args, "%s-%d" % (ctx.job_name, ctx.task_index)), "w") as out:
        out.write(json.dumps({"cluster": ctx.cluster_spec.as_dict(), "chief": ctx.is_chief,
                              "worker_num": ctx.worker_num}))


def test_framework_mode_with_ps_chief_and_evaluator(tmp_path, mark):
    cluster = run(framework_mode, str(tmp_path), num_executors=4, num_ps=1, master_node="chief",
                  eval_node=True)
    assert cluster.input_mode == drover.InputMode.FRAMEWORK
    with pytest.raises(ValueError, match="InputMode.FEED"):
        cluster.train([[1]])
    cluster.shutdown(grace_secs=1)
    jobs = sorted(n["job_name"] for n in cluster.cluster_info)
    assert jobs == ["chief", "evaluator", "ps", "worker"]
    chief = json.loads((tmp_path / "chief-0").read_text())
    assert chief["chief"] is True
    assert sorted(chief["cluster"]) == ["chief", "evaluator", "ps", "worker"]
    assert (tmp_path / "worker-0").exists()


def test_driver_ps_nodes_counts_the_ps_among_the_executors(tmp_path, mark):
    cluster = run(framework_mode, str(tmp_path), num_executors=3, num_ps=1,
                  driver_ps_nodes=True)
    cluster.shutdown()
    assert sorted(n["job_name"] for n in cluster.cluster_info) == ["ps", "worker", "worker"]


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="num_executors"):
        run(framework_mode, None, num_executors=0)
    with pytest.raises(ValueError, match="master_node"):
        run(framework_mode, None, master_node="boss")
    with pytest.raises(TypeError, match="callable"):
        run("not a function", None)
    with pytest.raises(ValueError, match="leaves no chief, master or worker"):
        run(framework_mode, None, num_executors=1, num_ps=1)
    with pytest.raises(TypeError, match="not a list of records"):
        cluster = run(framework_mode, str(tmp_path), num_executors=1,
                      input_mode=drover.InputMode.FEED)
        try:
            cluster.train([1, 2, 3])
        finally:
            cluster.shutdown()


def test_status_page_and_status_dict(tmp_path, mark):
    import urllib.request
    partitions = [[{"id": p * 100 + i} for i in range(40)] for p in range(3)]
    cluster = run(count_records, str(tmp_path), input_mode=drover.InputMode.FEED, status_port=0)
    url = cluster.status_url()
    assert url.startswith("http://127.0.0.1:"), url
    with urllib.request.urlopen(url + "api/cluster", timeout=10) as response:
        served = json.loads(response.read())
    assert served["phase"] == "running"
    assert [n["task"] for n in served["nodes"]] == ["worker:0", "worker:1"]
    cluster.train(partitions, num_epochs=2)
    cluster.shutdown()
    status = cluster.status()
    assert status["phase"] == "succeeded"
    assert {n["state"] for n in status["nodes"]} == {"finished"}
    assert status["feed"]["records"] == 240  # every record, twice, counted where it was read
    # Without status_port there is no server.
    (tmp_path / "quiet").mkdir()
    quiet = run(count_records, str(tmp_path / "quiet"), input_mode=drover.InputMode.FEED)
    assert quiet.status_url() is None
    quiet.shutdown()


KILLED_DRIVER_SCRIPT = r'''
import sys, time
import drover

def main(args, ctx):
    import subprocess, time
    subprocess.Popen(["setsid", "sleep", "300"])  # escapes the node's group and session
    time.sleep(300)

cluster = drover.Cluster.run(drover.engines.Local(), main, None, num_executors=2,
                             tensorboard=True, reservation_timeout=60)
# One write: under PYTHONUNBUFFERED print() writes each piece on its own,
# and TensorBoard's line may land between them.
sys.stdout.write("started %s\n" % cluster.tensorboard_url())
sys.stdout.flush()
time.sleep(300)
'''


def test_a_killed_interpreter_leaves_no_tensorboard_and_no_node(tmp_path, mark):
    # A stand-in TensorBoard that starts a descendant of its own, in a new
    # session, as a real server's workers might.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "tensorboard"
    fake.write_text("#!/bin/sh\nsetsid sleep 300 &\necho tensorboard up\nexec sleep 300\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    script = tmp_path / "driver.py"
    script.write_text(KILLED_DRIVER_SCRIPT)
    import subprocess
    process = subprocess.Popen(["/usr/bin/python3", str(script)], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The stand-in TensorBoard prints to the same stdout, in either order.
        lines = [process.stdout.readline() for _ in range(2)]
        if not any(line.startswith("started ") for line in lines):
            process.kill()
            pytest.fail("no 'started' line: %r\n%s" % (lines, process.stderr.read()))
        # Progress before the fault: both nodes' programs and TensorBoard's
        # descendant are up (each runs `sleep 300`).
        cluster_util.wait_for(
            lambda: sum(1 for _, cmdline in cluster_util.marked_processes(mark)
                        if cmdline.startswith("sleep 300")) >= 4,
            "the nodes' and TensorBoard's descendants")
        process.kill()
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # The mark fixture checks that nothing carrying the mark is left.

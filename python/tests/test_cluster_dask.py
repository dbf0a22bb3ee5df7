"""drover.Cluster on the Dask engine, against a real dask-scheduler and real
dask-worker processes that the test starts on loopback."""

import collections
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

distributed = pytest.importorskip("distributed")
import dask.bag as db  # noqa: E402

import cloudpickle  # noqa: E402

import drover  # noqa: E402
import cluster_util
from cluster_util import MARK_VARIABLE, assert_no_leftovers, count_records, new_mark, seen_records  # noqa: E402

# The nodes need not import this file: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(cluster_util)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaskCluster:
    """A scheduler and N workers (no nanny: killing a worker's pid kills it)."""

    def __init__(self, tmp_path, workers, mark):
        self.mark = mark
        self.env = dict(os.environ)
        self.env[MARK_VARIABLE] = mark
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.address = "tcp://127.0.0.1:%d" % free_port()
        self.log = open(tmp_path / "dask.log", "wb")
        self.scheduler = self._start("distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                     "--port", self.address.rsplit(":", 1)[1],
                                     "--dashboard-address", ":0", "--no-dashboard")
        self.workers = [self._start("distributed.cli.dask_worker", self.address, "--host",
                                    "127.0.0.1", "--nthreads", "2", "--no-nanny",
                                    "--no-dashboard", "--name", "w%d" % i,
                                    "--local-directory", str(tmp_path / ("w%d" % i)))
                        for i in range(workers)]
        self.client = distributed.Client(self.address, timeout=60)
        self.client.wait_for_workers(workers, timeout=120)

    def _start(self, module, *args):
        return subprocess.Popen([sys.executable, "-m", module, *args], env=self.env,
                                stdout=self.log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def pids(self):
        return [p.pid for p in [self.scheduler, *self.workers]]

    def worker_pid(self, address):
        return self.client.run(os.getpid, workers=[address])[address]

    def close(self):
        try:
            self.client.close()
        finally:
            for process in [*self.workers, self.scheduler]:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            self.log.close()


@pytest.fixture
def dask_cluster(tmp_path, monkeypatch):
    mark = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, mark)
    cluster = DaskCluster(tmp_path, 2, mark)
    yield cluster
    try:
        # Nothing drover started may outlive the test; the Dask processes are the test's own.
        assert_no_leftovers(mark, exclude=cluster.pids())
    finally:
        cluster.close()


def test_one_node_per_worker_fed_from_a_bag(dask_cluster, tmp_path):
    engine = drover.engines.Dask(dask_cluster.client)
    cluster = drover.Cluster.run(engine, count_records, str(tmp_path), num_executors=2,
                                 input_mode=drover.InputMode.FEED,
                                 drover_log_dir=str(tmp_path / "logs"))
    hosts = {n["executor_id"]: engine._assignment[n["executor_id"]]
             for n in cluster.cluster_info}
    assert sorted(hosts.values()) == sorted(dask_cluster.client.scheduler_info()["workers"])
    # Uneven partitions (300, then 201 in two): equal shares of 251 records,
    # the first record fed again to pad the second.
    bag = db.concat([db.from_sequence(range(300), npartitions=1),
                     db.from_sequence(range(300, 501), npartitions=2)])
    cluster.train(bag, num_epochs=2)
    cluster.shutdown()
    for task in (0, 1):
        per_epoch = collections.Counter(epoch for epoch, _ in seen_records(tmp_path, [task]))
        assert per_epoch == {0: 251, 1: 251}, (task, per_epoch)
    seen = seen_records(tmp_path, (0, 1))
    assert sorted(seen) == sorted([(epoch, i) for epoch in range(2) for i in range(501)] +
                                  [(0, 0), (1, 0)])
    # Node output came back through the engine and was logged on the driver's host.
    assert os.path.exists(tmp_path / "logs" / "worker-0.log")


def _strings(value):
    """Every str and bytes inside a task's arguments."""
    if isinstance(value, (str, bytes)):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def test_each_node_task_carries_only_its_own_credential(dask_cluster, tmp_path, monkeypatch):
    """Task arguments go through the scheduler: they carry a node credential
    that lets only that node join, never the cluster token (#15)."""
    client = dask_cluster.client
    submitted = []
    submit = client.submit

    def recording_submit(fn, *args, **kwargs):
        submitted.append((getattr(fn, "__name__", repr(fn)), args))
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(client, "submit", recording_submit)
    cluster = drover.Cluster.run(drover.engines.Dask(client), count_records, str(tmp_path),
                                 num_executors=2, input_mode=drover.InputMode.FEED,
                                 drover_log_dir=str(tmp_path / "logs"))
    cluster.train(db.from_sequence(range(20), npartitions=2))
    cluster.shutdown()

    node_tasks = [args for name, args in submitted if name == "_run_agent"]
    assert len(node_tasks) == 2
    executors = set()
    for argv, _payload, credential, *_rest in node_tasks:
        executor = argv[argv.index("--executor-id") + 1]
        parsed = drover.Credential.parse(credential.decode())
        assert (parsed.kind, parsed.executor_id) == ("node", executor)
        executors.add(executor)
    assert executors == {"0", "1"}
    # The cluster token is the only credential written as bare hex: no
    # argument of any task (node or feeding) is one.
    for name, args in submitted:
        for text in _strings(args):
            try:
                found = drover.Credential.parse(
                    text.decode("ascii") if isinstance(text, bytes) else text)
            except (ValueError, UnicodeDecodeError):
                continue
            assert found.kind != "cluster", "task %s carries the cluster token" % name


def echo_rows(args, ctx):
    feed = ctx.get_data_feed(train_mode=False, input_mapping={"a": "a"})
    while not feed.should_stop():
        batch = feed.next_batch(8)
        if len(batch["a"]) == 0:
            break
        feed.batch_results([float(v) * 10 for v in batch["a"]])


def test_inference_on_a_dataframe_returns_a_bag_in_order(dask_cluster, tmp_path):
    import dask.dataframe as dd
    import pandas

    frame = pandas.DataFrame({"a": [float(i) for i in range(103)], "b": ["x"] * 103})
    cluster = drover.Cluster.run(drover.engines.Dask(dask_cluster.client), echo_rows, None,
                                 num_executors=2, input_mode=drover.InputMode.FEED,
                                 drover_log_dir=str(tmp_path / "logs"))
    results = cluster.inference(dd.from_pandas(frame, npartitions=4))
    assert isinstance(results, db.Bag)
    assert results.compute() == [i * 10.0 for i in range(103)]
    cluster.shutdown()


def slow_training(args, ctx):
    import time as clock
    feed = ctx.get_data_feed(train_mode=True)
    while not feed.should_stop():
        if not feed.next_batch(4):
            break
        clock.sleep(0.05)


def test_a_killed_worker_is_a_clear_error_naming_the_node(dask_cluster, tmp_path):
    engine = drover.engines.Dask(dask_cluster.client)
    cluster = drover.Cluster.run(engine, slow_training, None, num_executors=2,
                                 input_mode=drover.InputMode.FEED,
                                 drover_log_dir=str(tmp_path / "logs"), grace=2.0)
    victim = next(n for n in cluster.cluster_info if n["task_index"] == 1)
    address = engine._assignment[victim["executor_id"]]
    pid = dask_cluster.worker_pid(address)

    import threading

    def kill_once_fed():
        # A fault after progress, not after a time: worker:1 has read records.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            node = next((n for n in (cluster.status() or {}).get("nodes", [])
                         if n["task"] == "worker:1"), None)
            if node and (node.get("feed") or {}).get("records", 0) > 0:
                break
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_once_fed)
    killer.start()
    started = time.monotonic()
    with pytest.raises(drover.NodeError) as raised:
        cluster.train(db.from_sequence(range(100000), npartitions=4), num_epochs=10,
                      feed_timeout=120)
    killer.join()
    assert raised.value.node == "worker:1"
    assert address in str(raised.value)
    assert "left the Dask cluster" in str(raised.value)
    assert "left the cluster" in raised.value.reason
    assert time.monotonic() - started < 120, "the failure was not reported before the feed timeout"
    cluster.shutdown()
    dask_cluster.workers = [w for w in dask_cluster.workers if w.pid != pid]


def test_too_few_workers_is_a_clear_error(dask_cluster, tmp_path):
    with pytest.raises(ValueError, match="needs 3 Dask workers"):
        drover.Cluster.run(drover.engines.Dask(dask_cluster.client), count_records, None,
                           num_executors=3, drover_log_dir=str(tmp_path / "logs"))


def test_driver_ps_nodes_run_beside_the_driver(dask_cluster, tmp_path):
    engine = drover.engines.Dask(dask_cluster.client)
    cluster = drover.Cluster.run(engine, count_records, str(tmp_path), num_executors=3,
                                 num_ps=1, driver_ps_nodes=True,
                                 input_mode=drover.InputMode.FEED,
                                 drover_log_dir=str(tmp_path / "logs"))
    jobs = {n["executor_id"]: n["job_name"] for n in cluster.cluster_info}
    assert jobs == {0: "ps", 1: "worker", 2: "worker"}
    assert set(engine._assignment) == {1, 2}  # only the workers took Dask workers
    cluster.train(db.from_sequence(range(40), npartitions=2))
    cluster.shutdown()
    assert [len(seen_records(tmp_path, [task])) for task in (0, 1)] == [20, 20]


def test_digits_example_as_a_dask_job(dask_cluster, tmp_path):
    """The main job: 2 workers fed from a dask.bag reach >= 0.95 accuracy, and
    inference returns one prediction per test row, in order."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "digits", "dask_digits.py"),
         "--scheduler", dask_cluster.address, "--workers", "2", "--min-accuracy", "0.95",
         "--model-dir", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "test accuracy" in result.stdout
    assert "450 predictions, in input order" in result.stdout

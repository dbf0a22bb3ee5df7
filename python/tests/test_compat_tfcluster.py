"""drover.compat.tensorflowonspark on real drover clusters (the local engine:
real agents and node processes on this host, fed through their queues).

TFClusterTest is TensorFlowOnSpark's tests/test_TFCluster.py and the
test_datafeed of its tests/test_TFNode.py, ported with only the import and the
data source changed: ``sc`` is drover's local engine instead of a
SparkContext, an RDD of n partitions is a list of n lists, an RDD's count() or
sum() is len() or sum() of the returned list, and the tests that use
TensorFlow for arithmetic (tf.constant, tf.math.add, tf.math.square) use NumPy,
since TensorFlow cannot be installed here. The other tests cover what the
issue (#22) lists beyond TensorFlowOnSpark's own tests.
"""

import os
import sys
import time
import unittest

import cloudpickle
import pytest

import cluster_util
import drover
from cluster_util import in_tmp_path, mark  # noqa: F401 (fixtures)
from cluster_util import MARK_VARIABLE, assert_no_leftovers, new_mark
from drover.compat.tensorflowonspark import TFCluster, TFNode

# The nodes cannot import this file: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(cluster_util)


class TFClusterTest(unittest.TestCase):
    """TensorFlowOnSpark's TFClusterTest; the SparkTest base class becomes this
    setUp (a drover engine, two workers, a private directory and a marker
    that shows no process outlived the test)."""

    def setUp(self):
        self.sc = drover.engines.Local()
        self.num_workers = 2
        self._old_cwd = os.getcwd()
        self._dir = __import__("tempfile").mkdtemp(prefix="compat-tfos-")
        os.chdir(self._dir)
        self._mark = new_mark()
        os.environ[MARK_VARIABLE] = self._mark

    def tearDown(self):
        os.chdir(self._old_cwd)
        os.environ.pop(MARK_VARIABLE, None)
        assert_no_leftovers(self._mark)

    def test_basic_tf(self):
        """Single-node TF graph (w/ args) running independently on multiple executors."""
        def _map_fun(args, ctx):
            import numpy as tf  # TensorFlowOnSpark: import tensorflow as tf
            x = tf.array(args['x'])
            y = tf.array(args['y'])
            sum = tf.add(x, y)
            assert sum == 3

        args = {'x': 1, 'y': 2}
        cluster = TFCluster.run(self.sc, _map_fun, tf_args=args, num_executors=self.num_workers, num_ps=0)
        cluster.shutdown()

    def test_inputmode_spark(self):
        """Distributed TF cluster w/ InputMode.SPARK"""
        def _map_fun(args, ctx):
            import numpy as tf  # TensorFlowOnSpark: import tensorflow as tf

            tf_feed = TFNode.DataFeed(ctx.mgr, False)
            while not tf_feed.should_stop():
                batch = tf_feed.next_batch(batch_size=10)
                print("batch: {}".format(batch))
                squares = tf.square(batch)
                print("squares: {}".format(squares))
                tf_feed.batch_results(squares)

        input = [[x] for x in range(1000)]    # set up input as tensors of shape [1] to match placeholder
        rdd = [input[i:i + 100] for i in range(0, 1000, 100)]  # sc.parallelize(input, 10)
        cluster = TFCluster.run(self.sc, _map_fun, tf_args={}, num_executors=self.num_workers, num_ps=0, input_mode=TFCluster.InputMode.SPARK)
        rdd_out = cluster.inference(rdd)
        rdd_sum = sum(rdd_out)  # rdd_out.sum()
        self.assertEqual(rdd_sum, sum([x * x for x in range(1000)]))
        cluster.shutdown()

    def test_inputmode_spark_exception(self):
        """Distributed TF cluster w/ InputMode.SPARK and exception during feeding"""
        def _map_fun(args, ctx):
            import numpy as tf  # TensorFlowOnSpark: import tensorflow as tf

            tf_feed = TFNode.DataFeed(ctx.mgr, False)
            while not tf_feed.should_stop():
                batch = tf_feed.next_batch(10)
                if len(batch) > 0:
                    squares = tf.square(batch)
                    tf_feed.batch_results(squares)
                    raise Exception("FAKE exception during feeding")

        input = [[x] for x in range(1000)]    # set up input as tensors of shape [1] to match placeholder
        rdd = [input[i:i + 100] for i in range(0, 1000, 100)]  # sc.parallelize(input, 10)
        with self.assertRaises(Exception):
            cluster = TFCluster.run(self.sc, _map_fun, tf_args={}, num_executors=self.num_workers, num_ps=0, input_mode=TFCluster.InputMode.SPARK)
            len(cluster.inference(rdd, feed_timeout=1))  # .count()
            cluster.shutdown()

    def test_inputmode_spark_late_exception(self):
        """Distributed TF cluster w/ InputMode.SPARK and exception after feeding"""
        def _map_fun(args, ctx):
            import numpy as tf  # TensorFlowOnSpark: import tensorflow as tf

            tf_feed = TFNode.DataFeed(ctx.mgr, False)
            while not tf_feed.should_stop():
                batch = tf_feed.next_batch(10)
                if len(batch) > 0:
                    squares = tf.square(batch)
                    tf_feed.batch_results(squares)

            # simulate post-feed actions that raise an exception
            time.sleep(2)
            raise Exception("FAKE exception after feeding")

        input = [[x] for x in range(1000)]    # set up input as tensors of shape [1] to match placeholder
        rdd = [input[i:i + 100] for i in range(0, 1000, 100)]  # sc.parallelize(input, 10)
        with self.assertRaises(Exception):
            cluster = TFCluster.run(self.sc, _map_fun, tf_args={}, num_executors=self.num_workers, num_ps=0, input_mode=TFCluster.InputMode.SPARK)
            len(cluster.inference(rdd))  # .count()
            cluster.shutdown(grace_secs=5)      # note: grace_secs must be larger than the time needed for post-feed actions

    def test_port_released(self):
        """Test that temporary socket/port is released prior to invoking user map_fun."""
        def _map_fun(args, ctx):
            assert ctx.tmp_socket is None

        cluster = TFCluster.run(self.sc, _map_fun, tf_args={}, num_executors=self.num_workers, num_ps=0, input_mode=TFCluster.InputMode.TENSORFLOW, master_node='chief')
        cluster.shutdown()

    def test_port_unreleased(self):
        """Test that temporary socket/port is unreleased prior to invoking user map_fun."""
        def _map_fun(args, ctx):
            import socket
            assert ctx.tmp_socket is not None
            reserved_port = ctx.tmp_socket.getsockname()[1]

            # socket bind to tmp port should fail
            try:
                my_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                my_sock.bind(('0.0.0.0', reserved_port))
                assert False, "should never hit this assert statement"
            except socket.error as e:
                print(e)
                assert True, "should raise an exception"

            ctx.release_port()
            assert ctx.tmp_socket is None

        cluster = TFCluster.run(self.sc, _map_fun, tf_args={}, num_executors=self.num_workers, num_ps=0, input_mode=TFCluster.InputMode.TENSORFLOW, master_node='chief', release_port=False)
        cluster.shutdown()

    def test_datafeed(self):
        """TFNode.DataFeed basic operations (TensorFlowOnSpark's TFNodeTest.test_datafeed:
        the ten numbers come from train() instead of a TFManager's queue, the
        end-of-feed marker from shutdown(), and its assertions run in the node)."""
        def _map_fun(args, ctx):
            feed = TFNode.DataFeed(ctx.mgr)

            # [0,1]
            assert not feed.done_feeding
            batch = feed.next_batch(2)
            assert len(batch) == 2
            assert sum(batch) == 1

            # [2,3,4,5]
            assert not feed.done_feeding
            batch = feed.next_batch(4)
            assert len(batch) == 4
            assert sum(batch) == 14

            # [6,7,8,9]
            assert not feed.done_feeding
            batch = feed.next_batch(10)           # ask for more than available
            assert len(batch) == 4
            assert sum(batch) == 30

            # should be done
            assert feed.should_stop()

        cluster = TFCluster.run(self.sc, _map_fun, tf_args={}, num_executors=1, num_ps=0,
                                input_mode=TFCluster.InputMode.SPARK)
        cluster.train([list(range(10))], num_epochs=1)
        cluster.shutdown()                        # end-of-feed marker


# --- beyond TensorFlowOnSpark's tests -------------------------------------------


@pytest.fixture(autouse=True)
def _in_tmp_path(in_tmp_path):
    """Every test here runs in its tmp_path (cluster_util.in_tmp_path)."""


def write_context(args, ctx):
    """Writes what the node's ctx says to <args>/<executor>.json."""
    import json
    record = {
        "executor_id": ctx.executor_id, "executor_type": type(ctx.executor_id).__name__,
        "worker_num": ctx.worker_num, "job_name": ctx.job_name, "task_index": ctx.task_index,
        "cluster_spec": ctx.cluster_spec, "spec_type": type(ctx.cluster_spec).__name__,
        "num_workers": ctx.num_workers, "defaultFS": ctx.defaultFS,
        "working_dir": ctx.working_dir, "absolute": ctx.absolute_path("model"),
        "hdfs": TFNode.hdfs_path(ctx, "/data"), "mgr": type(ctx.mgr).__name__,
        "tmp_socket": ctx.tmp_socket is None, "port": ctx.port,
    }
    path = os.path.join(args, "%d.json" % ctx.executor_id)
    with open(path + ".part", "w") as out:
        json.dump(record, out)
    os.rename(path + ".part", path)
    if ctx.job_name != "ps":
        # The ps is stopped once the others are done, as in TensorFlowOnSpark:
        # wait until it has written its record, so a slow start cannot lose it.
        ps_record = os.path.join(args, "0.json")
        cluster_util.wait_for(lambda: os.path.exists(ps_record), "the ps's record " + ps_record)


def test_node_context_is_tensorflowonspark_s(tmp_path, mark):
    cluster = TFCluster.run(drover.engines.Local(), write_context, str(tmp_path), 4, 1,
                            master_node="chief", reservation_timeout=60)
    assert cluster.input_mode == TFCluster.InputMode.TENSORFLOW
    assert cluster.cluster_meta["cluster_template"] == {"ps": [0], "chief": [1], "worker": [2, 3]}
    assert cluster.cluster_meta["release_port"] is True
    assert cluster.defaultFS == "file://"
    assert cluster.queues == ["input", "output", "error"]
    assert [n["executor_id"] for n in cluster.cluster_info] == [0, 1, 2, 3]
    assert cluster.tensorboard_url() is None
    cluster.shutdown()
    import json
    seen = {i: json.loads((tmp_path / ("%d.json" % i)).read_text()) for i in range(4)}
    spec = seen[0]["cluster_spec"]
    assert sorted(spec) == ["chief", "ps", "worker"] and len(spec["worker"]) == 2
    for i, record in seen.items():
        assert record["executor_id"] == i and record["executor_type"] == "int"
        assert record["worker_num"] == i
        assert record["spec_type"] == "dict" and record["cluster_spec"] == spec
        assert record["num_workers"] == 3  # chief and workers, as TensorFlowOnSpark counts
        assert record["defaultFS"] == "file://"
        assert record["absolute"] == "file://%s/model" % record["working_dir"]
        assert record["hdfs"] == "file:///data"
        assert record["mgr"] == "NodeManager" and record["tmp_socket"]
        task = spec[record["job_name"]][record["task_index"]]
        assert task.endswith(":%d" % record["port"])
    assert [seen[i]["job_name"] for i in range(4)] == ["ps", "chief", "worker", "worker"]


def check_argv(args, ctx):
    import sys
    assert sys.argv == args == ["train.py", "--epochs", "3"], sys.argv


def test_a_list_of_tf_args_is_the_nodes_argv(mark):
    cluster = TFCluster.run(drover.engines.Local(), check_argv, ["train.py", "--epochs", "3"],
                            2, 0, reservation_timeout=60)
    cluster.shutdown(timeout=120)


def test_run_refuses_what_tensorflowonspark_refuses(mark):
    engine = drover.engines.Local()
    with pytest.raises(AssertionError, match="at least one worker or master"):
        TFCluster.run(engine, write_context, None, 1, 1)
    with pytest.raises(ValueError, match="requires 3 nodes, but only 2"):
        TFCluster.run(engine, write_context, None, 2, 1, master_node="chief", eval_node=True)
    with pytest.raises(Exception, match="only supported in InputMode.TENSORFLOW"):
        TFCluster.run(engine, write_context, None, 2, 1, input_mode=TFCluster.InputMode.SPARK,
                      driver_ps_nodes=True)
    with pytest.raises(Exception, match="only supported in InputMode.TENSORFLOW"):
        TFCluster.run(engine, write_context, None, 2, 0, input_mode=TFCluster.InputMode.SPARK,
                      eval_node=True)
    with pytest.raises(TypeError, match="drover engine"):
        TFCluster.run(object(), write_context, None, 2, 0)


def count_fed(args, ctx):
    """Reads the whole feed (input_mapping given in args) and writes what came."""
    import json
    feed = ctx.get_data_feed(train_mode=True, input_mapping=args.get("mapping"))
    batches = []
    while not feed.should_stop():
        batch = feed.next_batch(args["batch"])
        batches.append(batch)
    with open(os.path.join(args["dir"], "%d.json" % ctx.executor_id), "w") as out:
        json.dump(batches, out)


def test_train_num_epochs_0_feeds_ten_epochs_and_fills_batches(tmp_path, mark):
    cluster = TFCluster.run(drover.engines.Local(), count_fed, {"dir": str(tmp_path), "batch": 4},
                            1, 0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    cluster.train([[1, 2, 3], [4, 5]])          # TensorFlowOnSpark's default num_epochs=0
    with pytest.raises(ValueError, match="negative"):
        cluster.train([[1]], num_epochs=-1)
    with pytest.raises(ValueError, match="Unknown queue"):
        cluster.train([[1]], qname="other")
    cluster.shutdown()
    import json
    batches = json.loads((tmp_path / "0.json").read_text())
    records = [r for batch in batches for r in batch]
    assert sorted(records) == sorted([1, 2, 3, 4, 5] * 10)
    # A training batch is filled across partitions and epochs, as
    # TensorFlowOnSpark's queue fills it; only the last one is short.
    assert [len(b) for b in batches[:-1] if b] == [4] * (len(records) // 4)


def test_input_mapping_gives_lists_in_sorted_column_order(tmp_path, mark):
    args = {"dir": str(tmp_path), "batch": 3, "mapping": {"y": "label", "x": "image"}}
    cluster = TFCluster.run(drover.engines.Local(), count_fed, args, 1, 0,
                            input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    # Tuples are taken by position in sorted column order (x, y), dicts by key.
    cluster.train([[(1, 10), (2, 20)], [{"x": 3, "y": 30}]], 1)
    cluster.shutdown()
    import json
    batches = json.loads((tmp_path / "0.json").read_text())
    assert batches[0] == {"image": [1, 2, 3], "label": [10, 20, 30]}


def test_shutdown_takes_ssc_first_and_checks_before_stopping(tmp_path, mark):
    cluster = TFCluster.run(drover.engines.Local(), count_fed, {"dir": str(tmp_path), "batch": 5},
                            1, 0, input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
    # drover.Cluster.shutdown(grace_secs) positionally was the bug: a number
    # where ssc goes is refused before anything stops.
    with pytest.raises(TypeError, match="ssc must be None"):
        cluster.drover_cluster.shutdown(5)
    with pytest.raises(TypeError, match="grace_secs must be a number"):
        cluster.shutdown(None, "5")
    cluster.train([[1, 2]], 1)                    # still running
    cluster.shutdown(None, 0, 60)                 # TensorFlowOnSpark's positional order
    import json
    assert sorted(json.loads((tmp_path / "0.json").read_text())[0]) == [1, 2]


def test_drover_cluster_release_port_false_holds_the_port(tmp_path, mark):
    """drover.Cluster.run's own release_port=False (no compat layer)."""
    def main_fun(args, ctx):
        import socket
        held = ctx.tmp_socket
        assert held is not None and held.getsockname()[1] == ctx.port
        probe = socket.socket()
        try:
            probe.bind(("", ctx.port))
            raise AssertionError("the held port could be bound")
        except OSError:
            pass
        finally:
            probe.close()
        ctx.release_port()
        assert ctx.tmp_socket is None
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("", ctx.port))       # free once released

    cluster = drover.Cluster.run(drover.engines.Local(), main_fun, None, num_executors=2,
                                 release_port=False, reservation_timeout=60)
    cluster.shutdown()


def test_a_failing_node_surfaces_from_shutdown(mark):
    def _map_fun(args, ctx):
        raise RuntimeError("boom on %d" % ctx.executor_id)

    cluster = TFCluster.run(drover.engines.Local(), _map_fun, None, 2, 0, reservation_timeout=60)
    with pytest.raises(drover.NodeError, match="boom on"):
        cluster.shutdown(timeout=120)


def square_inference(args, ctx):
    import numpy as np
    feed = TFNode.DataFeed(ctx.mgr, False)
    while not feed.should_stop():
        batch = feed.next_batch(10)
        if len(batch) > 0:
            feed.batch_results(np.square(batch))


def test_a_dask_client_is_sc(tmp_path, monkeypatch):
    """TensorFlowOnSpark's test_inputmode_spark with a distributed.Client as
    sc (a real dask-scheduler and two workers) and a dask.bag as the RDD."""
    import dask.bag as db
    from test_cluster_dask import DaskCluster

    mark = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, mark)
    dask_cluster = DaskCluster(tmp_path, 2, mark)
    try:
        input = [[x] for x in range(1000)]
        rdd = db.from_sequence(input, npartitions=10)
        cluster = TFCluster.run(dask_cluster.client, square_inference, {}, 2, 0,
                                input_mode=TFCluster.InputMode.SPARK, reservation_timeout=60)
        assert isinstance(cluster.drover_cluster.engine, drover.engines.Dask)
        rdd_out = cluster.inference(rdd)
        assert rdd_out.sum().compute() == sum(x * x for x in range(1000))
        assert rdd_out.count().compute() == 1000
        cluster.shutdown()
        assert_no_leftovers(mark, exclude=dask_cluster.pids())
    finally:
        dask_cluster.close()

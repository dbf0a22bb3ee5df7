"""drover.compat.tensorflowonspark.TFNode without a cluster: TensorFlowOnSpark's
own TFNode unit test for hdfs_path (tests/test_TFNode.py there, only the import
changed), the node context made from a drover context file, and the calls that
need TensorFlow, which is not installed here.

TensorFlowOnSpark's test_datafeed needs a fed node: it is ported, with the
cluster as its data source, in test_compat_tfcluster.py.
"""

import getpass
import importlib.util
import json
import os
import unittest

import pytest

import drover
from drover.compat.tensorflowonspark import TFNode

HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None


class TFNodeTest(unittest.TestCase):
    # Ported from TensorFlowOnSpark's tests/test_TFNode.py (the import changed).
    def test_hdfs_path(self):
        """Normalization of absolution & relative string paths depending on filesystem"""
        cwd = os.getcwd()
        user = getpass.getuser()
        fs = ["file://", "hdfs://", "viewfs://"]
        paths = {
            "hdfs://foo/bar": ["hdfs://foo/bar", "hdfs://foo/bar", "hdfs://foo/bar"],
            "viewfs://foo/bar": ["viewfs://foo/bar", "viewfs://foo/bar", "viewfs://foo/bar"],
            "file://foo/bar": ["file://foo/bar", "file://foo/bar", "file://foo/bar"],
            "/foo/bar": ["file:///foo/bar", "hdfs:///foo/bar", "viewfs:///foo/bar"],
            "foo/bar": ["file://{}/foo/bar".format(cwd), "hdfs:///user/{}/foo/bar".format(user),
                        "viewfs:///user/{}/foo/bar".format(user)],
        }

        for i in range(len(fs)):
            ctx = type('MockContext', (), {'defaultFS': fs[i], 'working_dir': cwd})
            for path, expected in paths.items():
                final_path = TFNode.hdfs_path(ctx, path)
                self.assertEqual(final_path, expected[i], "fs({}) + path({}) => {}, expected {}".format(
                    fs[i], path, final_path, expected[i]))


def test_hdfs_path_other_schemes_and_unknown_file_systems():
    ctx = type("Ctx", (), {"defaultFS": "hdfs://nn:8020", "working_dir": "/w"})
    for scheme in ("adl://", "oss://", "s3://", "s3a://", "s3n://", "swift://", "wasb://"):
        assert TFNode.hdfs_path(ctx, scheme + "b/k") == scheme + "b/k"
    assert TFNode.hdfs_path(ctx, "m") == "hdfs://nn:8020/user/%s/m" % getpass.getuser()
    odd = type("Ctx", (), {"defaultFS": "gs://bucket", "working_dir": "/w"})
    assert TFNode.hdfs_path(odd, "model") == "gs://bucket/model"


CLUSTER = {"ps": ["127.0.0.1:31003"], "chief": ["127.0.0.1:31000"],
           "worker": ["127.0.0.1:31001", "127.0.0.1:31002"]}


@pytest.fixture
def drover_ctx(tmp_path, monkeypatch):
    path = tmp_path / "drover-context-3.json"
    path.write_text(json.dumps({
        "executor_id": "3", "job_name": "worker", "task_index": 1, "cluster_spec": CLUSTER,
        "cluster_id": "c-1", "port": 31002, "ports": [31002], "default_fs": "file://",
        "working_dir": str(tmp_path), "log_dir": str(tmp_path), "restart_count": 0,
        "num_workers": 2, "is_chief": False}))
    monkeypatch.setenv("DROVER_CONTEXT_FILE", str(path))
    return drover.context()


def test_node_context_has_tensorflowonspark_types(drover_ctx, tmp_path):
    ctx = TFNode.TFNodeContext(drover_ctx)
    assert ctx.executor_id == 3 and isinstance(ctx.executor_id, int)
    assert ctx.worker_num == 3
    assert (ctx.job_name, ctx.task_index) == ("worker", 1)
    assert type(ctx.cluster_spec) is dict
    assert ctx.cluster_spec == CLUSTER
    assert ctx.cluster_spec["worker"][1] == "127.0.0.1:31002"
    # TensorFlowOnSpark counts chief, master and worker tasks.
    assert ctx.num_workers == 3
    assert ctx.defaultFS == "file://"
    assert ctx.working_dir == str(tmp_path)
    assert ctx.absolute_path("model") == "file://%s/model" % tmp_path
    assert ctx.absolute_path("/abs") == "file:///abs"
    assert isinstance(ctx.mgr, TFNode.NodeManager)
    assert ctx.mgr.get("state") == "running"
    # Outside release_port=False nothing holds the port.
    assert ctx.tmp_socket is None
    ctx.release_port()
    # drover's own attributes stay reachable.
    assert ctx.port == 31002 and ctx.cluster_id == "c-1"


def test_data_feed_takes_the_node_manager_only(drover_ctx):
    with pytest.raises(TypeError, match="ctx.mgr"):
        TFNode.DataFeed(object())
    # Outside a fed node the feed cannot open: drover's DataFeed says why.
    ctx = TFNode.TFNodeContext(drover_ctx)
    with pytest.raises(RuntimeError):
        ctx.get_data_feed(train_mode=True)


def test_deprecated_module_functions_raise_as_in_tensorflowonspark():
    for call in (lambda: TFNode.next_batch(None, 1), lambda: TFNode.batch_results(None, []),
                 lambda: TFNode.terminate(None)):
        with pytest.raises(Exception, match="DEPRECATED: Use TFNode.DataFeed"):
            call()


@pytest.mark.skipif(HAS_TENSORFLOW, reason="checks the error raised without TensorFlow")
def test_tensorflow_calls_raise_a_clear_import_error(drover_ctx, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ctx = TFNode.TFNodeContext(drover_ctx)
    with pytest.raises(ImportError, match="start_cluster_server needs TensorFlow"):
        ctx.start_cluster_server(num_gpus=0)
    with pytest.raises(ImportError, match="start_cluster_server needs TensorFlow"):
        TFNode.start_cluster_server(ctx, 1, False)
    with pytest.raises(ImportError, match="export_saved_model needs TensorFlow"):
        ctx.export_saved_model(None, "/tmp/x", "serve", {})
    # The check comes before any GPU choice touches the environment.
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_gpu_placement_follows_tensorflowonspark():
    free = ["0", "1", "2", "3"]
    assert TFNode._choose_gpus(free, 1, 0) == ["0"]
    assert TFNode._choose_gpus(free, 2, 1) == ["2", "3"]
    # Past the end it wraps round, as gpu_info.get_gpus does.
    assert TFNode._choose_gpus(free, 2, 2) == ["0", "1"]
    with pytest.raises(Exception, match="Unable to find 5 free GPU"):
        TFNode._choose_gpus(free, 5, 0)

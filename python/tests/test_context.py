"""drover.context(): the node context a program started by `drover agent` reads.

The context files here are written by hand, in the format of docs/run.md.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import drover

CLUSTER = {"chief": ["127.0.0.1:31000"], "worker": ["127.0.0.1:31001", "127.0.0.1:31002"],
           "ps": ["127.0.0.1:31003"]}


def context_fields(**overrides):
    fields = {
        "executor_id": "2", "job_name": "worker", "task_index": 1, "cluster_spec": CLUSTER,
        "cluster_id": "c-1234", "port": 31002, "ports": [31002, 31005],
        "default_fs": "file://", "working_dir": "/data/job", "log_dir": "/logs/worker-1",
        "restart_count": 1, "num_workers": 2, "is_chief": False,
    }
    fields.update(overrides)
    return fields


@pytest.fixture
def context_file(tmp_path, monkeypatch):
    def write(**overrides):
        path = tmp_path / "drover-context-2.json"
        path.write_text(json.dumps(context_fields(**overrides)))
        monkeypatch.setenv("DROVER_CONTEXT_FILE", str(path))
        return path
    return write


def test_context_has_tensorflowonspark_fields(context_file):
    context_file()
    ctx = drover.context()
    assert isinstance(ctx, drover.NodeContext)
    assert ctx.executor_id == "2"
    assert (ctx.job_name, ctx.task_index) == ("worker", 1)
    assert isinstance(ctx.cluster_spec, drover.ClusterSpec)
    assert ctx.cluster_spec.as_dict() == CLUSTER
    assert ctx.cluster_spec.task_address("worker", 1) == "127.0.0.1:31002"
    assert ctx.num_workers == 2
    assert ctx.is_chief is False
    assert ctx.cluster_id == "c-1234"
    assert (ctx.port, ctx.ports) == (31002, [31002, 31005])
    assert ctx.default_fs == ctx.defaultFS == "file://"
    assert (ctx.working_dir, ctx.log_dir) == ("/data/job", "/logs/worker-1")
    assert ctx.restart_count == 1
    assert "worker" in repr(ctx)


def test_chief_context(context_file):
    context_file(job_name="chief", task_index=0, is_chief=True, port=31000, ports=[31000])
    ctx = drover.context()
    assert ctx.is_chief is True
    assert (ctx.job_name, ctx.task_index) == ("chief", 0)


def test_absolute_path_follows_default_fs_and_working_dir(context_file):
    context_file()
    ctx = drover.context()
    assert ctx.absolute_path("model") == "file:///data/job/model"
    assert ctx.absolute_path(pathlib.PurePosixPath("ckpt/1")) == "file:///data/job/ckpt/1"
    assert ctx.absolute_path("/tmp/x") == "file:///tmp/x"
    assert ctx.absolute_path("hdfs://nn:8020/user/x") == "hdfs://nn:8020/user/x"

    context_file(default_fs="hdfs://nn:8020", working_dir="/user/me")
    ctx = drover.context()
    assert ctx.absolute_path("model") == "hdfs://nn:8020/user/me/model"
    assert ctx.absolute_path("/data/x") == "hdfs://nn:8020/data/x"


def test_release_port_is_a_noop(context_file):
    # The agent released the reserved ports before starting the program.
    context_file()
    assert drover.context().release_port() is None


def test_context_outside_drover_names_the_variable(monkeypatch):
    monkeypatch.delenv("DROVER_CONTEXT_FILE", raising=False)
    with pytest.raises(RuntimeError, match="DROVER_CONTEXT_FILE.*not set"):
        drover.context()
    with pytest.raises(RuntimeError, match="drover run / drover agent"):
        drover.context()


def test_missing_or_malformed_context_file_is_a_value_error(tmp_path, monkeypatch, context_file):
    monkeypatch.setenv("DROVER_CONTEXT_FILE", str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match="nope.json"):
        drover.context()

    path = context_file()
    path.write_text("{not json")
    with pytest.raises(ValueError, match=str(path)):
        drover.context()

    fields = context_fields()
    del fields["task_index"]
    path.write_text(json.dumps(fields))
    with pytest.raises(ValueError, match="task_index"):
        drover.context()

    path.write_text(json.dumps(context_fields(task_index="1")))
    with pytest.raises(TypeError, match="task_index"):
        drover.context()


def test_json_round_trip(context_file):
    context_file()
    ctx = drover.context()
    again = drover.NodeContext.from_json(ctx.to_json())
    assert json.loads(again.to_json()) == json.loads(ctx.to_json()) == context_fields()


def test_context_is_read_from_the_environment_of_a_child(tmp_path):
    # The way a program started by the agent sees it: a fresh interpreter whose
    # environment names the file.
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps(context_fields()))
    env = dict(os.environ, DROVER_CONTEXT_FILE=str(path),
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [sys.executable, "-c",
         "import drover; c = drover.context(); print(c.job_name, c.task_index, c.num_workers)"],
        env=env, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["worker", "1", "2"]

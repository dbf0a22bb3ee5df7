"""drover.ClusterSpec behaves as tf.train.ClusterSpec (TensorFlow's own cases, re-expressed)."""
import pickle

import pytest

import drover


def test_dense_jobs_round_trip_through_as_dict():
    spec = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222", "w2:2222"]}
    cluster = drover.ClusterSpec(spec)
    assert cluster.as_dict() == spec
    assert sorted(cluster.jobs) == ["ps", "worker"]
    assert cluster.num_tasks("worker") == 3
    assert cluster.task_indices("ps") == [0, 1]
    assert cluster.task_address("worker", 2) == "w2:2222"
    assert cluster.job_tasks("ps") == ["ps0:2222", "ps1:2222"]


def test_sparse_jobs_keep_int_keys_and_show_gaps_as_none():
    cluster = drover.ClusterSpec({"worker": {1: "w1:2222", 3: "w3:2222"}, "ps": ["p0:1"]})
    assert cluster.as_dict() == {"worker": {1: "w1:2222", 3: "w3:2222"}, "ps": ["p0:1"]}
    assert cluster.num_tasks("worker") == 2
    assert cluster.task_indices("worker") == [1, 3]
    assert cluster.job_tasks("worker") == [None, "w1:2222", None, "w3:2222"]


def test_sparse_job_that_is_dense_shows_as_list():
    cluster = drover.ClusterSpec({"worker": {1: "b:1", 0: "a:1"}})
    assert cluster.as_dict() == {"worker": ["a:1", "b:1"]}


def test_string_keys_are_converted_like_int():
    cluster = drover.ClusterSpec({"worker": {"2": "c:1"}})
    assert cluster.task_indices("worker") == [2]


def test_tuples_are_dense_jobs():
    assert drover.ClusterSpec({"w": ("a:1", "b:1")}).as_dict() == {"w": ["a:1", "b:1"]}


def test_empty_job_gives_empty_job_tasks():
    cluster = drover.ClusterSpec({"worker": []})
    assert cluster.num_tasks("worker") == 0
    assert cluster.job_tasks("worker") == []
    assert cluster.as_dict() == {"worker": {}}


def test_repr_matches_tensorflow():
    cluster = drover.ClusterSpec({"worker": {1: "w1:2222"}, "ps": ["ps0:2222"]})
    assert repr(cluster) == "ClusterSpec({'ps': ['ps0:2222'], 'worker': {1: 'w1:2222'}})"
    assert str(cluster) == repr(cluster)


def test_truthiness():
    assert not drover.ClusterSpec({})
    assert drover.ClusterSpec({"worker": ["a:1"]})


def test_equality_ignores_job_order_and_representation():
    a = drover.ClusterSpec({"ps": ["p:1"], "worker": ["a:1", "b:1"]})
    b = drover.ClusterSpec({"worker": {0: "a:1", 1: "b:1"}, "ps": ["p:1"]})
    c = drover.ClusterSpec({"worker": ["a:1"], "ps": ["p:1"]})
    assert a == b
    assert not (a != b)
    assert a != c
    assert a != {"ps": ["p:1"]}
    assert drover.ClusterSpec(a) == a


def test_unhashable_like_tensorflow():
    with pytest.raises(TypeError):
        hash(drover.ClusterSpec({"worker": ["a:1"]}))


@pytest.mark.parametrize("call", [
    lambda c: c.num_tasks("chief"),
    lambda c: c.task_indices("chief"),
    lambda c: c.job_tasks("chief"),
    lambda c: c.task_address("chief", 0),
])
def test_unknown_job_is_value_error(call):
    with pytest.raises(ValueError, match="No such job in cluster: 'chief'"):
        call(drover.ClusterSpec({"worker": ["a:1"]}))


def test_missing_task_index_is_value_error():
    cluster = drover.ClusterSpec({"worker": {1: "b:1"}})
    with pytest.raises(ValueError, match="No task with index 0 in job 'worker'"):
        cluster.task_address("worker", 0)


@pytest.mark.parametrize("bad", [
    "worker",
    ["a:1"],
    {"worker": "a:1"},
    {"worker": 3},
    {"worker": [1, 2]},
    {1: ["a:1"]},
    {"worker": {0: 5}},
])
def test_wrong_types_are_type_error(bad):
    with pytest.raises(TypeError):
        drover.ClusterSpec(bad)


def test_non_integer_sparse_key_is_value_error():
    with pytest.raises(ValueError):
        drover.ClusterSpec({"worker": {"x": "a:1"}})


def test_cluster_def_bytes_round_trip_and_are_deterministic():
    a = drover.ClusterSpec({"worker": ["w0:1", "w1:1"], "ps": {2: "p2:1"}})
    b = drover.ClusterSpec({"ps": {2: "p2:1"}, "worker": {1: "w1:1", 0: "w0:1"}})
    data = a.as_cluster_def()
    assert isinstance(data, bytes)
    assert data == b.as_cluster_def()
    assert drover.ClusterSpec.from_cluster_def(data) == a
    # jobs sorted by name: "ps" (field 1, then name field 1 "ps") comes first
    assert data.startswith(b"\x0a") and data.index(b"ps") < data.index(b"worker")


def test_cluster_def_garbage_is_value_error():
    with pytest.raises(ValueError):
        drover.ClusterSpec.from_cluster_def(b"\xff\xff\xff")


def test_json_and_pickle_round_trip():
    a = drover.ClusterSpec({"worker": {1: "w1:1"}, "chief": ["c:1"]})
    assert drover.ClusterSpec.from_json(a.to_json()) == a
    assert pickle.loads(pickle.dumps(a)) == a


def test_framework_environment_from_python():
    cluster = drover.ClusterSpec({"chief": ["c:2000"], "worker": ["w0:2000", "w1:2000"]})
    env = drover.framework_environment(cluster, "worker", 1, master_port=29500)
    assert env["RANK"] == "2"
    assert env["WORLD_SIZE"] == "3"
    assert env["MASTER_ADDR"] == "c"
    assert env["MASTER_PORT"] == "29500"
    assert '"index":1' in env["TF_CONFIG"].replace(" ", "")
    with pytest.raises(ValueError, match="evaluator"):
        drover.framework_environment(cluster, "evaluator", 0)

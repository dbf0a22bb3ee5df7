"""drover.DataFeed without a running feed: argument checking, the error outside
`drover run --input`, and the schema decoding next_batch uses (through
drover._drover._decode_records, which runs the same code on given records).

End-to-end feeding through `drover run --input` is tested elsewhere.
"""
import json

import numpy as np
import pytest

import drover
from drover import _drover

MNIST_SCHEMA = [("image", "float32", 784), ("label", "int32")]


@pytest.fixture
def no_feed(monkeypatch):
    monkeypatch.delenv("DROVER_FEED_SOCKET", raising=False)


def test_outside_drover_run_is_a_runtime_error(no_feed):
    with pytest.raises(RuntimeError, match="DROVER_FEED_SOCKET"):
        drover.DataFeed()
    with pytest.raises(RuntimeError, match="DROVER_FEED_SOCKET"):
        drover.DataFeed(train_mode=False, schema=MNIST_SCHEMA, timeout=5)


def test_context_has_get_data_feed(no_feed):
    ctx = drover.NodeContext.from_json(json.dumps({
        "executor_id": "0", "job_name": "worker", "task_index": 0,
        "cluster_spec": {"worker": ["127.0.0.1:31000"]}, "cluster_id": "c", "port": 31000,
        "ports": [31000], "default_fs": "file://", "working_dir": "/tmp", "log_dir": "/tmp",
        "restart_count": 0, "num_workers": 1, "is_chief": True}))
    assert callable(ctx.get_data_feed)
    # TensorFlowOnSpark's call, queue names included.
    with pytest.raises(RuntimeError, match="DROVER_FEED_SOCKET"):
        ctx.get_data_feed(train_mode=True, qname_in="input", qname_out="output",
                          input_mapping={"x": "features"})
    with pytest.raises(ValueError, match="float16"):
        ctx.get_data_feed(schema=[("x", "float16")])


@pytest.mark.parametrize("schema, error, message", [
    ([("x", "float16")], ValueError, "float16"),
    ([("x", "no_such_type")], ValueError, "unknown dtype"),
    ([("x", np.int16)], ValueError, "int16"),
    ([("x", ">f4")], ValueError, "byte order"),
    ([("x", None)], TypeError, "dtype"),
    ([("x", 3.5)], TypeError, "dtype"),
    ([("x", "float32", 0)], ValueError, "width"),
    ([("x", "float32", "7")], TypeError, "width"),
    ([("x", "float32", True)], TypeError, "width"),
    ([("x",)], TypeError, "tuples"),
    (["x"], TypeError, "tuples"),
    ([(1, "float32")], TypeError, "names"),
    ([("x", "float32"), ("x", "int32")], ValueError, "twice"),
    ([], ValueError, "no fields"),
    ({"x": ("float32", 2, 3)}, ValueError, "dtype, width"),
    ({"x": "complex64"}, ValueError, "complex64"),
    ("float32", TypeError, "schema must be"),
])
def test_bad_schema(no_feed, schema, error, message):
    # Checked before connecting, so these errors come even outside drover run.
    with pytest.raises(error, match=message):
        drover.DataFeed(schema=schema)


@pytest.mark.parametrize("mapping, error, message", [
    (["x"], TypeError, "dict"),
    ({}, ValueError, "empty"),
    ({"x": 1}, TypeError, "output names"),
    ({1.5: "x"}, TypeError, "keys"),
    ({-1: "x"}, ValueError, "negative"),
    ({"a": "x", "b": "x"}, ValueError, "twice"),
])
def test_bad_input_mapping(no_feed, mapping, error, message):
    with pytest.raises(error, match=message):
        drover.DataFeed(input_mapping=mapping)


@pytest.mark.parametrize("timeout, error", [(0, ValueError), (-1, ValueError),
                                            (float("nan"), ValueError), ("5", TypeError)])
def test_bad_timeout(no_feed, timeout, error):
    with pytest.raises(error, match="timeout"):
        drover.DataFeed(timeout=timeout)


@pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("float32"), "f4"])
def test_dtype_spellings(dtype):
    out = _drover._decode_records([b"1.5"], "csv", schema=[("x", dtype)])
    assert out["x"].dtype == np.float32


def mnist_records(count):
    rng = np.random.default_rng(0)
    images = rng.random((count, 784), dtype=np.float32)
    labels = rng.integers(0, 10, count, dtype=np.int32)
    records = [images[i].tobytes() + labels[i].tobytes() for i in range(count)]
    return images, labels, records


@pytest.mark.parametrize("format", ["raw", "tfrecord"])
def test_binary_records_become_arrays(format):
    images, labels, records = mnist_records(5)
    out = _drover._decode_records(records, format, schema=MNIST_SCHEMA, record_bytes=3140)
    assert list(out) == ["image", "label"]
    assert out["image"].shape == (5, 784) and out["image"].dtype == np.float32
    assert out["label"].shape == (5,) and out["label"].dtype == np.int32
    np.testing.assert_array_equal(out["image"], images)
    np.testing.assert_array_equal(out["label"], labels)


def test_binary_mapping_selects_and_renames():
    images, labels, records = mnist_records(3)
    out = _drover._decode_records(records, "raw", schema=MNIST_SCHEMA,
                                  input_mapping={"label": "y", "image": "x"})
    assert list(out) == ["y", "x"]
    np.testing.assert_array_equal(out["y"], labels)
    np.testing.assert_array_equal(out["x"], images)


def test_binary_size_errors():
    _, _, records = mnist_records(2)
    with pytest.raises(ValueError, match="record 1.*3139 bytes"):
        _drover._decode_records([records[0], records[1][:-1]], "raw", schema=MNIST_SCHEMA)
    with pytest.raises(ValueError, match="3140 bytes.*--record-bytes is 3136"):
        _drover._decode_records(records, "raw", schema=MNIST_SCHEMA, record_bytes=3136)
    with pytest.raises(ValueError, match="needs? a schema"):
        _drover._decode_records(records, "raw", input_mapping={"image": "x"})


def test_dict_schema_and_csv():
    records = [b"1,2,3,7", b"4,5,6,8"]
    out = _drover._decode_records(records, "csv",
                                  schema={"x": ("float64", 3), "label": np.uint8})
    np.testing.assert_array_equal(out["x"], [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(out["label"], np.array([7, 8], dtype=np.uint8))
    with pytest.raises(ValueError, match="record 1.*'label'.*does not fit uint8"):
        _drover._decode_records([b"1,2,3,7", b"1,2,3,300"], "csv",
                                schema={"x": ("float64", 3), "label": "uint8"})


def test_csv_mapping_over_schema_reads_the_schema_columns():
    schema = [("id", "int64"), ("x", "float32", 2), ("label", "int32")]
    out = _drover._decode_records([b"10,0.5,1.5,3"], "csv", schema=schema,
                                  input_mapping={"label": "y", "x": "features"})
    assert list(out) == ["y", "features"]
    np.testing.assert_array_equal(out["y"], [3])
    np.testing.assert_array_equal(out["features"], [[0.5, 1.5]])
    with pytest.raises(ValueError, match="'z' is not a schema field"):
        _drover._decode_records([b"1"], "csv", schema=schema, input_mapping={"z": "y"})


def test_csv_mapping_without_schema_takes_column_indices():
    out = _drover._decode_records([b"a,1.5,2", b"b,3,4"], "csv",
                                  input_mapping={2: "label", "1": "x"})
    assert out["label"].dtype == np.float64 and out["label"].shape == (2,)
    np.testing.assert_array_equal(out["label"], [2, 4])
    np.testing.assert_array_equal(out["x"], [1.5, 3])
    with pytest.raises(ValueError, match="column index"):
        _drover._decode_records([b"1"], "csv", input_mapping={"x": "y"})


def test_jsonl_mapping_and_schema():
    records = [b'{"a": 1, "b": [1, 2], "c": true}', b'{"a": 2.5, "b": [3, 4], "c": false}']
    out = _drover._decode_records(records, "jsonl", input_mapping={"a": "A", "c": "C"})
    np.testing.assert_array_equal(out["A"], [1, 2.5])
    np.testing.assert_array_equal(out["C"], [1, 0])
    out = _drover._decode_records(records, "jsonl", schema=[("b", "int64", 2), ("a", "float32")],
                                  input_mapping={"b": "pair"})
    assert list(out) == ["pair"]
    np.testing.assert_array_equal(out["pair"], [[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="record 0.*key 'missing' missing"):
        _drover._decode_records(records, "jsonl", input_mapping={"missing": "m"})


def test_bytes_without_schema_and_empty_batches():
    assert _drover._decode_records([b"a,b", b"c"], "csv") == [b"a,b", b"c"]
    assert _drover._decode_records([], "raw") == []
    out = _drover._decode_records([], "raw", schema=MNIST_SCHEMA)
    assert out["image"].shape == (0, 784) and out["label"].shape == (0,)


def test_unknown_format():
    with pytest.raises(ValueError):
        _drover._decode_records([], "parquet")


def test_cluster_train_shares_are_equal_slices_and_inference_deals_whole_partitions():
    from drover import _feeding
    counts = [300, 250, 250, 201]
    shares = _feeding.share_units(counts, 3, 2, inference=False)
    for share in shares:
        for epoch in (0, 1):
            assert sum(end - begin for _, e, begin, end in share if e == epoch) == 334
    assert shares[2][:3] == [(2, 0, 118, 250), (3, 0, 0, 201), (0, 0, 0, 1)]
    dropped = _feeding.share_units(counts, 3, 1, inference=False, remainder="drop")
    assert [sum(end - begin for _, _, begin, end in share) for share in dropped] == [333] * 3
    dealt = _feeding.share_units(counts, 3, 1, inference=True)
    assert dealt == [[(0, 0, 0, 300), (3, 0, 0, 201)], [(1, 0, 0, 250)], [(2, 0, 0, 250)]]
    with pytest.raises(ValueError, match="pad or drop"):
        _feeding.share_units(counts, 3, 1, inference=False, remainder="even")

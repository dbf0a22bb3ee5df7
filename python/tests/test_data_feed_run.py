"""drover.DataFeed end to end: `drover run --input` feeding a Python program.

Each test writes its records, runs drover with a small Python program that
reads them with the module's DataFeed, and checks what the program saw.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from feed_check import write_good_then_bad_tfrecords

DROVER = os.path.abspath(os.environ.get("DROVER_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "bin", "drover"))
PYTHONPATH = os.pathsep.join(p for p in sys.path if p and os.path.isdir(os.path.join(p, "drover")))


def run(tmp_path, program, *flags, timeout=120):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(program))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DROVER_", "TF_CONFIG", "MASTER_", "RANK", "WORLD_SIZE"))}
    env["PYTHONPATH"] = PYTHONPATH
    return subprocess.run([DROVER, "run", "--log-dir", str(tmp_path / "logs"), *flags, "--",
                           "/usr/bin/python3", str(script)],
                          env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)


# "extent": the records are read in place from the program's own mapping of
# the file (docs/feed.md, "How it works"), not from the queue; "extent-read":
# the program reads them with pread(2) into memory it reuses.
@pytest.mark.parametrize("ingest", ["measure", "extent", "extent-read"])
def test_raw_records_come_as_numpy_arrays_with_a_schema(tmp_path, ingest):
    rng = np.random.default_rng(7)
    images = rng.random((1000, 784), dtype=np.float32)
    labels = rng.integers(0, 10, 1000, dtype=np.int32)
    with open(tmp_path / "mnist.raw", "wb") as f:
        for image, label in zip(images, labels):
            f.write(image.tobytes() + struct.pack("<i", label))
    result = run(tmp_path, """
        import numpy as np, drover
        feed = drover.DataFeed(schema=[("image", "float32", 784), ("label", "int32")])
        images, labels = [], []
        while not feed.should_stop():
            batch = feed.next_batch(128)
            if len(batch["label"]) == 0:
                break
            images.append(batch["image"]); labels.append(batch["label"])
        np.save("images.npy", np.concatenate(images)); np.save("labels.npy", np.concatenate(labels))
        print("read", feed.records_read, feed.format)
        """, "--nodes", "1", "--input", "mnist.raw", "--format", "raw", "--record-bytes", "3140",
        "--feed-ingest", ingest)
    assert result.returncode == 0, result.stderr
    assert "[worker:0] read 1000 raw" in result.stdout, result.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "images.npy"), images)
    np.testing.assert_array_equal(np.load(tmp_path / "labels.npy"), labels)


@pytest.mark.parametrize("ingest", ["measure", "extent", "extent-read"])
def test_bytes_records_stay_what_they_were_whatever_the_program_keeps(tmp_path, ingest):
    """next_batch hands out the list of the batch before last again, written
    over, only when nothing else references it, and writes a record into one
    of its bytes objects only when nothing else references that: the records
    a program keeps (one of each batch in a list, one as a dict key) and the
    lists it keeps whole keep their values and hashes; lists it changed
    (items replaced, reordered, added, removed) and dropped do not disturb
    later batches; every record, handed out again or new, is what the file
    holds."""
    records = [f"{i:08d}".encode() * 4 for i in range(5000)]  # 32 bytes, all distinct
    (tmp_path / "r.raw").write_bytes(b"".join(records))
    result = run(tmp_path, """
        import drover, hashlib
        feed = drover.DataFeed()
        kept, by_key, lists, digest, hashes_ok = [], {}, [], hashlib.sha256(), True
        calls = 0
        while not feed.should_stop():
            batch = feed.next_batch(50)
            if not batch:
                break
            calls += 1
            for record in batch:
                digest.update(record)
                hashes_ok = hashes_ok and hash(record) == hash(bytes(bytearray(record)))
            kept.append((batch[0], bytes(bytearray(batch[0]))))
            by_key[batch[-1]] = bytes(bytearray(batch[-1]))
            if calls % 7 == 0:
                lists.append((batch, [bytes(bytearray(r)) for r in batch]))
            elif calls % 5 == 0:
                batch[1] = "not bytes"
                batch[2] = b"short"
                batch.reverse()
            elif calls % 11 == 0:
                batch.append(b"one more")
            elif calls % 13 == 0:
                del batch[:]
        unchanged = all(record == copy for record, copy in kept)
        keys_ok = all(key == copy and by_key[copy] == copy for key, copy in by_key.items())
        lists_ok = all(whole == copies for whole, copies in lists)
        print("read", feed.records_read, digest.hexdigest(), hashes_ok, unchanged, keys_ok,
              lists_ok, len(kept) > 2, len(lists) > 2)
        """, "--nodes", "1", "--input", "r.raw", "--format", "raw", "--record-bytes", "32",
        "--feed-ingest", ingest)
    assert result.returncode == 0, result.stderr
    everything = hashlib.sha256(b"".join(records)).hexdigest()
    assert f"[worker:0] read 5000 {everything} True True True True True True" in result.stdout, \
        result.stdout


def test_context_feed_with_input_mapping_over_csv_columns(tmp_path):
    with open(tmp_path / "data.csv", "w") as f:
        for i in range(500):
            f.write(f"{i},{i * 0.5},{i % 7}\n")
    result = run(tmp_path, """
        import json, drover
        feed = drover.context().get_data_feed(train_mode=True, input_mapping={"0": "id", "2": "y"})
        ids, ys = [], []
        while True:
            batch = feed.next_batch(64)
            if len(batch["id"]) == 0:
                break
            ids += batch["id"].tolist(); ys += batch["y"].tolist()
        json.dump({"ids": ids, "ys": ys}, open("seen.json", "w"))
        """, "--nodes", "1", "--input", "data.csv")
    assert result.returncode == 0, result.stderr
    seen = json.load(open(tmp_path / "seen.json"))
    assert seen["ids"] == [float(i) for i in range(500)]
    assert seen["ys"] == [float(i % 7) for i in range(500)]


def test_inference_results_from_python_land_per_partition(tmp_path):
    with open(tmp_path / "data.jsonl", "w") as f:
        for i in range(300):
            f.write(json.dumps({"x": i}) + "\n")
    result = run(tmp_path, """
        import drover
        feed = drover.DataFeed(train_mode=False, schema=[("x", "int64")])
        while not feed.should_stop():
            batch = feed.next_batch(50)
            if len(batch["x"]) == 0:
                break
            feed.batch_results(batch["x"] * 2)    # a NumPy array: one result per record
        """, "--nodes", "2", "--input", "data.jsonl", "--split-bytes", "1500",
        "--mode", "inference", "--output", "out")
    assert result.returncode == 0, result.stderr
    parts = sorted(p for p in os.listdir(tmp_path / "out") if p.startswith("part-"))
    lines = [line for part in parts for line in (tmp_path / "out" / part).read_text().split()]
    assert lines == [str(2 * i) for i in range(300)]


def test_terminate_from_python_ends_the_feed(tmp_path):
    with open(tmp_path / "data.csv", "w") as f:
        f.writelines(f"{i}\n" for i in range(1000))
    result = run(tmp_path, """
        import drover
        feed = drover.DataFeed()
        first = feed.next_batch(10)
        feed.terminate()
        print("after terminate:", feed.should_stop(), len(feed.next_batch(10)), first[0])
        """, "--nodes", "1", "--input", "data.csv", "--epochs", "1000")
    assert result.returncode == 0, result.stderr
    assert "[worker:0] after terminate: True 0 b'0'" in result.stdout, result.stdout


def test_wrong_number_of_results_raises_naming_the_partition(tmp_path):
    with open(tmp_path / "data.csv", "w") as f:
        f.writelines(f"{i}\n" for i in range(100))
    result = run(tmp_path, """
        import drover
        feed = drover.DataFeed(train_mode=False)
        batch = feed.next_batch(10)
        feed.batch_results([b"only one"])
        """, "--nodes", "1", "--input", "data.csv", "--mode", "inference", "--output", "out")
    assert result.returncode == 1
    assert "ValueError: batch_results: 1 results for the 10 records" in result.stderr, result.stderr
    assert "data.csv" in result.stderr


def test_a_bad_record_raises_in_a_should_stop_loop(tmp_path):
    """A feed that fails (a record with a bad CRC, after 2,000 good ones)
    reaches the program as the RuntimeError of its next next_batch: its
    `while not should_stop()` loop does not end as if every record were
    read, so the code after the loop (saving a model) never runs. The agent
    also stops the program (SIGTERM, as it stops any node whose feed
    failed); this one ignores SIGTERM, so that what its loop sees shows
    whenever the feeder fails, before or after its first next_batch. The
    queue holds about 600 of the 2,000 good records, so the feeder reaches
    the bad one only once the program is reading, past its SIG_IGN: a
    feeder that failed first (a slow Python start) would stop a program
    that could not ignore the SIGTERM yet."""
    write_good_then_bad_tfrecords(tmp_path / "data.tfrecord", 2000)
    result = run(tmp_path, """
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        import drover
        feed = drover.DataFeed()
        seen = 0
        while not feed.should_stop():
            seen += len(feed.next_batch(100))
        print("saving a model of", seen, "records")
        """, "--nodes", "1", "--input", "data.tfrecord", "--format", "tfrecord",
        "--queue-bytes", "65536")
    assert result.returncode == 1, result.stderr
    assert "saving a model" not in result.stdout, result.stdout
    assert "RuntimeError: feeding worker:0 stopped" in result.stderr, result.stderr
    assert "record 2000" in result.stderr and "CRC" in result.stderr, result.stderr

"""`drover run --input`: feeding end to end, with real agents, feeders and readers.

The reader is testing/feed_reader (a C++ DataFeed program) so these tests run
in every build, sanitizers included; it writes "<epoch>\\t<record>" per record
to <out>.<executor id>.
"""
import collections
import contextlib
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import clean_env, drover_bin

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python", "tests"))
from feed_check import (assert_each_record_once, consumed_by_epoch,  # noqa: E402
                        records_in_round, tfrecord, write_csv, write_good_then_bad_tfrecords)
from test_run_cli import assert_no_leftovers, leftovers, marker

FEED_READER = os.environ.get("DROVER_FEED_READER") or os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "build", "bin", "feed_reader")


def read_seen(prefix):
    """{executor: [(epoch, record), ...]} from the reader's files."""
    seen = {}
    directory, stem = os.path.split(str(prefix))
    for name in os.listdir(directory):
        if name.startswith(stem + "."):
            with open(os.path.join(directory, name)) as f:
                seen[name.rsplit(".", 1)[1]] = [
                    (int(line.split("\t", 1)[0]), line.rstrip("\n").split("\t", 1)[1])
                    for line in f]
    return seen


def ids_by_epoch(seen):
    by_epoch = collections.defaultdict(collections.Counter)
    for records in seen.values():
        for epoch, record in records:
            by_epoch[epoch][int(record.split(",", 1)[0])] += 1
    return by_epoch


def run_feed(tmp_path, *args, timeout=120):
    return subprocess.run([drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), *args],
                          env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path)


def test_every_record_once_per_epoch_across_nodes(tmp_path):
    write_csv(tmp_path / "a.csv", 0, 3000)
    write_csv(tmp_path / "b.csv", 3000, 2000)
    out = tmp_path / "seen"
    result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "*.csv"),
                      "--split-bytes", "20000", "--epochs", "3", "--",
                      FEED_READER, "--out", str(out), "--batch", "100")
    assert result.returncode == 0, result.stderr
    seen = read_seen(out)
    assert sorted(seen) == ["0", "1"]
    assert all(seen.values()), "both workers are fed"
    by_epoch = ids_by_epoch(seen)
    assert sorted(by_epoch) == [0, 1, 2]
    for epoch, counts in by_epoch.items():
        assert counts == collections.Counter(range(5000)), f"epoch {epoch}"
    # Records of one node arrive epoch by epoch.
    for records in seen.values():
        epochs = [epoch for epoch, _ in records]
        assert epochs == sorted(epochs)


def write_uneven_csvs(tmp_path):
    """The quick start's shape: 4 files of uneven sizes, 1001 records."""
    first = 0
    for name, count in (("a", 300), ("b", 250), ("c", 250), ("d", 201)):
        write_csv(tmp_path / f"{name}.csv", first, count)
        first += count


@pytest.mark.parametrize("remainder, each, twice, fed", [
    (None, 334, {0: 2}, range(1001)),      # pad: the first record again
    ("drop", 333, {}, range(999)),         # drop: the last two to nobody
])
def test_equal_shares_feed_every_node_the_same_records_each_epoch(
        tmp_path, remainder, each, twice, fed):
    write_uneven_csvs(tmp_path)
    out = tmp_path / "seen"
    result = run_feed(tmp_path, "--nodes", "3", "--input", str(tmp_path / "*.csv"),
                      "--epochs", "2", *(["--remainder", remainder] if remainder else []), "--",
                      FEED_READER, "--out", str(out), "--batch", "64")
    assert result.returncode == 0, result.stderr
    seen = read_seen(out)
    assert sorted(seen) == ["0", "1", "2"]
    for executor, records in seen.items():
        per_epoch = collections.Counter(epoch for epoch, _ in records)
        assert per_epoch == {0: each, 1: each}, (executor, per_epoch)
    for epoch, counts in ids_by_epoch(seen).items():
        assert set(counts) == set(fed), epoch
        assert {i: n for i, n in counts.items() if n != 1} == twice, epoch


def test_dynamic_balance_gives_a_held_node_less_and_every_record_once(tmp_path):
    """--balance dynamic: a node whose program is held back after its first
    batch keeps what its small queue took; the others take the rest, and
    every record is consumed once per epoch. The hold ends when both others
    are done (a file), never after a set time."""
    write_csv(tmp_path / "data.csv", 0, 12000)  # about 240 KB: 22 partitions
    out = tmp_path / "seen"
    reader = f"{FEED_READER} --out {out} --batch 50 --hold 2={tmp_path}/release"
    release = (f"touch {tmp_path}/fin.$DROVER_EXECUTOR_ID; "
               f"if [ -e {tmp_path}/fin.0 ] && [ -e {tmp_path}/fin.1 ]; then "
               f"touch {tmp_path}/release; fi")
    result = run_feed(tmp_path, "--nodes", "3", "--input", str(tmp_path / "data.csv"),
                      "--balance", "dynamic", "--split-bytes", "10000", "--queue-bytes", "65536",
                      "--epochs", "2", "--", "sh", "-c",
                      f'{reader} || exit $?; [ "$DROVER_EXECUTOR_ID" = 2 ] || {{ {release}; }}',
                      timeout=300)
    assert result.returncode == 0, result.stderr
    seen = read_seen(out)
    counts = {executor: len(records) for executor, records in seen.items()}
    assert sorted(counts) == ["0", "1", "2"], counts
    # The held node's queue holds 64 KiB, under 3,000 records: it cannot
    # have taken more than that and the partition it was writing (about 500
    # records), where equal shares would have given it 8,000.
    assert counts["2"] <= 3500, counts
    assert counts["0"] + counts["1"] + counts["2"] == 24000, counts
    by_epoch = ids_by_epoch(seen)
    assert sorted(by_epoch) == [0, 1]
    for epoch, ids in by_epoch.items():
        assert ids == collections.Counter(range(12000)), epoch


def test_dynamic_balance_in_inference_answers_every_record_once(tmp_path):
    write_uneven_csvs(tmp_path)
    result = run_feed(tmp_path, "--nodes", "3", "--input", str(tmp_path / "*.csv"),
                      "--balance", "dynamic", "--mode", "inference", "--output",
                      str(tmp_path / "out"), "--", FEED_READER, "--out", str(tmp_path / "seen"),
                      "--inference", "--batch", "64")
    assert result.returncode == 0, result.stderr
    parts = sorted(os.listdir(tmp_path / "out"))
    assert parts == [f"part-{i:05d}" for i in range(4)], parts
    answered = []
    for part in parts:
        with open(tmp_path / "out" / part) as f:
            answered += [int(line.split(":", 1)[1].split(",", 1)[0]) for line in f]
    assert answered == list(range(1001))  # in input order, each once


def test_dry_run_shows_each_share(tmp_path):
    write_uneven_csvs(tmp_path)
    result = run_feed(tmp_path, "--nodes", "3", "--dry-run", "--input", "*.csv", "--",
                      "true", timeout=30)
    assert result.returncode == 0, result.stderr
    assert "in equal shares" in result.stdout, result.stdout
    assert "partitions (csv, ingest: measure)" in result.stdout, result.stdout
    shares = [line for line in result.stdout.splitlines() if line.startswith("  share ")]
    assert len(shares) == 3, result.stdout
    assert all(line.endswith(", 334 records an epoch") for line in shares), result.stdout
    assert "a.csv[0:" in result.stdout and "(300 records)" not in result.stdout, result.stdout


def feeders_by_executor(mark):
    """{executor id: [feeder pid, ...]} of the agents whose command carries `mark`.

    An agent a node names its executor (--executor-id); a host's agent runs
    every node, and each feeder names its task (--task worker:N, executor N
    in a run of workers only)."""
    found = {}
    agents = subprocess.run(["pgrep", "-f", f"agent .*{mark}"], capture_output=True,
                            text=True).stdout.split()
    for agent in agents:
        argv = cmdline(agent)
        children = subprocess.run(["pgrep", "-P", agent, "-f", " feeder "],
                                  capture_output=True, text=True).stdout.split()
        for child in children:
            feeder = cmdline(child)
            if "--executor-id" in argv:
                executor = argv[argv.index("--executor-id") + 1]
            elif "--task" in feeder:
                executor = feeder[feeder.index("--task") + 1].split(":")[-1]
            else:
                continue
            found.setdefault(executor, []).append(int(child))
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def write_raw(path, first, count):
    """16-byte records "<7-digit id>,payloads", with `write_csv`'s ids."""
    with open(path, "wb") as f:
        for i in range(first, first + count):
            f.write(f"{i:07d},payloads".encode())


@pytest.mark.parametrize("feeding", ["csv", "raw in place", "raw read by the program"])
def test_killed_feeders_lose_nothing_and_repeat_nothing(tmp_path, feeding):
    """SIGKILLs feeders at random points; every record is still seen once per epoch.

    Between two kills of a node's feeder the test waits for progress, not for
    the clock: the node's reader must have consumed more bytes than its queue
    holds, so the feeder started after the last kill has fed at least one
    batch (a slower build or host gets fewer kills, never a failure). "raw in
    place": fixed-size records queued as extents of their file
    (--feed-ingest extent), read by the program from its own mapping; "raw
    read by the program": the same extents read with pread(2) into the
    program's memory (--feed-ingest extent-read)."""
    total = 30000
    queue_bytes = 65536
    if feeding == "csv":
        data = tmp_path / "data.csv"
        write_csv(data, 0, total)
        formats = []
    else:
        data = tmp_path / "data.raw"
        write_raw(data, 0, total)
        ingest = "extent" if feeding == "raw in place" else "extent-read"
        formats = ["--format", "raw", "--record-bytes", "16", "--feed-ingest", ingest]
    out = tmp_path / "seen"
    mark = marker()
    # A small queue keeps each feeder mid-partition (blocked on a full queue
    # or between batches) while the slow readers catch up.
    proc = subprocess.Popen(
        [drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "2",
         "--input", str(data), *formats, "--split-bytes", "60000", "--epochs", "2",
         "--queue-bytes", str(queue_bytes), "--", "sh", "-c", 'exec "$0" "$@"', FEED_READER,
         "--out", str(out), "--batch", "50", "--sleep-us", "1500", "--tag", mark],
        env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    rng = random.Random(1234)
    killed = set()
    seen_feeders = set()
    # What each node's reader had written when its feeder was last killed.
    read_at_kill = {}

    def killer():
        while proc.poll() is None:
            time.sleep(rng.uniform(0.05, 0.3))
            by_executor = feeders_by_executor(mark)
            for pids in by_executor.values():
                seen_feeders.update(pids)
            ready = [executor for executor, pids in by_executor.items() if pids and
                     file_size(f"{out}.{executor}") > read_at_kill.get(executor, -1) + queue_bytes]
            if not ready:
                continue
            executor = rng.choice(sorted(ready))
            read_at_kill[executor] = file_size(f"{out}.{executor}")
            pid = rng.choice(by_executor[executor])
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
        thread.join()
    assert proc.returncode == 0, stderr
    assert len(killed) >= 3, f"only {len(killed)} feeders were killed; the run was too short"
    assert "resuming" in stdout + stderr, stderr
    assert_each_record_once(ids_by_epoch(read_seen(out)), total, 2)
    # Every feeder is gone with the run.
    for pid in seen_feeders:
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert_no_leftovers(mark)


def test_trainer_that_dies_is_reported_at_once(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 20000)
    mark = marker()
    started = time.monotonic()
    result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "data.csv"),
                      "--split-bytes", "50000", "--feed-timeout", "600", "--queue-bytes", "65536",
                      "--grace", "2", "--",
                      "sh", "-c",
                      f'if [ "$RANK" = 1 ]; then exec {FEED_READER} --out seen --die-after 300; '
                      f'else exec {FEED_READER} --out seen --sleep-us 2000; fi', mark,
                      timeout=60)
    assert result.returncode == 1, result.stderr
    assert "worker:1" in result.stderr and "SIGKILL" in result.stderr, result.stderr
    assert time.monotonic() - started < 60  # the 600 s feed timeout played no part
    assert_no_leftovers(mark)


def test_terminate_stops_the_epochs_early(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 5000)
    out = tmp_path / "seen"
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.csv"),
                      "--epochs", "50", "--", FEED_READER, "--out", str(out),
                      "--terminate-after", "1000")
    assert result.returncode == 0, result.stderr
    seen = read_seen(out)["0"]
    assert 1000 <= len(seen) < 5000 * 50
    assert [record for _, record in seen[:1000]] == [f"{i},payload-{i}" for i in range(1000)]


def result_lines(output):
    """The results in `output`'s part files (at least three), in part order."""
    parts = sorted(p for p in os.listdir(output) if p.startswith("part-"))
    assert len(parts) >= 3, parts
    lines = []
    for part in parts:
        lines += (output / part).read_text().splitlines()
    return lines


def test_inference_writes_one_result_per_record_per_partition_in_order(tmp_path):
    write_csv(tmp_path / "a.csv", 0, 700)
    write_csv(tmp_path / "b.csv", 700, 500)
    output = tmp_path / "results"
    result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "a.csv"),
                      "--input", str(tmp_path / "b.csv"), "--split-bytes", "8000",
                      "--mode", "inference", "--output", str(output), "--",
                      FEED_READER, "--out", "seen", "--inference", "--batch", "33")
    assert result.returncode == 0, result.stderr
    assert result_lines(output) == [f"r:{i},payload-{i}" for i in range(1200)]
    assert not [p for p in os.listdir(output) if p.endswith(".tmp")]


@pytest.mark.parametrize("ingest", ["extent", "extent-read"])
def test_inference_answers_records_fed_in_place_once_each_in_order(tmp_path, ingest):
    # Fixed-size records queued as extents of their file: each partition's
    # last extent carries its end, and every result lands in its part file.
    write_raw(tmp_path / "d.raw", 0, 20000)
    output = tmp_path / "results"
    result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "d.raw"),
                      "--format", "raw", "--record-bytes", "16", "--feed-ingest", ingest,
                      "--split-bytes", "100000", "--queue-bytes", "65536",
                      "--mode", "inference", "--output", str(output), "--",
                      FEED_READER, "--out", "seen", "--inference", "--batch", "100")
    assert result.returncode == 0, result.stderr
    assert result_lines(output) == [f"r:{i:07d},payloads" for i in range(20000)]


def test_inference_with_the_wrong_number_of_results_names_the_partition(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 100)
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.csv"),
                      "--mode", "inference", "--output", str(tmp_path / "out"), "--",
                      FEED_READER, "--out", "seen", "--inference", "--short-results")
    assert result.returncode == 1, result.stderr
    assert "batch_results: 63 results for the 64 records" in result.stderr, result.stderr
    assert "data.csv" in result.stderr


def test_tfrecord_and_raw_inputs(tmp_path):
    with open(tmp_path / "data.tfrecord", "wb") as f:
        for i in range(200):
            f.write(tfrecord(f"{i},tf".encode()))
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.tfrecord"),
                      "--", FEED_READER, "--out", "tf")
    assert result.returncode == 0, result.stderr
    assert [r for _, r in read_seen(tmp_path / "tf")["0"]] == [f"{i},tf" for i in range(200)]

    with open(tmp_path / "data.bin", "wb") as f:
        for i in range(300):
            f.write(f"{i:05d},raw".encode())  # 9 bytes each
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.bin"),
                      "--format", "raw", "--record-bytes", "9", "--",
                      FEED_READER, "--out", "raw")
    assert result.returncode == 0, result.stderr
    assert [r for _, r in read_seen(tmp_path / "raw")["0"]] == \
        [f"{i:05d},raw" for i in range(300)]


@pytest.mark.parametrize("ingest", ["map", "read", "measure"])
def test_windowed_inputs_arrive_once_whether_their_windows_are_mapped_or_read(tmp_path, ingest):
    # --feed-ingest read: the feeder read(2)s CSV and TFRecord windows and
    # whole files (for hosts where mapping is dear); measure: by turns until
    # it chose; the same records every way, split.
    write_csv(tmp_path / "data.csv", 0, 20000)
    with open(tmp_path / "data.tfrecord", "wb") as f:
        for i in range(5000):
            f.write(tfrecord(f"{i:05d},tf".encode() * 20))
    os.mkdir(tmp_path / "files")
    for i in range(40):
        (tmp_path / "files" / f"{i:02d}.bin").write_bytes(f"{i:02d},file".encode() * (i * 50 + 1))
    expected = {"data.csv": sorted(f"{i},payload-{i}" for i in range(20000)),
                "data.tfrecord": sorted(f"{i:05d},tf" * 20 for i in range(5000)),
                "files": sorted(f"{i:02d},file" * (i * 50 + 1) for i in range(40))}
    for data, records in expected.items():
        raw = ["--format", "raw"] if data == "files" else []
        result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / data), *raw,
                          "--split-bytes", "50000", "--feed-ingest", ingest, "--",
                          FEED_READER, "--out", data)
        assert result.returncode == 0, result.stderr
        seen = sorted(r for node in read_seen(tmp_path / data).values() for _, r in node)
        assert seen == records, (data, len(seen), seen[:3])
        # The nodes' heartbeats said the way: pinned, or measure (too few
        # bytes here for the probes to end).
        record = json.loads((tmp_path / "logs" / "run.json").read_text())
        assert [node["feed"]["ingest"] for node in record["nodes"]] == [ingest, ingest]


@pytest.mark.parametrize("ingest", ["map", "read", "extent", "extent-read"])
def test_fixed_size_records_arrive_whole_however_the_feeder_takes_them_in(tmp_path, ingest):
    with open(tmp_path / "data.bin", "wb") as f:
        for i in range(5000):
            f.write(f"{i:05d},raw".encode())  # 9 bytes each
    result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "data.bin"),
                      "--format", "raw", "--record-bytes", "9", "--feed-ingest", ingest, "--",
                      FEED_READER, "--out", "raw")
    assert result.returncode == 0, result.stderr
    seen = read_seen(tmp_path / "raw")
    records = sorted(r for node in seen.values() for _, r in node)
    assert records == [f"{i:05d},raw" for i in range(5000)]
    # Each node's heartbeats said the way, as the status page and /metrics show it.
    record = json.loads((tmp_path / "logs" / "run.json").read_text())
    assert [node["feed"]["ingest"] for node in record["nodes"]] == [ingest, ingest]


@pytest.mark.parametrize("ingest", ["map", "read", "extent", "extent-read"])
def test_records_on_a_direct_io_file_system_arrive_however_they_are_taken_in(tmp_path, ingest):
    """A file system that opens its files with direct I/O (FUSE mounted with
    direct_io, as network file systems often are) refuses shared mappings of
    them: the program's own mapping (extent) is private, and every record
    arrives once whichever way."""
    with open(tmp_path / "data.bin", "wb") as f:
        for i in range(5000):
            f.write(f"{i:05d},raw".encode())  # 9 bytes each
    with hung_file_system(tmp_path, "--serve", str(tmp_path / "data.bin")):
        result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "mnt" / "data"),
                          "--format", "raw", "--record-bytes", "9", "--feed-ingest", ingest,
                          "--", FEED_READER, "--out", "raw")
    assert result.returncode == 0, result.stderr
    seen = read_seen(tmp_path / "raw")
    records = sorted(r for node in seen.values() for _, r in node)
    assert records == [f"{i:05d},raw" for i in range(5000)]


def feed_socket_of(mark):
    """The feed socket of the program whose command line carries `mark`."""
    for pid in leftovers(mark):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"DROVER_FEED_SOCKET" in env:
            return env[b"DROVER_FEED_SOCKET"].decode()
    raise AssertionError(f"no process of {mark} has a feed socket")


@pytest.mark.parametrize("ingest", ["extent", "extent-read"])
@pytest.mark.parametrize("swallow", [False, True], ids=["program-sees-it", "program-exits-0"])
def test_a_file_cut_short_under_its_extents_fails_the_node(tmp_path, ingest, swallow):
    """The program reads its records from the file itself; the file is cut
    short while it holds. Its DataFeed stops the feed; a program that loops
    on should_stop() (feed_reader does) gets the error from its next
    next_batch, not a should_stop() that ends its loop as if the feed were
    over. A program that ignores the error and exits 0 (--swallow-errors)
    still fails the node with the error that names the file, not a run that
    succeeded on part of its input. The cut comes once the program said it
    holds (a line in its file) and its feeder ended, never after a set time:
    the queue (64 MiB) takes every extent of the 20 MB file, so the feeder
    publishes them all and ends, and no feeder is left to end on the stop
    first (the agent would then stop the program before it exits; that fails
    the node too). The extents hold 1048 records (1 MiB), so the call after
    the hold takes the rest of the first (records 1000 to 1047), stops at the
    next, which lies past the cut, and returns those 48."""
    record_bytes = 1000
    with open(tmp_path / "data.bin", "wb") as f:
        for i in range(20000):
            f.write(f"{i:05d}".encode().ljust(record_bytes, b"."))
    out = tmp_path / "seen"
    release = tmp_path / "release"
    mark = marker()
    reader = subprocess.Popen(
        [drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "1",
         "--input", str(tmp_path / "data.bin"), "--format", "raw", "--record-bytes",
         str(record_bytes), "--feed-ingest", ingest, "--queue-bytes", str(64 << 20), "--",
         FEED_READER, "--out", str(out), "--batch", "100", "--hold", f"0={release}",
         "--hold-after", "1000", "--tag", mark] + (["--swallow-errors"] if swallow else []),
        env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120  # a hang detector, not a timing assertion
        while not (os.path.exists(f"{out}.0") and "#held" in open(f"{out}.0").read()):
            assert reader.poll() is None, reader.communicate()[1]
            assert time.monotonic() < deadline, "the program never held"
            time.sleep(0.05)
        socket = feed_socket_of(mark)
        while subprocess.run(["pgrep", "-f", f"feeder --socket {socket}"],
                             capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, "the feeder never ended"
            time.sleep(0.05)
        os.truncate(tmp_path / "data.bin", 1100 * record_bytes)
        release.touch()
        output, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 1, err
    # The node fails with the feed's error, whichever saw it first: the
    # program (its next call) or the agent.
    assert "feeding worker:0 failed" in err and "data.bin" in err and "cut short" in err, err
    if swallow:
        assert "feed_reader: read " in output, output  # the program itself exited 0
    else:
        # The summary keeps the program's own exit code (its DataFeed error).
        assert re.search(r"\nworker:0 .* exit code 3 ", err), err
        assert "feed_reader: read " not in output, output
        program_error = next((line for line in err.splitlines() if "feed_reader: " in line), "")
        assert "data.bin" in program_error and "cut short" in program_error, err
    # What it was handed before the cut, it was handed once, in order.
    with open(f"{out}.0") as f:
        ids = [int(line.split("\t", 1)[1].split(".", 1)[0]) for line in f
               if not line.startswith("#")]
    assert ids == list(range(1048)), len(ids)


FUSE_HANG = os.path.join(os.path.dirname(__file__), "fuse_hang.py")


@contextlib.contextmanager
def hung_file_system(tmp_path, *how):
    """A mounted fuse_hang.py (a hung network file system's stand-in), its
    file tmp_path/mnt/data: yields its process, whose stdout says "read" at
    each read it holds; unmounts at the end, which fails the held reads.
    `how`: fuse_hang.py's arguments after the mount point ("--serve FILE":
    reads are answered). Skips where FUSE cannot be mounted."""
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    fuse = subprocess.Popen([sys.executable, FUSE_HANG, str(mountpoint), *(how or ["4096"])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        mounted = fuse.stdout.readline()
        if mounted.startswith("mount:"):
            pytest.skip(f"cannot mount a FUSE file system here ({mounted.strip()})")
        assert mounted == "ready\n"
        yield fuse
    finally:
        fuse.stdin.close()  # the file system goes; the held reads fail
        fuse.wait(timeout=30)


def run_until_read_is_held(fuse, flag, argv, cwd):
    """Runs `argv` (a drover run) until the file system holds a read, then
    makes `flag` (the program's cue to go on) and waits for the run's end."""
    run = subprocess.Popen(argv, env=clean_env(), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        assert fuse.stdout.readline() == "read\n"  # progress, not the clock
        flag.touch()
        return run.communicate(timeout=120) + (run.returncode,)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


def assert_ends(pid):
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} outlived its file system"


def test_a_feeder_stuck_in_the_kernel_does_not_hold_the_run(tmp_path):
    # The input's reads never come back, so the feeder outlives SIGKILL
    # until the file system goes.
    with hung_file_system(tmp_path) as fuse:
        flag = tmp_path / "go"
        out, err, code = run_until_read_is_held(fuse, flag, [
            drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "1",
            "--input", str(tmp_path / "mnt" / "data"), "--format", "raw", "--record-bytes", "8",
            "--feed-ingest", "read", "--", "sh", "-c",
            f"while [ ! -e {flag} ]; do sleep 0.05; done"], tmp_path)
        assert code == 0, err
        assert "did not end within 10 s of SIGKILL" in out + err, (out, err)
        stuck = int((out + err).split("the feeder (pid ", 1)[1].split(")", 1)[0])
        assert os.path.exists(f"/proc/{stuck}"), "released, still stuck in its read"
    assert_ends(stuck)


def test_a_program_stuck_in_the_kernel_is_named_and_does_not_hold_the_run(tmp_path):
    # worker:0's program reads from a hung file system; worker:1 then fails,
    # and the run stops every node: worker:0's program outlives its SIGKILL.
    mark = marker()
    with hung_file_system(tmp_path) as fuse:
        flag = tmp_path / "go"
        program = (f'if [ "$RANK" = 0 ]; then exec cat {tmp_path}/mnt/data; fi; '
                   f'while [ ! -e {flag} ]; do sleep 0.05; done; exit 3')
        _, err, code = run_until_read_is_held(fuse, flag, [
            drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "2", "--grace",
            "1", "--", "sh", "-c", program, mark], tmp_path)
        assert code == 1, err
        assert "worker:1 (executor 1) failed: exit code 3" in err, err
        assert "worker:0's program (pid " in err, err
        stuck = int(err.split("worker:0's program (pid ", 1)[1].split(")", 1)[0])
        assert "is still there after SIGKILL: it is stuck in the kernel" in err, err
        assert os.path.exists(f"/proc/{stuck}"), "named, but not stuck"
    assert_ends(stuck)
    assert_no_leftovers(mark)


def test_corrupt_tfrecord_fails_the_run_naming_the_file(tmp_path):
    data = b"hello"
    length = struct.pack("<Q", len(data))
    (tmp_path / "bad.tfrecord").write_bytes(length + b"\0\0\0\0" + data + b"\0\0\0\0")
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "bad.tfrecord"),
                      "--", FEED_READER, "--out", "seen", timeout=60)
    assert result.returncode == 1, result.stderr
    assert "bad.tfrecord" in result.stderr and "CRC" in result.stderr.upper(), result.stderr


def test_a_node_failed_by_a_bad_record_counts_what_its_program_read(tmp_path):
    """The run's summary counts, for a node that failed, the records its
    program was handed up to the failure (its last heartbeat goes before the
    report), not what its last periodic heartbeat said. A small queue keeps
    the feeder just ahead of the program, so the program reads nearly all of
    the good records before the feeder reaches the bad one."""
    write_good_then_bad_tfrecords(tmp_path / "bad.tfrecord", 20000)
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "bad.tfrecord"),
                      "--queue-bytes", "65536", "--", FEED_READER, "--out", "seen",
                      "--batch", "64", timeout=60)
    assert result.returncode == 1, result.stderr
    assert "record 20000" in result.stderr and "CRC" in result.stderr.upper(), result.stderr
    with open(tmp_path / "seen.0") as f:
        written = sum(1 for _ in f)
    assert written > 19000, written
    node = json.loads((tmp_path / "logs" / "run.json").read_text())["nodes"][0]
    # The node failed with the feed's error even when its program, which
    # sees the error in its queue, exited before the feeder was reaped.
    assert node["state"] == "failed" and "record 20000" in node["error"], node
    # The count takes a queue batch in when the program starts on it (8 KiB
    # with this queue: 70 of these 116-byte records), and the program, killed
    # by the stop, may not have written its last 64.
    assert written <= node["feed"]["records"] <= written + 70 + 64, (written, node["feed"])


def test_parameter_servers_are_not_fed(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 10)
    result = run_feed(tmp_path, "--workers", "1", "--ps", "1", "--input",
                      str(tmp_path / "data.csv"), "--", "sh", "-c",
                      'echo "$DROVER_JOB_NAME feed=${DROVER_FEED_SOCKET:+yes}"; '
                      f'[ "$DROVER_JOB_NAME" = ps ] && exec sleep 60; exec {FEED_READER} '
                      '--out seen')
    assert result.returncode == 0, result.stderr
    assert "[worker:0] worker feed=yes" in result.stdout, result.stdout
    assert "[ps:0] ps feed=" in result.stdout and "[ps:0] ps feed=yes" not in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--input", "nothing-here-*.csv"], "nothing-here-*.csv"),
    (["--input", "data.csv", "--mode", "inference"], "--output"),
    (["--input", "data.csv", "--record-bytes", "4"], "--record-bytes goes with --format raw"),
    (["--input", "data.csv", "--mode", "bogus"], "train or inference"),
    (["--input", "data.unknown"], "--format"),
    (["--epochs", "2"], "go with --input"),
    (["--input", "data.csv", "--mode", "inference", "--output", "out", "--epochs", "2"],
     "one epoch"),
    (["--input", "data.csv", "--remainder", "some"], "--remainder takes pad or drop"),
    (["--input", "data.csv", "--balance", "fair"], "--balance takes equal or dynamic"),
    (["--input", "data.csv", "--balance", "dynamic", "--remainder", "drop"],
     "--remainder goes with --balance equal"),
    (["--balance", "dynamic"], "go with --input"),
    (["--input", "data.csv", "--feed-ingest", "extent-read"],
     "--feed-ingest extent-read goes with --format raw --record-bytes N"),
    (["--input", "data.csv", "--format", "raw", "--record-bytes", "2", "--feed-ingest", "mmap"],
     "--feed-ingest takes measure, map, read, extent or extent-read"),
    (["--input", "data.csv", "--mode", "inference", "--output", "out", "--remainder", "drop"],
     "--remainder goes with --mode train"),
])
def test_bad_feed_flags_are_one_clear_line_and_exit_2(tmp_path, args, message):
    write_csv(tmp_path / "data.csv", 0, 10)
    (tmp_path / "data.unknown").write_text("x\n")
    result = run_feed(tmp_path, "--nodes", "1", *args, "--", "true", timeout=30)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr


def test_inference_refuses_an_output_dir_holding_results(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 10)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-00000").write_text("old\n")
    result = run_feed(tmp_path, "--nodes", "1", "--input", "data.csv", "--mode", "inference",
                      "--output", "out", "--", "true", timeout=30)
    assert result.returncode == 2
    assert "already holds results" in result.stderr
    assert (tmp_path / "out" / "part-00000").read_text() == "old\n"


def test_dry_run_lists_the_partitions(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 1000)
    result = run_feed(tmp_path, "--nodes", "2", "--dry-run", "--input", "data.csv",
                      "--split-bytes", "5000", "--epochs", "2", "--", "true", timeout=30)
    assert result.returncode == 0, result.stderr
    assert "feed: " in result.stdout and "2 epochs" in result.stdout, result.stdout
    assert "data.csv[0:" in result.stdout


def test_a_program_that_reads_nothing_fails_at_the_feed_timeout_naming_the_node(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 50000)
    mark = marker()
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.csv"),
                      "--queue-bytes", "65536", "--feed-timeout", "1", "--grace", "1", "--",
                      "sh", "-c", "sleep 60", mark, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "feed timeout: worker:0 took no record for 1 s" in result.stderr, result.stderr
    assert_no_leftovers(mark)


def test_a_second_reader_of_a_nodes_feed_is_refused(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 100)
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.csv"), "--",
                      "sh", "-c", f"{FEED_READER} --out first --sleep-us 300000 & sleep 0.2; "
                      f"{FEED_READER} --out second; echo second=$?; wait", timeout=60)
    assert "already has a reader" in result.stdout + result.stderr, result.stdout + result.stderr
    assert "second=3" in result.stdout, result.stdout


KILL_TRIALS = 20 if os.environ.get("DROVER_KILL_MATRIX") == "full" else 4


@pytest.mark.parametrize("balance", ["equal", "dynamic"])
@pytest.mark.parametrize("trial", range(KILL_TRIALS))
def test_killed_worker_resumes_after_its_last_commit(tmp_path, trial, balance):
    """A random worker SIGKILLs itself at a random point in one or more
    rounds; the program commits every few batches. Relative to the commits,
    every record is consumed exactly once per epoch: none fed again before a
    share's last commit, none lost after it. The fault waits for progress
    (a number of records read), never for the clock. Dynamic: small queues
    and partitions, so both nodes claim as they go, and the victim dies
    early enough in the first round to be sure to die."""
    rng = random.Random(7000 + trial)
    total, nodes = 6000, 2
    write_csv(tmp_path / "data.csv", 0, total)
    victim = rng.randrange(nodes)
    rounds_killed = rng.randint(1, 3)
    die_after = rng.randrange(100, 2 * total // nodes if balance == "equal" else total // 4)
    feeding = (["--split-bytes", "20000"] if balance == "equal" else
               ["--balance", "dynamic", "--split-bytes", "8000", "--queue-bytes", "65536"])
    commit_every = rng.randint(1, 3)
    out = tmp_path / "seen"
    mark = marker()
    reader = (f'exec {FEED_READER} --out {out} --batch 50 --append '
              f'--commit-every {commit_every} --tag {mark}')
    result = run_feed(tmp_path, "--nodes", str(nodes), "--input", str(tmp_path / "data.csv"),
                      *feeding, "--epochs", "2", "--max-restarts", "3",
                      "--grace", "2", "--", "sh", "-c",
                      f'if [ "$RANK" = {victim} ]; then {reader} --die-after {die_after} '
                      f'--die-in-rounds {rounds_killed}; else {reader}; fi', mark,
                      timeout=300)
    context = (balance, victim, rounds_killed, die_after, commit_every)
    assert result.returncode == 0, (context, result.stderr)
    # A later round may have fewer records left than die_after: it ends. So
    # may the first with a dynamic feed, when the other node was faster and
    # took most of the queue: then the victim never reached die_after.
    died = records_in_round(f"{out}.{victim}", 0) >= die_after
    assert (1 if died else 0) <= result.stderr.count("re-forming the group") <= rounds_killed, \
        (context, result.stderr)
    assert_each_record_once(consumed_by_epoch(out), total, 2, context)
    assert_no_leftovers(mark)


def test_without_commits_a_new_round_feeds_from_the_start(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 2000)
    out = tmp_path / "seen"
    reader = f"exec {FEED_READER} --out {out} --batch 50 --append"
    result = run_feed(tmp_path, "--nodes", "2", "--input", str(tmp_path / "data.csv"),
                      "--max-restarts", "1", "--grace", "2", "--", "sh", "-c",
                      f'if [ "$RANK" = 1 ]; then {reader} --die-after 300 --die-in-rounds 1; '
                      f'else {reader}; fi')
    assert result.returncode == 0, result.stderr
    assert "resumes after its last commit" not in result.stderr
    with open(f"{out}.1") as f:
        lines = [line.rstrip("\n") for line in f]
    second = lines[lines.index("#round 1") + 1:]
    assert second[0] == "0\t1000,payload-1000", second[:3]  # its share, from the start


def test_commit_in_inference_is_refused(tmp_path):
    write_csv(tmp_path / "data.csv", 0, 100)
    result = run_feed(tmp_path, "--nodes", "1", "--input", str(tmp_path / "data.csv"),
                      "--mode", "inference", "--output", str(tmp_path / "out"), "--",
                      FEED_READER, "--out", "seen", "--inference", "--commit-every", "1",
                      timeout=60)
    assert result.returncode != 0
    assert "commit points are for training" in result.stderr, result.stderr

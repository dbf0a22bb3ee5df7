"""Feeding what the feeder takes in a window at a time: JSONL, TFRecord and
whole files (raw without --record-bytes) into a C++ consumer with the
feeder's windows mapped, read(2), or measured, against the file-read limit.

    /usr/bin/python3 bench/window_feed_bench.py --build build --mib 1000 --reps 3

For each format, about --mib MiB under --dir (JSONL: one file of lines of
about 90 bytes; TFRecord: one file of records of 200-1800 bytes; files: a
directory of files of 50-150 KB, a record each, as Spark's binaryFiles
reads images), page-cached by reading it once, then per repetition,
interleaved (a host's speed drifts):
 (0) the file-read limit: read(2) of the file (of each file) in 8 MiB chunks
     into a reused buffer (bench/host_figures.py);
 (map), (read): `drover run --nodes 1 --input PATH --format F --feed-ingest
     map|read -- feed_consumer --batch 1000`: the feeder's windows (a whole
     file a window for `files`) mapped (parsed in place, each byte copied
     once, into the queue) or read(2) into a reused buffer (copied twice, no
     page faults);
 (measure): the same with drover's default, which measures both ways for its
     first windows (by the feeder's CPU time per byte) and keeps the cheaper;
     the figures end with what it chose and why.
Rates are of the file's bytes per second, the consumer timing itself from the
first record to the last; each figure is the median of --reps runs. What it
shows: whether the measured choice keeps up with the better of the two pinned
ways on this host (the probes cost a little: 96 MiB of each way). Exits 1
when a run fails or feeds the wrong number of records; it never asserts
times.
"""
import argparse
import os
import shutil
import statistics
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from feed_bench import clean_env, run_one  # noqa: E402
from host_figures import figures_line, host_line, read_limit  # noqa: E402

WAYS = ["map", "read", "measure"]
FORMATS = {"jsonl": "jsonl", "tfrecord": "tfrecord", "files": "raw"}  # the name: drover's --format


def crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


TABLE = crc32c_table()


def masked_crc(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def size_of(path):
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def read_all(path):
    """Seconds to read() the file, or each file of the directory."""
    if not os.path.isdir(path):
        return read_limit(path)
    return sum(read_limit(os.path.join(path, name)) for name in sorted(os.listdir(path)))


def make_files(path, target):
    """Files of 50-150 KB of random bytes under `path` until `target` bytes."""
    os.makedirs(path, exist_ok=True)
    data = os.urandom(1 << 20)
    written, count = 0, 0
    while written < target:
        size = 50_000 + (count * 7919) % 100_000
        start = (count * 104_729) % (len(data) - size)
        with open(os.path.join(path, f"{count:06d}.bin"), "wb") as f:
            f.write(data[start:start + size])
        written += size
        count += 1
    return count


def make_input(path, fmt, mib):
    """Writes the input unless it is there; returns how many records it holds."""
    target = mib << 20
    count_path = path + ".records"
    if os.path.exists(path) and size_of(path) >= target and os.path.exists(count_path):
        with open(count_path) as f:
            return int(f.read())
    if fmt == "files":
        shutil.rmtree(path, ignore_errors=True)
        records = make_files(path, target)
        with open(count_path, "w") as f:
            f.write(str(records))
        return records
    records = 0
    with open(path, "wb") as f:
        if fmt == "jsonl":
            written, i = 0, 0
            while written < target:
                chunk = "".join(f'{{"id": {n:09d}, "label": {n % 10}, "features": '
                                f'[0.125, 0.25, 0.5, 0.75, 1.0, 2.5]}}\n'
                                for n in range(i, i + 100_000)).encode()
                f.write(chunk)
                written += len(chunk)
                i += 100_000
            records = i
        else:
            # 256 distinct records (their CRCs in Python are slow), repeated.
            block = b"".join(tfrecord(bytes((n * 7 + k) % 256 for k in range(200 + n * 6)))
                             for n in range(256))
            repeats = -(-target // len(block))
            for _ in range(repeats):
                f.write(block)
            records = repeats * 256
    with open(count_path, "w") as f:
        f.write(str(records))
    return records


def feed(args, path, fmt, way, records, env):
    """Seconds the consumer took, and what a measuring feeder said it chose."""
    out = os.path.join(args.dir, "consumer.json")
    command = [os.path.join(args.build, "bin", "drover"), "run", "--nodes", "1", "--input", path,
               "--format", FORMATS[fmt], "--feed-ingest", way, "--log-dir",
               os.path.join(args.dir, "logs"), "--",
               os.path.join(args.build, "bin", "feed_consumer"), "--batch", "1000", "--out", out]
    try:
        result = run_one(command, out, records, env, timeout=600)
    except RuntimeError as error:
        sys.exit(str(error))
    return result["seconds"], result.get("choice", "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--dir", default="/tmp/drover-parsed-feed-bench")
    parser.add_argument("--mib", type=int, default=1000)
    parser.add_argument("--formats", default="jsonl,tfrecord,files")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    env = clean_env(os.path.join(args.build, "python"))
    print(host_line())
    print(figures_line())
    for fmt in args.formats.split(","):
        if fmt not in FORMATS:
            sys.exit(f"--formats: {fmt} is not one of {', '.join(FORMATS)}")
        path = os.path.join(args.dir, f"records-{args.mib}MiB.{fmt}")
        records = make_input(path, fmt, args.mib)
        read_all(path)  # into the page cache
        size = size_of(path)
        limits, seconds, choices = [], {way: [] for way in WAYS}, []
        for _ in range(args.reps):
            limits.append(read_all(path))
            for way in WAYS:
                took, said = feed(args, path, fmt, way, records, env)
                seconds[way].append(took)
                if way == "measure":
                    choices.append(said or "(no choice said)")
        limit = size / statistics.median(limits) / 1e9
        print(f"\n{fmt}: {size / 1e9:.2f} GB, {records} records, median of {args.reps}; "
              f"read() limit {limit:.1f} GB/s")
        print(f"{'windows':>9} {'GB/s':>6} {'x read()':>9}")
        rates = {}
        for way in WAYS:
            rates[way] = size / statistics.median(seconds[way]) / 1e9
            print(f"{way:>9} {rates[way]:>6.2f} {rates[way] / limit:>9.2f}")
        best = max(rates["map"], rates["read"])
        print(f"measure at {rates['measure'] / best:.2f}x the better pinned way; it chose:")
        for said in choices:
            print(f"  {said}")


if __name__ == "__main__":
    main()

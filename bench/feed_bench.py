"""Feeding throughput: drover's feeder to C++ and Python consumers, against memcpy, read() and TensorFlowOnSpark.

usage: feed_bench.py [--build build] [--kinds mnist,b100,b10k] [--bytes 2147483648]
                     [--tfos-records mnist=7000,b100=20000,b10k=12000] [--batch 100]
                     [--queue-bytes N] [--feed-ingest measure|map|read|extent|extent-read]
                     [--reps 3] [--page-cache read|written] [--settle 60] [--data-dir DIR]
                     [--tfos-src DIR]

For each record kind (bench/make_feed_records.py: MNIST rows of 784 float32 +
int32 label = 3140 bytes, 100-byte and 10 KB records; raw fixed-length files
of about --bytes each, random but deterministic) it runs, on the same file:
 (0) the file-read limit: `feed_consumer --read-limit FILE` read(2)s the
     page-cached file in 16 MiB chunks into one reused buffer, what any
     file-fed pipeline does at least once (median of 5 passes); on hosts
     where faulting page-cache pages into a mapping is slow this, not (1),
     bounds a feeder;
 (1) memcpy, the limit of a consumer's copy: `feed_consumer --memcpy FILE` holds the file in one
     buffer (larger than the caches) and copies it record by record into a
     reused batch buffer of --batch records, the copy a consumer does (median
     of 5 passes);
 (2) drover to C++: `drover run --nodes 1 --input FILE --format raw
     --record-bytes N --queue-bytes Q -- feed_consumer --batch K`, which reads
     with DataFeed::NextBatch(K) and does that same copy;
 (3) drover to Python: the same with `/usr/bin/python3 bench/feed_consumer.py`,
     drover.DataFeed(schema=...) for MNIST rows (dict of numpy arrays), plain
     next_batch (list of bytes) for the others;
 (5) the pipeline limit: `feed_consumer --pipeline-limit FILE`, a feeder
     thread pread(2)ing the file into a 4 MiB shared-memory ring and a
     consumer thread doing (1)'s copy out of it, handing slots over by
     spinning on two atomics: what a separate feeder and a copying consumer
     on two cores can do with nothing of drover between them (median of 5
     passes); (2) against it is drover's own overhead;
 (6), (7) the one-thread limit: `feed_consumer --one-thread-limit FILE
     --ingest read|map`, one thread that takes the file in itself (pread(2)
     in runs of about 512 KiB into one reused buffer, or a fresh mapping of
     the whole file) and does (1)'s copy: what a program reading its own
     files with no feeder could do, against which (5) shows what the
     separate feeder on the second core buys (median of 5 passes);
 (4) TensorFlowOnSpark's feeding (bench/tfos_feed_baseline.py): a manager
     process with JoinableQueues, a feeder putting records one by one, a
     consumer using TFoS's DataFeed.next_batch(100); given only the first
     --tfos-records records of the file because it is slow;
 (4o) with --tfos-src DIR (a TensorFlowOnSpark checkout, not shipped here):
     the same through TensorFlowOnSpark's own code (TFManager, TFSparkNode's
     train and shutdown functions, TFNode.DataFeed), on the same records.
Before the runs each file's pages are put in the page cache the way a
dataset read from storage has them (--page-cache read, the default: written
back, dropped, and read(2) back in large chunks) or left as the generator
wrote them (--page-cache written). How pages came into the page cache
matters to every path that maps the file: on the development host a file
cached for a day, or just copied with cp(1), mapped and copied at 8-10 GB/s
and at 22-23 GB/s once dropped and read back (bench/RESULTS.md,
2026-11-29). After a file is read back the bench waits --settle seconds
before the runs: on the development host, for tens of seconds after 2 GB
came into the page cache (once still 50 s after), a feeder and a consumer
on the two cores ran 4-8x slower in spells (bench/RESULTS.md, "The program
reads its records itself"), which would fall on whichever path ran then.
With a measuring feeder (the default) the figures end with the
way it chose for each run of (2) and (3), and why.
Each consumer times itself from the first record received to the end of the
feed and reports records, bytes and seconds; start-up is not counted. Rates
are compared, not totals. Each figure is the median of --reps runs, the
paths interleaved within each repetition. Ratios are of records/s measured in
this run. Targets: (2) >= 0.5 x (1) and >= 0.8 x (0) for every kind,
(3) >= 1000 x (4) and (3) >= 0.8 x (2) (NumPy against C++) for MNIST rows,
(3) >= 0.3 x (1) (Python bytes) for 100-byte records; the bench says
whether each is met. Exits 1 when a run fails (or
feeds the wrong number of records); it never asserts times.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_feed_records  # noqa: E402

PYTHON = "/usr/bin/python3"
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
PATHS = ["(1) memcpy", "(2) drover -> C++", "(3) drover -> Python", "(4) TFoS queues"]
READ_LIMIT = "(0) read() limit"
PIPELINE_LIMIT = "(5) pipeline limit"
ONE_THREAD = {"read": "(6) one thread, read", "map": "(7) one thread, map"}
TFOS_OWN = "(4o) TFoS own code"
LABELS = {"mnist": "MNIST rows", "b100": "100 B", "b10k": "10 KB"}


def clean_env(python_dir):
    drop = ("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_",
            "OMPI_", "PMI", "SLURM_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = python_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def commands(args, kind, path, record_bytes, out, logdir):
    """The command of each of the four paths, writing its JSON line to `out`."""
    binary = lambda name: os.path.join(args.build, "bin", name)  # noqa: E731
    queue = ["--queue-bytes", str(args.queue_bytes)] if args.queue_bytes else []
    if args.feed_ingest:
        queue += ["--feed-ingest", args.feed_ingest]
    drover_run = [binary("drover"), "run", "--nodes", "1", "--input", path, "--format", "raw",
                  "--record-bytes", str(record_bytes), *queue, "--log-dir", logdir, "--"]
    py_kind = "mnist" if kind == "mnist" else "bytes"
    tfos = [PYTHON, os.path.join(BENCH_DIR, "tfos_feed_baseline.py"), "--file", path,
            "--record-bytes", str(record_bytes), "--records", str(args.tfos_records[kind]),
            "--kind", py_kind, "--batch", "100", "--out", out]
    own = {TFOS_OWN: tfos + ["--tfos-src", args.tfos_src]} if args.tfos_src else {}
    return {
        READ_LIMIT: [binary("feed_consumer"), "--read-limit", path, "--record-bytes",
                     str(record_bytes), "--passes", "5", "--out", out],
        PIPELINE_LIMIT: [binary("feed_consumer"), "--pipeline-limit", path, "--record-bytes",
                         str(record_bytes), "--batch", str(args.batch), "--passes", "5", "--out",
                         out],
        **{name: [binary("feed_consumer"), "--one-thread-limit", path, "--ingest", ingest,
                  "--record-bytes", str(record_bytes), "--batch", str(args.batch), "--passes", "5",
                  "--out", out] for ingest, name in ONE_THREAD.items()},
        PATHS[0]: [binary("feed_consumer"), "--memcpy", path, "--record-bytes", str(record_bytes),
                   "--batch", str(args.batch), "--passes", "5", "--out", out],
        PATHS[1]: drover_run + [binary("feed_consumer"), "--batch", str(args.batch), "--out", out],
        PATHS[2]: drover_run + [PYTHON, os.path.join(BENCH_DIR, "feed_consumer.py"), "--kind",
                                py_kind, "--batch", str(args.batch), "--out", out],
        PATHS[3]: tfos,
        **own,
    }


def run_one(command, out, expected_records, env, timeout):
    """Runs one path; returns its {"records", "bytes", "seconds"} or raises RuntimeError."""
    if os.path.exists(out):
        os.unlink(out)
    try:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout} s: {' '.join(command)}")
    except OSError as error:
        raise RuntimeError(f"{error}: {' '.join(command)}")
    tail = (done.stdout + done.stderr)[-3000:]
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {' '.join(command)}\n{tail}")
    try:
        with open(out) as f:
            result = json.loads(f.read())
    except (OSError, ValueError) as error:
        raise RuntimeError(f"no result ({error}): {' '.join(command)}\n{tail}")
    if result["records"] != expected_records or result["seconds"] <= 0:
        raise RuntimeError(f"read {result['records']} records in {result['seconds']} s, "
                           f"expected {expected_records}: {' '.join(command)}\n{tail}")
    # What a measuring feeder chose, as it says in the node's output.
    choice = [line.split("drover feeder worker:0: ", 1)[1] for line in
              (done.stdout + done.stderr).splitlines() if "drover feeder worker:0: " in line]
    if choice:
        result["choice"] = choice[-1]
    return result


def read_back(path):
    """Writes the file back, drops it from the page cache and reads it in
    again with read(2), so its pages are as a dataset read from storage has
    them (the kernel's read-ahead, not the generator's writes, made them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 16 << 20):
            pass
    finally:
        os.close(fd)


def parse_counts(text):
    counts = {}
    for item in text.split(","):
        kind, _, count = item.partition("=")
        counts[kind] = int(count)
    return counts


def l3_bytes():
    """The last-level cache's size, from sysfs (0 when unknown)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    size = 0
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, index, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        value = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        size = max(size, value)
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build", help="build dir with bin/ and python/")
    parser.add_argument("--kinds", default="mnist,b100,b10k")
    parser.add_argument("--bytes", type=int, default=2 << 30,
                        help="about this many bytes per file, for (1)-(3)")
    parser.add_argument("--tfos-records", type=parse_counts,
                        default=parse_counts("mnist=7000,b100=20000,b10k=12000"),
                        help="records given to (4), per kind")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--queue-bytes", type=int, default=None,
                        help="drover run --queue-bytes (default: drover's own default)")
    parser.add_argument("--feed-ingest",
                        choices=("measure", "map", "read", "extent", "extent-read"),
                        help="drover run --feed-ingest for (2) and (3) (default: drover's own, "
                             "measure): pin the feeder to one way to compare them on a host")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--page-cache", choices=("read", "written"), default="read",
                        help="each file's pages as read(2) from storage brings them in (read, the "
                             "default) or as the generator wrote them (written)")
    parser.add_argument("--settle", type=float, default=60,
                        help="seconds to wait after reading the files back, before the runs")
    parser.add_argument("--data-dir", help="keep the record files here (default: a temp dir)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per run")
    parser.add_argument("--tfos-src", help="a TensorFlowOnSpark checkout (DIR/tensorflowonspark): "
                        "also feed through its own code, (4o)")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    kinds = args.kinds.split(",")
    for kind in kinds:
        if kind not in make_feed_records.KINDS:
            parser.error(f"unknown kind {kind!r}")
        args.tfos_records.setdefault(kind, 10000)
    env = clean_env(os.path.join(args.build, "python"))

    load_before = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix="drover-feed-")
    data_dir = args.data_dir or os.path.join(workdir, "data")
    os.makedirs(data_dir, exist_ok=True)
    results = {}  # (kind, path name) -> [result or None]
    failures = []
    files = {}
    try:
        for kind in kinds:
            record_bytes = make_feed_records.KINDS[kind][0]
            records = make_feed_records.records_for(kind, args.bytes)
            files[kind] = (make_feed_records.write(data_dir, kind, records), records)
            if args.page_cache == "read":
                read_back(files[kind][0])
            # TFoS feeds the first records of the same file: never more than it has.
            args.tfos_records[kind] = min(args.tfos_records[kind], records)
            print(f"feed_bench: {files[kind][0]}: {records:,} records of {record_bytes} bytes",
                  file=sys.stderr, flush=True)
        if args.page_cache == "read" and args.settle > 0:
            print(f"feed_bench: waiting {args.settle:g} s for the host to settle after the "
                  "read-back", file=sys.stderr, flush=True)
            time.sleep(args.settle)
        for rep in range(args.reps):
            for kind in kinds:
                path, records = files[kind]
                record_bytes = make_feed_records.KINDS[kind][0]
                out = os.path.join(workdir, "result.json")
                logdir = os.path.join(workdir, "logs")
                for name, command in commands(args, kind, path, record_bytes, out, logdir).items():
                    expected = args.tfos_records[kind] if name in (PATHS[3], TFOS_OWN) \
                        else records
                    try:
                        result = run_one(command, out, expected, env, args.timeout)
                    except RuntimeError as error:
                        failures.append(f"{LABELS[kind]} {name} (rep {rep + 1}): {error}")
                        print(f"feed_bench: {LABELS[kind]} {name} failed: {error}",
                              file=sys.stderr, flush=True)
                        result = None
                    results.setdefault((kind, name), []).append(result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def median(kind, name):
        """The median run by records/s, or None when none succeeded."""
        runs = sorted((r for r in results.get((kind, name), []) if r is not None),
                      key=lambda r: r["records"] / r["seconds"])
        return runs[(len(runs) - 1) // 2] if runs else None

    def rate(kind, name):
        run = median(kind, name)
        return run["records"] / run["seconds"] if run else None

    def ratio(a, b, digits=2):
        return f"{a / b:,.{digits}f}" if a is not None and b else "-"

    l3 = l3_bytes()
    print(f"host: {os.uname().nodename}, {os.cpu_count()} CPUs, L3 {l3 >> 20} MiB, load "
          f"{load_before:.1f} before / {os.getloadavg()[0]:.1f} after; batch {args.batch}, "
          f"queue {f'{args.queue_bytes >> 20} MiB' if args.queue_bytes else 'drover default'}, "
          f"feed ingest {args.feed_ingest or 'drover default'}, page cache as "
          f"{args.page_cache}; median of {args.reps}")
    print(f"(1)-(3) read every record of a {args.bytes / 1e9:.2f} GB file, (4) only its first "
          f"records; each consumer timed from its first record to the end of the feed")
    print(f"{'records':<11} {'path':<21} {'records':>11} {'seconds':>8} {'records/s':>13} "
          f"{'GB/s':>8} {'x (1)':>7} {'x (0)':>7}")
    for kind in kinds:
        memcpy_rate = rate(kind, PATHS[0])
        read_rate = rate(kind, READ_LIMIT)
        for name in ([READ_LIMIT] + PATHS + [PIPELINE_LIMIT] + list(ONE_THREAD.values())
                     + ([TFOS_OWN] if args.tfos_src else [])):
            run = median(kind, name)
            if run is None:
                print(f"{LABELS[kind]:<11} {name:<21} {'-':>11} {'-':>8} {'-':>13} {'-':>8} {'-':>7}"
                      f" {'-':>7}")
                continue
            r = run["records"] / run["seconds"]
            print(f"{LABELS[kind]:<11} {name:<21} {run['records']:>11,} {run['seconds']:>8.3f} "
                  f"{r:>13,.0f} {run['bytes'] / run['seconds'] / 1e9:>8.3f} "
                  f"{(f'{r / memcpy_rate:.3g}' if memcpy_rate else '-'):>7} "
                  f"{(f'{r / read_rate:.3g}' if read_rate else '-'):>7}")
    print()
    print("ratios of records/s, same run:")
    print(f"{'records':<11} {'(2)/(1)':>8} {'(3)/(1)':>8} {'(2)/(0)':>8} {'(3)/(0)':>8} "
          f"{'(3)/(4)':>9} {'(2)/(4)':>9} {'(1)/(4)':>9} {'(2)/(5)':>8} {'(5)/(1)':>8} "
          f"{'(5)/(6|7)':>10}")
    for kind in kinds:
        r1, r2, r3, r4 = (rate(kind, name) for name in PATHS)
        r0, r5 = rate(kind, READ_LIMIT), rate(kind, PIPELINE_LIMIT)
        one_thread = [r for r in (rate(kind, name) for name in ONE_THREAD.values()) if r]
        r67 = max(one_thread) if one_thread else None  # the faster way in of one thread
        print(f"{LABELS[kind]:<11} {ratio(r2, r1):>8} {ratio(r3, r1):>8} {ratio(r2, r0):>8} "
              f"{ratio(r3, r0):>8} {ratio(r3, r4, 0):>9} {ratio(r2, r4, 0):>9} "
              f"{ratio(r1, r4, 0):>9} {ratio(r2, r5):>8} {ratio(r5, r1):>8} {ratio(r5, r67):>10}")
    print()

    def verdict(value, target):
        if value is None:
            return "not measured"
        return f"{value:,.2f}: {'met' if value >= target else 'NOT met'}"

    for kind in kinds:
        r0, r1, r2 = rate(kind, READ_LIMIT), rate(kind, PATHS[0]), rate(kind, PATHS[1])
        print(f"target (2) >= 0.5 x (1), {LABELS[kind]}: "
              f"{verdict(r2 / r1 if r1 and r2 else None, 0.5)}")
        print(f"target (2) >= 0.8 x (0), {LABELS[kind]}: "
              f"{verdict(r2 / r0 if r0 and r2 else None, 0.8)}")
    if "mnist" in kinds:
        r2, r3, r4 = (rate("mnist", name) for name in PATHS[1:4])
        r1 = rate("mnist", PATHS[0])
        print(f"target (3) >= 0.8 x (2), MNIST rows (NumPy against C++): "
              f"{verdict(r3 / r2 if r2 and r3 else None, 0.8)}")
        print(f"target (3) >= 1000 x (4), MNIST rows: "
              f"{verdict(r3 / r4 if r3 and r4 else None, 1000)}"
              + (f" (the memcpy limit itself is {r1 / r4:,.0f} x (4))" if r1 and r4 else ""))
        if args.tfos_src:
            own = rate("mnist", TFOS_OWN)
            print(f"MNIST rows through TFoS's own code (4o): (3) / (4o) = {ratio(r3, own, 0)}, "
                  f"(4) / (4o) = {ratio(r4, own)} (the re-implementation against the original)")
    if "b100" in kinds:
        r1, r3 = rate("b100", PATHS[0]), rate("b100", PATHS[2])
        print(f"target (3) >= 0.3 x (1), 100 B (Python bytes): "
              f"{verdict(r3 / r1 if r1 and r3 else None, 0.3)}")
    choices = [(kind, name, run["choice"]) for kind in kinds for name in PATHS[1:3]
               for run in results.get((kind, name), []) if run and "choice" in run]
    if choices:
        print("\nthe feeder's choice, each run of (2) and (3) in order (docs/feed.md, "
              "--feed-ingest measure):")
        for kind, name, choice in choices:
            print(f"{LABELS[kind]:<11} {name:<21} {choice}")
    if failures:
        print(f"\nfeed_bench: {len(failures)} run(s) failed; first: {failures[0][:2000]}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What equal shares cost before a run starts: `drover run --dry-run --input`
on one CSV file, with 1 fed node (nothing counted) and with n nodes (every
record counted once, partitions cut where shares meet), against the file-read
limit measured in the same run (read() of the page-cached file into a reused
buffer, 8 MiB at a time).

    /usr/bin/python3 bench/plan_bench.py --drover build/bin/drover --mib 1000 --reps 5

The input is made once (lines of about 40 bytes) under --dir and read once
before timing, so every figure is from the page cache.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_figures import read_limit  # noqa: E402


def make_csv(path, mib):
    target = mib << 20
    if os.path.exists(path) and os.path.getsize(path) >= target:
        return
    with open(path, "w") as f:
        written, i = 0, 0
        while written < target:
            chunk = "".join(f"{n},payload-{n},0.5,0.25,0.125\n" for n in range(i, i + 100_000))
            f.write(chunk)
            written += len(chunk)
            i += 100_000


def plan_seconds(drover, path, nodes, workdir):
    started = time.perf_counter()
    subprocess.run([drover, "run", "--nodes", str(nodes), "--dry-run", "--input", path, "--",
                    "true"], check=True, stdout=subprocess.DEVNULL, cwd=workdir)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drover", default="build/bin/drover")
    parser.add_argument("--dir", default="/tmp/drover-plan-bench")
    parser.add_argument("--mib", type=int, default=1000)
    parser.add_argument("--nodes", default="1,2,8")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, f"lines-{args.mib}MiB.csv")
    make_csv(path, args.mib)
    read_limit(path)  # into the page cache
    drover = os.path.abspath(args.drover)
    nodes = [int(n) for n in args.nodes.split(",")]
    reads, plans = [], {n: [] for n in nodes}
    for _ in range(args.reps):  # interleaved: a host's speed drifts
        reads.append(read_limit(path))
        for n in nodes:
            plans[n].append(plan_seconds(drover, path, n, args.dir))
    size = os.path.getsize(path)
    limit = statistics.median(reads)
    print(f"{size / 1e9:.2f} GB CSV, median of {args.reps}; read() limit "
          f"{limit:.3f} s ({size / limit / 1e9:.1f} GB/s)")
    print(f"{'fed nodes':>9} {'plan s':>8} {'x read()':>9}")
    for n in nodes:
        seconds = statistics.median(plans[n])
        print(f"{n:>9} {seconds:>8.3f} {seconds / limit:>9.2f}")


if __name__ == "__main__":
    main()

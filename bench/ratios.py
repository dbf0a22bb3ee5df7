"""Prints Google Benchmark JSON as a table of ratios to a baseline benchmark.

usage: ratios.py RESULTS.json BASELINE_NAME
Each benchmark's median time per iteration at argument N is divided by the
baseline's at the same N, so the figures compare like with like from one run.
"""
import json
import sys


def main(path, baseline):
    with open(path) as f:
        data = json.load(f)
    medians = {}
    extra = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name, arg = b["run_name"].split("/")[:2]
        medians[(name, int(arg))] = b["real_time"] if b["time_unit"] == "ns" else None
        extra[(name, int(arg))] = b.get("encoded_bytes")
    if not medians:
        sys.exit(f"ratios.py: {path} has no median aggregates: run the benchmark with "
                 "--benchmark_repetitions=N (N >= 2), as bench/run.sh does")
    if not any(name == baseline for name, _ in medians):
        sys.exit(f"ratios.py: {path} has no {baseline}")
    ctx = data["context"]
    print(f"host: {ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs @ {ctx.get('mhz_per_cpu')} MHz")
    print(f"{'benchmark':<20} {'N':>6} {'bytes':>9} {'ns/op':>12} {'x ' + baseline:>22}")
    for (name, arg), ns in sorted(medians.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = medians.get((baseline, arg))
        ratio = f"{ns / base:,.1f}" if base else "-"
        print(f"{name:<20} {arg:>6} {int(extra[(name, arg)] or 0):>9} {ns:>12,.0f} {ratio:>22}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: ratios.py RESULTS.json BASELINE_NAME")
    main(sys.argv[1], sys.argv[2])

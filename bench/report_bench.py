"""What drover.report costs a training loop: a Python program under a real
`drover run --nodes 1` (its agent reading the reports), stepping at about
--rate steps/s of busy work, timed without reporting (the baseline, in the
same process, alternated) and with one drover.report(step=, loss=, lr=) per
step. Prints the slowdown and the cost per call, and the same loop outside
drover (reports off) for the no-op path.

    /usr/bin/python3 bench/report_bench.py --drover build/bin/drover --reps 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def busy(units):
    total = 0
    for i in range(units):
        total += i * i
    return total


def calibrate(rate):
    """Loop units that make one step last 1/rate seconds."""
    units = 100
    while True:
        started = time.perf_counter()
        for _ in range(200):
            busy(units)
        per_step = (time.perf_counter() - started) / 200
        if per_step > 0.2 / rate:
            return max(1, int(units / (per_step * rate)))
        units *= 2


def timed_loop(steps, units, report):
    started = time.perf_counter()
    for step in range(steps):
        busy(units)
        if report is not None:
            report(step=step, loss=1.0 / (step + 1), lr=0.001)
    return time.perf_counter() - started


def inner(args):
    import drover
    units = calibrate(args.rate)
    plain, reported = [], []
    for _ in range(args.reps):
        plain.append(timed_loop(args.steps, units, None))
        reported.append(timed_loop(args.steps, units, drover.report))
    drover.flush_reports()
    print(json.dumps({"enabled": drover.reports_enabled(), "units": units,
                      "plain_s": plain, "reported_s": reported}), flush=True)


def summarise(label, result, steps):
    plain = statistics.median(result["plain_s"])
    reported = statistics.median(result["reported_s"])
    print(f"{label}: {steps / plain:,.0f} steps/s without reports, {steps / reported:,.0f} with "
          f"one report per step: {reported / plain:.3f}x the baseline's time "
          f"({(reported / plain - 1) * 100:+.1f}%), {(reported - plain) / steps * 1e6:.2f} us "
          f"per call (reports {'on' if result['enabled'] else 'off'})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drover", default="build/bin/drover")
    parser.add_argument("--rate", type=float, default=10_000, help="steps/s of the loop")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)
    me = [sys.executable if sys.executable else "/usr/bin/python3", os.path.abspath(__file__),
          "--inner", "--rate", str(args.rate), "--steps", str(args.steps), "--reps",
          str(args.reps)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    alone = subprocess.run(me, env=env, capture_output=True, text=True, check=True)
    with tempfile.TemporaryDirectory() as logs:
        under = subprocess.run([args.drover, "run", "--nodes", "1", "--log-dir", logs,
                                "--progress", "off", "--", *me], env=env, capture_output=True,
                               text=True, check=True)
        record = json.load(open(os.path.join(logs, "run.json")))
    line = next(x for x in under.stdout.splitlines() if x.startswith("[worker:0] {"))
    print(f"report bench: {args.steps:,} steps a run, median of {args.reps}, each step about "
          f"{1e6 / args.rate:.0f} us of busy work")
    summarise("outside drover", json.loads(alone.stdout), args.steps)
    summarise("under drover run", json.loads(line.split(" ", 1)[1]), args.steps)
    print("the driver saw: " + json.dumps(record["metrics"]))


if __name__ == "__main__":
    sys.exit(main())

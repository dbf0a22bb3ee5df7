"""Start-up time of a local cluster: from the launch command to every program started.

usage: startup_bench.py [--drover build/bin/drover] [--baseline OTHER_DROVER] [--agent-a-node]
                        [--nodes 2,4,8] [--reps 3]

For N local nodes it launches the same trivial program, `sh -c 'date +%s.%N >> FILE'`
(each copy appends the CLOCK_REALTIME time it started), with
  drover run --nodes N -- PROG
  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=N --no_python PROG
  mpirun --oversubscribe -np N PROG
and a floor: the bench itself spawning the N copies (fork + exec, nothing else).
The bench takes CLOCK_REALTIME (time.time_ns) just before starting the launcher;
"start" is the last copy's timestamp minus that, "exit" is when the launcher
returned. Each figure is the median of --reps runs, the launchers interleaved
within each repetition; the ratios compare drover with torchrun and mpirun
measured in the same run. --baseline adds a second drover binary (say, one built
from main) as "drover baseline", interleaved with the rest, for before/after figures;
--agent-a-node adds `drover run --agents node` (an agent process a node, where
the default is one agent for every node) as "drover agent a node".

Debian 12's torchrun (torch 1.13 on Python 3.11) fails at start-up in its
--redirects/--tee parsing (enum.IntFlag no longer iterates its zero member);
the bench runs it through torchrun_py311() below, which fixes only that parser.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# torchrun with Std.from_str fixed for Python 3.11; everything else is torchrun's own.
TORCHRUN_SHIM = r"""
import re, runpy, sys
from torch.distributed.elastic.multiprocessing import api
def from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(vm)
if api.Std.from_str("0") is None:
    api.Std.from_str = classmethod(from_str)
sys.argv[0] = "torchrun"
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
"""


def clean_env():
    drop = ("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_",
            "OMPI_", "PMI", "SLURM_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def program(stamp_file):
    return ["sh", "-c", f'date +%s.%N >> "{stamp_file}"']


def launchers(drover, workdir, baseline=None, agent_a_node=False):
    def drover_with(binary, flags=()):
        def drover_run(n, prog):
            return [binary, "run", "--nodes", str(n), *flags, "--log-dir",
                    os.path.join(workdir, "logs"), "--"] + prog
        return drover_run

    def torchrun(n, prog):
        return ["/usr/bin/python3", "-c", TORCHRUN_SHIM, "--standalone",
                f"--nproc_per_node={n}", "--no_python"] + prog

    def mpirun(n, prog):
        return ["mpirun", "--oversubscribe", "-np", str(n)] + prog

    found = {"drover run": drover_with(drover)}
    if agent_a_node:
        found["drover agent a node"] = drover_with(drover, ["--agents", "node"])
    if baseline:
        found["drover baseline"] = drover_with(baseline)
    found["floor (fork+exec)"] = None
    if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.run"],
                      capture_output=True).returncode == 0:
        found["torchrun"] = torchrun
    else:
        print("startup_bench: no torch for /usr/bin/python3; torchrun left out", file=sys.stderr)
    if shutil.which("mpirun"):
        found["mpirun"] = mpirun
    else:
        print("startup_bench: no mpirun; left out", file=sys.stderr)
    return found


def measure(command, n, stamp_file, env):
    """Seconds from launch to the last program started, and to the launcher's exit."""
    if os.path.exists(stamp_file):
        os.unlink(stamp_file)
    prog = program(stamp_file)
    launched = time.time_ns()
    if command is None:  # the floor: start the N copies ourselves
        children = [subprocess.Popen(prog, env=env, stdin=subprocess.DEVNULL) for _ in range(n)]
        codes = [c.wait() for c in children]
        code = max(codes)
        output = ""
    else:
        done = subprocess.run(command(n, prog), env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        code, output = done.returncode, done.stdout + done.stderr
    exited = time.time_ns()
    if code != 0:
        raise RuntimeError(f"exit {code}: {output[-2000:]}")
    with open(stamp_file) as f:
        stamps = [line.split(".") for line in f.read().split()]
    if len(stamps) != n:
        raise RuntimeError(f"expected {n} programs started, {len(stamps)} did: {output[-2000:]}")
    last = max(int(s) * 10**9 + int(ns.ljust(9, "0")[:9]) for s, ns in stamps)
    return (last - launched) / 1e9, (exited - launched) / 1e9


def interleave(found, sizes, reps, measure_one, bench):
    """{(launcher, n): [sample or None per repetition]}: every launcher of
    `found` measured by measure_one(command, n), interleaved within each
    repetition so that they share the host's state; a failure is printed
    and leaves None."""
    results = {}
    for n in sizes:
        for _ in range(reps):
            for name, command in found.items():
                try:
                    sample = measure_one(command, n)
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    print(f"{bench}: {name} N={n} failed: {error}", file=sys.stderr)
                    sample = None
                results.setdefault((name, n), []).append(sample)
    return results


def median(results, name, n, which):
    """The median of field `which` of the samples that did not fail."""
    samples = [s[which] for s in results.get((name, n), []) if s is not None]
    return statistics.median(samples) if samples else None


def ms(value):
    return f"{value * 1000:,.0f}" if value is not None else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drover", default="build/bin/drover")
    parser.add_argument("--baseline", help="a second drover binary, measured interleaved")
    parser.add_argument("--nodes", default="2,4,8")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--agent-a-node", action="store_true",
                        help="also `drover run --agents node`, an agent process a node")
    args = parser.parse_args()
    drover = os.path.abspath(args.drover)
    sizes = [int(n) for n in args.nodes.split(",")]
    env = clean_env()

    with tempfile.TemporaryDirectory(prefix="drover-startup-") as workdir:
        stamp_file = os.path.join(workdir, "started")
        baseline = os.path.abspath(args.baseline) if args.baseline else None
        found = launchers(drover, workdir, baseline, args.agent_a_node)
        # (launcher, n) -> [(start, exit)]
        results = interleave(found, sizes, args.reps,
                             lambda command, n: measure(command, n, stamp_file, env),
                             "startup_bench")

    def ratio(a, b):
        return f"{a / b:.2f}" if a is not None and b else "-"

    print(f"host: {os.uname().nodename}, {os.cpu_count()} CPUs; median of {args.reps}; "
          f"ms from launch (CLOCK_REALTIME)")
    print(f"{'launcher':<20} {'N':>3} {'last start':>11} {'exit':>9} "
          f"{'start x torchrun':>17} {'start x mpirun':>15}")
    for n in sizes:
        torch_start = median(results, "torchrun", n, 0)
        mpi_start = median(results, "mpirun", n, 0)
        for name in found:
            start, exit_ = median(results, name, n, 0), median(results, name, n, 1)
            print(f"{name:<20} {n:>3} {ms(start):>11} {ms(exit_):>9} "
                  f"{ratio(start, torch_start):>17} {ratio(start, mpi_start):>15}")
    failed = any(s is None for samples in results.values() for s in samples)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

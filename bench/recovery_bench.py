"""Recovery: from a node's death to every program running again in the next round.

usage: recovery_bench.py [--drover build/bin/drover] [--nodes 2,4] [--reps 3]

For N local nodes, the same program is started by
  drover run --nodes N --max-restarts 1 -- PROG
  torchrun --nnodes=M --nproc_per_node=N --max_restarts=1 --rdzv_backend=c10d
           --rdzv_endpoint=127.0.0.1:PORT --no_python PROG    (torch's elastic agent)
with M = 1:2 (elastic: after a failure it re-forms once the minimum is back,
waiting its last-call timeout, 30 s, for more nodes up to the maximum) and
M = 1 (a fixed size, which is what drover's --max-restarts does today).
PROG (a shell script) appends "start ROUND RANK TIME" to a file when it starts
(ROUND: DROVER_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT). In round 0 the
program of rank 1 waits until all N programs have started, appends "kill
TIME" and SIGKILLs itself; the others sleep until they are stopped. In round
1 every program exits 0. "recovery" is the last round-1 start minus the kill;
"exit" is when the launcher returned, from the kill. Both launchers detect
the death, stop the survivors, and start the whole group again (neither
keeps survivors running across a failure); torchrun with its defaults as a
user runs it (it checks its workers every --monitor_interval, 5 s in torch
1.13; --monitor_interval 0.1 is shown too). The launchers are interleaved
within each repetition; figures are medians, ratios are to torchrun in the
same run (to the elastic one and the fixed one). The host's own figures (memcpy, read(), fork+exec) come first.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_figures  # noqa: E402
from startup_bench import TORCHRUN_SHIM, clean_env, interleave, median, ms  # noqa: E402

PROGRAM = r"""#!/bin/sh
round=${DROVER_RESTART_COUNT:-${TORCHELASTIC_RESTART_COUNT:-0}}
echo "start $round $RANK $(date +%s.%N)" >> "$RECOVERY_LOG"
if [ "$round" = 0 ]; then
  if [ "$RANK" = 1 ]; then
    while [ "$(grep -c '^start 0 ' "$RECOVERY_LOG")" -lt "$RECOVERY_NODES" ]; do sleep 0.005; done
    echo "kill $(date +%s.%N)" >> "$RECOVERY_LOG"
    kill -9 $$
  fi
  exec sleep 600
fi
exit 0
"""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launchers(drover, workdir):
    def drover_run(n, prog):
        return [drover, "run", "--nodes", str(n), "--max-restarts", "1",
                "--log-dir", os.path.join(workdir, "logs"), "--", prog]

    def torchrun(nnodes, monitor_interval=None):
        def command(n, prog):
            extra = [] if monitor_interval is None else [f"--monitor_interval={monitor_interval}"]
            return ["/usr/bin/python3", "-c", TORCHRUN_SHIM, f"--nnodes={nnodes}",
                    f"--nproc_per_node={n}", "--max_restarts=1", "--rdzv_backend=c10d",
                    f"--rdzv_endpoint=127.0.0.1:{free_port()}", *extra, "--no_python", prog]
        return command

    found = {"drover run": drover_run}
    if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.run"],
                      capture_output=True).returncode == 0:
        found["torchrun 1:2 (elastic)"] = torchrun("1:2")
        found["torchrun 1"] = torchrun("1")
        found["torchrun 1, monitor 0.1 s"] = torchrun("1", 0.1)
    else:
        print("recovery_bench: no torch for /usr/bin/python3; torchrun left out",
              file=sys.stderr)
    return found


def measure(command, n, workdir, env):
    """Seconds from the kill to the last program of round 1 started, and to
    the launcher's exit."""
    log = os.path.join(workdir, "recovery.log")
    if os.path.exists(log):
        os.unlink(log)
    prog = os.path.join(workdir, "prog.sh")
    env = dict(env, RECOVERY_LOG=log, RECOVERY_NODES=str(n))
    done = subprocess.run(command(n, prog), env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)
    exited = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")
    with open(log) as f:
        lines = [line.split() for line in f]
    kills = [float(line[1]) for line in lines if line[0] == "kill"]
    again = [float(line[3]) for line in lines if line[0] == "start" and line[1] == "1"]
    if len(kills) != 1 or len(again) != n:
        raise RuntimeError(f"expected one kill and {n} restarts: {lines}")
    return max(again) - kills[0], exited - kills[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drover", default="build/bin/drover")
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    drover = os.path.abspath(args.drover)
    sizes = [int(n) for n in args.nodes.split(",")]
    env = clean_env()
    print(host_figures.host_line())
    print(host_figures.figures_line())

    with tempfile.TemporaryDirectory(prefix="drover-recovery-") as workdir:
        with open(os.path.join(workdir, "prog.sh"), "w") as f:
            f.write(PROGRAM)
        os.chmod(os.path.join(workdir, "prog.sh"), 0o755)
        found = launchers(drover, workdir)
        # (launcher, n) -> [(recovery, exit)]
        results = interleave(found, sizes, args.reps,
                             lambda command, n: measure(command, n, workdir, env),
                             "recovery_bench")

    print(f"median of {args.reps}; ms from the SIGKILL of rank 1")
    print(f"{'launcher':<28}{'N':>3}{'recovery':>10}{'exit':>10}"
          f"{'x torchrun 1:2':>16}{'x torchrun 1':>14}")
    for n in sizes:
        elastic = median(results, "torchrun 1:2 (elastic)", n, 0)
        fixed = median(results, "torchrun 1", n, 0)
        for name in found:
            recovery = median(results, name, n, 0)

            def ratio(base):
                return f"{recovery / base:.3f}" if recovery is not None and base else "-"
            print(f"{name:<28}{n:>3}{ms(recovery):>10}{ms(median(results, name, n, 1)):>10}"
                  f"{ratio(elastic):>16}{ratio(fixed):>14}")

if __name__ == "__main__":
    main()

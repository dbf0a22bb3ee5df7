"""Recovery: from a failure to every program running again in the next round.

usage: recovery_bench.py [--drover build/bin/drover] [--nodes 2,4] [--reps 3]
                         [--scenario program,node] [--launchers all|drover]

Two scenarios. "program": a node's program dies, its agent lives (below).
"node": a node's agent is SIGKILLed, as when its host dies, and the group
goes on without it: `drover run --nodes 1:N --max-restarts 1` (elastic; the
survivors' agents stay up) against N torchrun elastic agents started one by
one (`--nnodes=1:N --nproc_per_node=1 --max_restarts=1`, c10d on the first
one's port), with torchrun's defaults and tuned (`--rdzv_conf
last_call_timeout=1 --monitor_interval=0.1`). In round 0 the last node's
program waits until all N have started, appends "kill TIME" and SIGKILLs
its own agent; the survivors' programs exit 1 once they see the kill (as a
collective fails when a peer is gone: torchrun learns of the loss only so).
In round 1 the N-1 survivors exit 0. "recovery" is the last round-1 start
minus the kill.

The "program" scenario:

For N local nodes, the same program is started by
  drover run --nodes N --max-restarts 1 -- PROG
  torchrun --nnodes=M --nproc_per_node=N --max_restarts=1 --rdzv_backend=c10d
           --rdzv_endpoint=127.0.0.1:PORT --no_python PROG    (torch's elastic agent)
with M = 1:2 (elastic: after a failure it re-forms once the minimum is back,
waiting its last-call timeout, 30 s, for more nodes up to the maximum) and
M = 1 (a fixed size, as `drover run --nodes N --max-restarts 1` is).
PROG (a shell script) appends "start ROUND RANK TIME" to a file when it starts
(ROUND: DROVER_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT). In round 0 the
program of rank 1 waits until all N programs have started, appends "kill
TIME" and SIGKILLs itself; the others sleep until they are stopped. In round
1 every program exits 0. "recovery" is the last round-1 start minus the kill;
"exit" is when the launcher returned, from the kill. Every launcher detects
the death, stops the survivors, and starts the whole group again (none keeps
survivors running across a failure); `drover run --nodes N` starts every
agent again too, torchrun with its defaults as a
user runs it (it checks its workers every --monitor_interval, 5 s in torch
1.13; --monitor_interval 0.1 is shown too). `drover run --nodes N:N` (elastic
at a fixed size) keeps its agents up and restarts the programs in place, as
torchrun does. The launchers are interleaved
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


NODE_PROGRAM = r"""#!/bin/sh
round=${DROVER_RESTART_COUNT:-${TORCHELASTIC_RESTART_COUNT:-0}}
echo "start $round $RANK $(date +%s.%N)" >> "$RECOVERY_LOG"
if [ "$round" = 0 ]; then
  while [ "$(grep -c '^start 0 ' "$RECOVERY_LOG")" -lt "$RECOVERY_NODES" ]; do sleep 0.005; done
  if [ "${RECOVERY_VICTIM:-}" = 1 ] || [ "$RANK" = "${RECOVERY_VICTIM_RANK:-none}" ]; then
    # The node's agent: drover's is the guard's parent, torchrun's the program's.
    agent=$PPID
    [ -n "${DROVER_RESTART_COUNT:-}" ] && agent=$(ps -o ppid= -p $PPID | tr -d ' ')
    echo "kill $(date +%s.%N)" >> "$RECOVERY_LOG"
    kill -9 "$agent"
    exit 0
  fi
  while ! grep -q '^kill ' "$RECOVERY_LOG"; do sleep 0.005; done
  exit 1
fi
exit 0
"""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_torchrun(wanted):
    """Whether to run the torchrun rows: asked for, and torch importable."""
    if not wanted:
        return False
    if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.run"],
                      capture_output=True).returncode == 0:
        return True
    print("recovery_bench: no torch for /usr/bin/python3; torchrun left out", file=sys.stderr)
    return False


def launchers(drover, workdir, torchrun_rows):
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

    def drover_in_place(n, prog):
        # Elastic with a fixed size: the agents stay up and restart the
        # programs in place.
        return [drover, "run", "--nodes", f"{n}:{n}", "--max-restarts", "1",
                "--log-dir", os.path.join(workdir, "logs"), "--", prog]

    found = {"drover run": drover_run, "drover run N:N (in place)": drover_in_place}
    if torchrun_rows:
        found["torchrun 1:2 (elastic)"] = torchrun("1:2")
        found["torchrun 1"] = torchrun("1")
        found["torchrun 1, monitor 0.1 s"] = torchrun("1", 0.1)
    return found


def node_launchers(drover, workdir, torchrun_rows):
    """name -> measure(n) for the node scenario."""
    def drover_elastic(n, env):
        command = [drover, "run", "--nodes", f"1:{n}", "--max-restarts", "1",
                   "--log-dir", os.path.join(workdir, "logs"), "--", node_program(workdir)]
        done = subprocess.run(command, env=dict(env, RECOVERY_VICTIM_RANK=str(n - 1)),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")

    def torchrun_agents(extra):
        def run(n, env):
            port = free_port()
            agents = []
            try:
                for i in range(n):
                    agent_env = dict(env, RECOVERY_VICTIM="1") if i == n - 1 else env
                    agents.append(subprocess.Popen(
                        ["/usr/bin/python3", "-c", TORCHRUN_SHIM, f"--nnodes=1:{n}",
                         "--nproc_per_node=1", "--max_restarts=1", "--rdzv_backend=c10d",
                         f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=recovery", *extra,
                         "--no_python", node_program(workdir)],
                        env=agent_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True))
                    if i == 0:
                        wait_listening(port)  # the first agent hosts the c10d store
                codes = [agent.wait(timeout=300) for agent in agents]
            finally:
                for agent in agents:
                    agent.kill()
            if any(code != 0 for code in codes[:-1]):
                raise RuntimeError(f"torchrun agents exited {codes}: "
                                   f"{agents[0].stderr.read()[-2000:]}")
        return run

    found = {"drover run 1:N (elastic)": drover_elastic}
    if torchrun_rows:
        found["torchrun 1:N agents"] = torchrun_agents([])
        found["torchrun 1:N, tuned"] = torchrun_agents(
            ["--rdzv_conf=last_call_timeout=1", "--monitor_interval=0.1"])
    return found


def node_program(workdir):
    return os.path.join(workdir, "node.sh")


def wait_listening(port):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.01)
    raise RuntimeError(f"nothing listens on {port}")


def measure_node(run, n, workdir, env):
    """Seconds from the agent's SIGKILL to the last survivor of round 1 started."""
    log = os.path.join(workdir, "recovery.log")
    if os.path.exists(log):
        os.unlink(log)
    run(n, dict(env, RECOVERY_LOG=log, RECOVERY_NODES=str(n)))
    exited = time.time()
    with open(log) as f:
        lines = [line.split() for line in f]
    kills = [float(line[1]) for line in lines if line[0] == "kill"]
    # The survivors' first round after the kill. drover's may be round 2: a
    # survivor's exit 1 seen before the node's loss re-forms the group once
    # for the failure (round 1, no program started) and once for the loss.
    restarts = [(int(line[1]), float(line[3])) for line in lines
                if line[0] == "start" and line[1] != "0"]
    first = min((round_ for round_, _ in restarts), default=None)
    again = [at for round_, at in restarts if round_ == first]
    if len(kills) != 1 or len(again) != n - 1:
        raise RuntimeError(f"expected one kill and {n - 1} restarts: {lines}")
    return max(again) - kills[0], exited - kills[0]


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
    parser.add_argument("--scenario", default="program,node",
                        help="program (a program dies), node (an agent dies), or both")
    parser.add_argument("--launchers", choices=("all", "drover"), default="all",
                        help="drover: leave torchrun out (its rows take minutes; the ratios "
                             "then print -)")
    args = parser.parse_args()
    drover = os.path.abspath(args.drover)
    sizes = [int(n) for n in args.nodes.split(",")]
    env = clean_env()
    print(host_figures.host_line())
    print(host_figures.figures_line())

    scenarios = args.scenario.split(",")
    torchrun_rows = with_torchrun(args.launchers == "all")
    with tempfile.TemporaryDirectory(prefix="drover-recovery-") as workdir:
        for name, text in (("prog.sh", PROGRAM), ("node.sh", NODE_PROGRAM)):
            with open(os.path.join(workdir, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(workdir, name), 0o755)
        if "program" in scenarios:
            found = launchers(drover, workdir, torchrun_rows)
            # (launcher, n) -> [(recovery, exit)]
            results = interleave(found, sizes, args.reps,
                                 lambda command, n: measure(command, n, workdir, env),
                                 "recovery_bench")
            print_table(f"program lost: median of {args.reps}; ms from the SIGKILL of rank 1's "
                        "program", found, results, sizes,
                        {"torchrun 1:2 (elastic)": "x torchrun 1:2", "torchrun 1": "x torchrun 1"})
        if "node" in scenarios:
            found = node_launchers(drover, workdir, torchrun_rows)
            results = interleave(found, sizes, args.reps,
                                 lambda run, n: measure_node(run, n, workdir, env),
                                 "recovery_bench")
            print_table(f"node lost: median of {args.reps}; ms from the SIGKILL of the last "
                        "node's agent to the N-1 survivors running again", found, results, sizes,
                        {"torchrun 1:N agents": "x torchrun 1:N", "torchrun 1:N, tuned": "x tuned"})


def print_table(title, found, results, sizes, baselines):
    """One row per launcher and N: recovery and exit in ms, and recovery as
    a ratio to each baseline launcher (name -> column heading), same run."""
    print(title)
    print(f"{'launcher':<28}{'N':>3}{'recovery':>10}{'exit':>10}" +
          "".join(f"{heading:>16}" for heading in baselines.values()))
    for n in sizes:
        bases = [median(results, name, n, 0) for name in baselines]
        for name in found:
            recovery = median(results, name, n, 0)
            ratios = [f"{recovery / base:.3f}" if recovery is not None and base else "-"
                      for base in bases]
            print(f"{name:<28}{n:>3}{ms(recovery):>10}{ms(median(results, name, n, 1)):>10}" +
                  "".join(f"{r:>16}" for r in ratios))


if __name__ == "__main__":
    main()

"""Start-up time over SSH: from the launch command to every program started on
three SSH hosts (network namespaces with their own sshd, scripts/ssh-hosts/up.sh;
needs root).

usage: ssh_startup_bench.py [--drover build/bin/drover] [--per-host 1,2] [--reps 5]

For N = 3 x per-host nodes it runs the trivial program of startup_bench.py
(`sh -c 'date +%s.%N >> FILE'`; the hosts share this machine's filesystem) with
  drover run --engine ssh -H h1:K,h2:K,h3:K -- PROG            (pre-flight, then agents)
  drover run --engine ssh ... --no-preflight -- PROG
  drover run --engine ssh ... --no-preflight --agents node -- PROG  (an agent and an
      ssh a node, where the default is one agent and one ssh a host)
and the baseline: a plain parallel ssh fan-out, one `ssh HOST PROG` per node
started at once (what AutoDist's SSHCluster and pdsh do), through the same
ssh_config. Each figure is the median of --reps runs, interleaved; the ratio
compares drover with the fan-out measured in the same run.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_figures  # noqa: E402
from startup_bench import clean_env, measure  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SSH_CONFIG = "/tmp/ssh-ci/ssh_config"
HOSTS = ["h1", "h2", "h3"]


def launchers(drover, workdir, per_host):
    hosts = ",".join("%s:%d" % (h, per_host) for h in HOSTS)

    def drover_run(extra):
        def command(n, prog):
            return [drover, "run", "--engine", "ssh", "-H", hosts, "--ssh-config", SSH_CONFIG,
                    "--log-dir", os.path.join(workdir, "logs"), *extra, "--"] + prog
        return command

    def fan_out(n, prog):
        remote = shlex.quote(shlex.join(prog))
        each = " ".join("ssh -F %s %s %s &" % (SSH_CONFIG, h, remote)
                        for h in HOSTS for _ in range(per_host))
        return ["sh", "-c", each + " wait"]

    return {"drover ssh": drover_run([]),
            "drover ssh, no pre-flight": drover_run(["--no-preflight"]),
            "drover ssh, agent a node": drover_run(["--no-preflight", "--agents", "node"]),
            "ssh fan-out": fan_out}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drover", default="build/bin/drover")
    parser.add_argument("--per-host", default="1,2")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    drover = os.path.abspath(args.drover)
    subprocess.run(["bash", os.path.join(REPO, "scripts", "ssh-hosts", "up.sh")], check=True,
                   env=dict(os.environ, HOSTS="3", SSH_CI_MASK_RC="1"), stdout=subprocess.DEVNULL)
    env = clean_env()
    print(host_figures.host_line())
    print(host_figures.figures_line(), flush=True)
    sizes = [int(k) for k in args.per_host.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="drover-ssh-startup-") as workdir:
        stamp_file = os.path.join(workdir, "started")
        for k in sizes:
            found = launchers(drover, workdir, k)
            for _ in range(args.reps):
                for name, command in found.items():
                    try:
                        sample = measure(command, 3 * k, stamp_file, env)
                    except (RuntimeError, subprocess.TimeoutExpired) as error:
                        print(f"ssh_startup_bench: {name} N={3 * k} failed: {error}",
                              file=sys.stderr)
                        sample = None
                    results.setdefault((name, k), []).append(sample)

    def median(name, k, which):
        samples = [s[which] for s in results.get((name, k), []) if s is not None]
        return statistics.median(samples) if samples else None

    print(f"host: {os.uname().nodename}, {os.cpu_count()} CPUs; 3 sshd hosts in network "
          f"namespaces; median of {args.reps}; ms from launch")
    print(f"{'launcher':<26} {'N':>3} {'last start':>11} {'exit':>9} {'start x fan-out':>16}")
    for k in sizes:
        base = median("ssh fan-out", k, 0)
        for name in ("drover ssh", "drover ssh, no pre-flight", "drover ssh, agent a node",
                     "ssh fan-out"):
            start, exit_ = median(name, k, 0), median(name, k, 1)
            show = (lambda v: f"{v * 1000:,.0f}" if v is not None else "-")
            ratio = f"{start / base:.2f}" if start is not None and base else "-"
            print(f"{name:<26} {3 * k:>3} {show(start):>11} {show(exit_):>9} {ratio:>16}")
    return 1 if any(s is None for v in results.values() for s in v) else 0


if __name__ == "__main__":
    sys.exit(main())

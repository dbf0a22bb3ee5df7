"""Footprint of a launcher while its programs sit idle: memory (PSS, private,
RSS) and CPU ticks of each of its own processes over an idle window.

usage: footprint_bench.py [--drover build/bin/drover] [--nodes 8] [--window 20]

For N local nodes it starts N copies of `sleep`, which do nothing, with
  drover run --nodes N -- sleep T           (one agent for every node; "drover")
  drover run --nodes N --agents node -- ...  (an agent a node; "drover/n")
  mpirun --oversubscribe -np N sleep T
  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=N --no_python sleep T
one launcher at a time. Once all N `sleep`s run and a settling second has
passed, it reads utime+stime (/proc/PID/stat) of every process under the
launcher, waits --window seconds, reads them again, and reads each process's
/proc/PID/smaps_rollup: Pss, Private_Clean + Private_Dirty, Rss. Beside the
sampled ticks, each thread's exact CPU time (/proc/PID/task/TID/schedstat) and
context switches (about one per wakeup) over the same window. Then it
stops the launcher (SIGINT, as a user's ^C).

The baselines come from the same run: the `sleep` programs themselves (the
smallest process there is: PSS and private memory x sleep), and mpirun and
torchrun supervising the same N programs (the launcher's total PSS and CPU
ticks x theirs). mpirun on one host is one process that forks every program
(on a real cluster, one orted per host does); torchrun is one Python process.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_figures  # noqa: E402
from startup_bench import TORCHRUN_SHIM, clean_env  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PROGRAM = "sleep"


def proc_stat(pid):
    """(ppid, comm, utime + stime in ticks) of `pid`, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), comm, int(fields[11]) + int(fields[12])


def threads_cpu(pid):
    """(ns on a CPU, context switches) summed over the threads of `pid`: exact,
    where ticks are sampled at CLK_TCK; a switch is the thread going to sleep
    or being preempted, so about one per wakeup."""
    ns = switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended
    return ns, switches


def descendants(root):
    """pids of the processes under `root` (root included)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry))
    found, unvisited = [], [root]
    while unvisited:
        pid = unvisited.pop()
        found.append(pid)
        unvisited.extend(children.get(pid, []))
    return found


def argv(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def memory_kb(pid):
    """{'pss', 'private', 'rss'} in kB from smaps_rollup."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                values[parts[0].rstrip(":")] = int(parts[1])
    return {"pss": values["Pss"], "rss": values["Rss"],
            "private": values["Private_Clean"] + values["Private_Dirty"]}


def role(launcher, pid, root):
    """What a process under a launcher is: a row of the table."""
    args = argv(pid)
    name = os.path.basename(args[0]) if args else ""
    if name == PROGRAM:
        return "program (sleep)"
    if launcher.startswith("drover"):
        sub = args[1] if len(args) > 1 else ""
        return {"run": "driver (drover run)", "agent": "agent", "guard": "guard",
                "janitor": "janitor"}.get(sub, "other: " + " ".join(args[:2]))
    if launcher == "mpirun":
        return "mpirun" if pid == root else name
    if launcher == "torchrun":
        return "torchrun agent" if pid == root else name
    return name


def launchers(drover, workdir):
    def drover_run(n, prog, agents="host"):
        return [drover, "run", "--nodes", str(n), "--agents", agents, "--log-dir",
                os.path.join(workdir, "logs"), "--progress", "off", "--"] + prog

    def drover_node_agents(n, prog):
        return drover_run(n, prog, agents="node")

    def mpirun(n, prog):
        return ["mpirun", "--oversubscribe", "-np", str(n)] + prog

    def torchrun(n, prog):
        return ["/usr/bin/python3", "-c", TORCHRUN_SHIM, "--standalone",
                f"--nproc_per_node={n}", "--no_python"] + prog

    found = {"drover": drover_run, "drover/n": drover_node_agents}
    if shutil.which("mpirun"):
        found["mpirun"] = mpirun
    else:
        print("footprint_bench: no mpirun; left out", file=sys.stderr)
    if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.run"],
                      capture_output=True).returncode == 0:
        found["torchrun"] = torchrun
    else:
        print("footprint_bench: no torch for /usr/bin/python3; torchrun left out",
              file=sys.stderr)
    return found


def measure(name, command, n, window, env):
    """{role: [{'pss', 'private', 'rss', 'ticks'}]} for one launcher at N."""
    prog = [PROGRAM, str(int(window) + 120)]
    proc = subprocess.Popen(command(n, prog), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            pids = descendants(proc.pid)
            if sum(role(name, p, proc.pid) == "program (sleep)" for p in pids) >= n:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} N={n}: {n} programs did not start: "
                                   f"{proc.stderr.read().decode()[-2000:] if proc.poll() else ''}")
            time.sleep(0.05)
        time.sleep(1.0)  # let start-up work (first heartbeats, status page) settle
        pids = descendants(proc.pid)
        before = {p: proc_stat(p) for p in pids}
        before_cpu = {p: threads_cpu(p) for p in pids}
        time.sleep(window)
        rows = {}
        for pid in pids:
            after = proc_stat(pid)
            if after is None or before[pid] is None:
                raise RuntimeError(f"{name} N={n}: process {pid} ended during the window")
            sample = memory_kb(pid)
            sample["ticks"] = after[2] - before[pid][2]
            ns, switches = threads_cpu(pid)
            sample["cpu_ms"] = (ns - before_cpu[pid][0]) / 1e6
            sample["switches"] = switches - before_cpu[pid][1]
            rows.setdefault(role(name, pid, proc.pid), []).append(sample)
        return rows
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.stderr.close()


def mean(samples, key):
    return sum(s[key] for s in samples) / len(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drover", default="build/bin/drover")
    parser.add_argument("--nodes", default="8")
    parser.add_argument("--window", type=float, default=20.0, help="idle seconds measured")
    args = parser.parse_args()
    drover = os.path.abspath(args.drover)
    sizes = [int(n) for n in args.nodes.split(",")]
    env = clean_env()

    print(host_figures.host_line())
    print(host_figures.figures_line())
    print(f"idle window {args.window:g} s after all programs started; {CLK_TCK} ticks/s; "
          f"memory (kB) at the window's end, mean per process; ticks summed over the "
          f"processes of a row; ticks/min, CPU ms/min (schedstat) and wakeups/min (context "
          f"switches) per process")
    failed = False
    with tempfile.TemporaryDirectory(prefix="drover-footprint-") as workdir:
        found = launchers(drover, workdir)
        for n in sizes:
            results = {}
            for name, command in found.items():
                try:
                    results[name] = measure(name, command, n, args.window, env)
                except RuntimeError as error:
                    print(f"footprint_bench: {error}", file=sys.stderr)
                    failed = True
            report(n, args.window, results)
    return 1 if failed else 0


def report(n, window, results):
    programs = [s for rows in results.values() for s in rows.get("program (sleep)", [])]
    sleep_pss = mean(programs, "pss") if programs else None
    sleep_private = mean(programs, "private") if programs else None

    def ratio(a, b):
        return f"{a / b:,.1f}" if b else "-"

    print()
    print(f"N = {n}")
    print(f"{'launcher':<9} {'process':<20} {'count':>5} {'PSS':>7} {'private':>8} {'RSS':>7} "
          f"{'ticks':>6} {'ticks/min':>9} {'cpu ms/min':>10} {'wakes/min':>9} "
          f"{'PSS x sleep':>11} {'priv x sleep':>12}")
    totals = {}
    for name, rows in results.items():
        total = {"pss": 0, "private": 0, "ticks": 0}
        order = sorted(rows, key=lambda r: (r.startswith("program"), r))
        for row in order:
            samples = rows[row]
            pss, private, rss = (mean(samples, k) for k in ("pss", "private", "rss"))
            ticks = sum(s["ticks"] for s in samples)
            per_min = 60 / window / len(samples)
            cpu_ms = sum(s["cpu_ms"] for s in samples) * per_min
            wakes = sum(s["switches"] for s in samples) * per_min
            if not row.startswith("program"):
                total["pss"] += sum(s["pss"] for s in samples)
                total["private"] += sum(s["private"] for s in samples)
                total["ticks"] += ticks
            print(f"{name:<9} {row:<20} {len(samples):>5} {pss:>7,.0f} {private:>8,.0f} "
                  f"{rss:>7,.0f} {ticks:>6} {ticks * per_min:>9.1f} {cpu_ms:>10.1f} {wakes:>9,.0f} "
                  f"{ratio(pss, sleep_pss):>11} {ratio(private, sleep_private):>12}")
        totals[name] = total
    print(f"{'launcher':<9} {'all but programs':<20} {'PSS':>7} {'private':>8} "
          f"{'ticks/min':>9} {'PSS/node':>9} {'PSS x mpirun':>12} {'PSS x torchrun':>14}")
    mpi, torch = totals.get("mpirun"), totals.get("torchrun")
    for name, total in totals.items():
        print(f"{name:<9} {'':<20} {total['pss']:>7,} {total['private']:>8,} "
              f"{total['ticks'] * 60 / window:>9.1f} {total['pss'] / n:>9,.0f} "
              f"{ratio(total['pss'], mpi and mpi['pss']):>12} "
              f"{ratio(total['pss'], torch and torch['pss']):>14}")


if __name__ == "__main__":
    sys.exit(main())

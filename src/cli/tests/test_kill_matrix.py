"""Nothing left behind, whichever drover process dies, however, whenever (issue #15).

Each cell runs `drover run --nodes 2 --input ...` whose program starts a
grandchild in its process group and a descendant in a session of its own
(`setsid`), then reads its feed slowly and, on SIGTERM, drains for a second.
At a point of progress (never after a fixed time) the test sends SIGKILL or
SIGTERM to one process of executor 1 (its agent, the program's guard, its
feeder, the program) or to the driver:

- formed:   before the cluster formed (executor 1's agent is never started,
            so the rendezvous waits; only the driver and agent 0 exist);
- feeding:  once executor 1's program has read records;
- shutdown: after SIGINT to the driver, once executor 1's program prints
            that it is draining.

Every cell must end with no process left that carries the cell's marker (in
its environment or command line) and no file left in /tmp by drover.

Cells run with the default `--agents host` (one agent for both nodes, so
killing "the agent" stops both); the node-agent cells (`--agents node`) are
the feeding row again. By default a short matrix runs (the whole feeding
row, SIGKILL of the agent and the driver in the other phases, and SIGKILL of
the driver and of the agent with an agent a node); DROVER_KILL_MATRIX=full
runs every cell in both shapes.
The test is RUN_SERIAL in ctest: it compares /tmp before and after.
"""
import glob
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest

from conftest import clean_env, drover_bin

FEED_READER = os.environ.get("DROVER_FEED_READER") or os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "build", "bin", "feed_reader")
GRACE = 3
# A hang detector, not a timing assertion: far above any cell's real length.
RUN_LIMIT = 180
MARK_VARIABLE = "KILL_MATRIX_MARK"

KINDS = ["driver", "agent", "guard", "feeder", "program"]
SIGNALS = [signal.SIGKILL, signal.SIGTERM]
PHASES = ["formed", "feeding", "shutdown"]
SHORT = {(kind, sig, "feeding") for kind in KINDS for sig in SIGNALS} | {
    ("agent", signal.SIGKILL, "formed"), ("driver", signal.SIGKILL, "formed"),
    ("agent", signal.SIGKILL, "shutdown"), ("driver", signal.SIGKILL, "shutdown"),
    ("guard", signal.SIGKILL, "shutdown")}
SHORT_NODE_AGENTS = {("driver", signal.SIGKILL, "feeding"), ("agent", signal.SIGKILL, "feeding")}


def cells():
    full = os.environ.get("DROVER_KILL_MATRIX") == "full"
    for phase in PHASES:
        for kind in KINDS:
            # Before the cluster forms there is no program yet, so no guard
            # and no feeder either.
            if phase == "formed" and kind not in ("driver", "agent"):
                continue
            for sig in SIGNALS:
                name = f"{kind}-{signal.Signals(sig).name}-{phase}"
                if full or (kind, sig, phase) in SHORT:
                    yield pytest.param(kind, sig, phase, "host", id=name)
                if full or (kind, sig, phase) in SHORT_NODE_AGENTS:
                    yield pytest.param(kind, sig, phase, "node", id=name + "-node-agents")


# The node's program: a grandchild in its group, a descendant that escapes
# the group and the session, a slow reader of the feed, and a drain on TERM.
PROGRAM = r'''
trap 'echo draining; sleep 1; exit 0' TERM
sleep 300 &
setsid sleep 300 &
echo started
"$0" --out seen --batch 50 --sleep-us 20000 &
wait $!
echo fed
'''


def marked(mark):
    """Pids of the processes whose environment or command line carries `mark`."""
    found = []
    needle = mark.encode()
    for proc in glob.glob("/proc/[0-9]*"):
        pid = int(proc.rsplit("/", 1)[1])
        if pid == os.getpid():
            continue
        try:
            with open(proc + "/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # dead, only not reaped yet
            with open(proc + "/environ", "rb") as f:
                environ = f.read()
            with open(proc + "/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in environ or needle in cmdline:
            found.append(pid)
    return found


def describe(pids):
    if not pids:
        return ""
    return subprocess.run(["ps", "-o", "pid,ppid,pgid,sid,stat,args", "-p",
                           ",".join(map(str, pids))], capture_output=True, text=True).stdout


def drover_tmp_entries(driver_pid=None):
    """drover's entries in /tmp; the live-runs directory itself is shared.
    With `driver_pid`, of the live-run files (named by their driver's pid)
    only that driver's: a drover run elsewhere on the host (a developer's
    test beside this one) writes its own."""
    entries = set(glob.glob("/tmp/drover-*"))
    live = f"/tmp/drover-{os.getuid()}"
    entries.discard(live)
    for path in glob.glob(live + "/*.json"):
        if driver_pid is None or os.path.basename(path) == f"{driver_pid}.json":
            entries.add(path)
    return entries


def children(pid):
    """The children of every thread of `pid` (a feeder is its loop thread's)."""
    found = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(task) as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def executor_of(pid, argv):
    """The executor a guard (its environment) or a feeder (--task worker:N) serves."""
    if b"--task" in argv:
        return argv[argv.index(b"--task") + 1].split(b":")[-1].decode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(b"DROVER_EXECUTOR_ID="):
                    return entry.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return None


class Run:
    """One `drover run` of a cell, with its output collected as it comes."""

    def __init__(self, tmp_path, mark, skip_agent, agents):
        with open(tmp_path / "data.csv", "w") as f:
            for i in range(20000):
                f.write(f"{i},payload-{i}\n")
        env = {MARK_VARIABLE: mark}
        if skip_agent:
            env["DROVER_TEST_SKIP_AGENT"] = "1"
        self.proc = subprocess.Popen(
            [drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "2",
             "--grace", str(GRACE), "--agents", agents, "--input", str(tmp_path / "data.csv"),
             "--split-bytes", "8000", "--queue-bytes", "65536", "--progress", "off", "--",
             "sh", "-c", PROGRAM, FEED_READER],
            env=clean_env(**env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=tmp_path)
        self.out = []
        self.err = []
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out)),
                        threading.Thread(target=self._read, args=(self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, lines):
        for line in iter(stream.readline, b""):
            lines.append(line.decode(errors="replace"))

    def text(self):
        return "".join(self.out) + "".join(self.err)

    def wait_for(self, what, condition, limit=120):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if condition():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"drover run ended while waiting for {what}:\n{self.text()}")
            time.sleep(0.02)
        raise AssertionError(f"no {what} within {limit} s:\n{self.text()}")

    def cluster(self):
        url = next((line.split("status page ", 1)[1].split()[0] for line in self.err
                    if "status page http" in line), None)
        if url is None:
            return None
        try:
            with urllib.request.urlopen(url + "api/cluster", timeout=5) as reply:
                return json.load(reply)
        except OSError:
            return None

    def node(self, executor):
        cluster = self.cluster() or {}
        return next((n for n in cluster.get("nodes", []) if n["executor_id"] == executor), None)

    def agent_pid(self, executor):
        """Executor's agent: its own (--executor-id), or the host's agent that runs it (--node)."""
        for pid in children(self.proc.pid):
            argv = cmdline(pid)
            if b"agent" not in argv:
                continue
            if b"--executor-id" in argv and argv[argv.index(b"--executor-id") + 1] == \
                    executor.encode():
                return pid
            nodes = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == b"--node"]
            if any(node.split(b":")[0] == executor.encode() for node in nodes):
                return pid
        return None

    def child_of_agent(self, executor, word):
        """Executor's guard or feeder (a host's agent has every node's)."""
        agent = self.agent_pid(executor)
        for pid in children(agent) if agent else []:
            argv = cmdline(pid)
            if len(argv) > 1 and argv[1] == word and executor_of(pid, argv) == executor:
                return pid
        return None

    def finish(self):
        try:
            self.proc.wait(timeout=RUN_LIMIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for reader in self.readers:
                reader.join(timeout=30)
        return self.proc.returncode


def victim(run, kind):
    if kind == "driver":
        return run.proc.pid
    if kind == "agent":
        return run.agent_pid("1") or run.agent_pid("0")
    if kind == "guard":
        return run.child_of_agent("1", b"guard")
    if kind == "feeder":
        return run.child_of_agent("1", b"feeder")
    node = run.node("1")
    return node and node.get("program_pid")


@pytest.mark.parametrize("kind,sig,phase,agents", list(cells()))
def test_nothing_is_left_behind(tmp_path, kind, sig, phase, agents):
    mark = "kill-matrix-" + uuid.uuid4().hex[:12]
    tmp_before = drover_tmp_entries()
    run = Run(tmp_path, mark, skip_agent=phase == "formed", agents=agents)
    try:
        if phase == "formed":
            run.wait_for("executor 0 registered", lambda: (run.cluster() or {}).get(
                "rendezvous", {}).get("registered", 0) == 1)
        else:
            run.wait_for("records read by executor 1", lambda: ((run.node("1") or {}).get(
                "feed") or {}).get("records", 0) > 0)
            run.wait_for("executor 1's descendants", lambda: "[worker:1] started\n" in run.out)
        if phase == "shutdown":
            run.proc.send_signal(signal.SIGINT)
            run.wait_for("executor 1 draining", lambda: "[worker:1] draining\n" in run.out)
        pid = victim(run, kind)
        assert pid, f"no {kind} of executor 1 to kill:\n{describe(marked(mark))}"
        os.kill(pid, sig)
        code = run.finish()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.finish()
    if kind == "driver" and phase != "shutdown":
        assert code == (-sig if sig == signal.SIGKILL else 128 + sig), run.text()
    if kind == "program" and sig == signal.SIGKILL and phase == "feeding":
        assert code == 1 and "worker:1 (executor 1) failed" in run.text(), run.text()
    if kind == "feeder" and phase == "feeding":
        assert code == 0 and "resuming" in run.text(), run.text()
    # Every process of the run ends within its grace time (and the agents'
    # slack); a generous bound, the cell fails only if something is left.
    deadline = time.monotonic() + 3 * GRACE + 10
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = marked(mark)
    assert not left, f"left behind:\n{describe(left)}\n{run.text()}"
    # The janitor and the guards may still be removing files for a moment.
    deadline = time.monotonic() + 10
    driver = run.proc.pid
    while drover_tmp_entries(driver) - tmp_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not drover_tmp_entries(driver) - tmp_before, run.text()

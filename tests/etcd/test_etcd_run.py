"""Nodes that form through a real etcd (3 members on loopback, started here
from Debian's etcd-server), with no `drover run` anywhere: `drover agent
--rendezvous etcd://.../RUN --nodes MIN:MAX` on each "host". The main job
trains through it; an etcd member dies and nothing changes; two die and the
nodes say so and stop; an agent dies and the rest form again; a late agent
joins. Every wait is for something the run did (a file a program wrote, a
process that exited), never for the clock."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_util import MARK_VARIABLE, assert_no_leftovers, new_mark  # noqa: E402
from etcd_cluster import EtcdCluster, TlsFiles  # noqa: E402

DROVER = os.path.abspath(os.environ.get("DROVER_BIN", str(REPO / "build" / "bin" / "drover")))
TRAIN = REPO / "examples" / "digits" / "train.py"
PYTHON = "/usr/bin/python3"
WAIT_S = 180  # bounds a broken run; nothing below measures time

# Each rank writes <dir>/r<round>-<rank> (its world size and its agent's
# pid), then waits for <dir>/done. With <dir>/fail, rank 0 exits 3.
PROGRAM = r'''
d="$1"
agent=$(ps -o ppid= -p $PPID | tr -d ' ')
echo "$WORLD_SIZE $agent" > "$d/r$DROVER_RESTART_COUNT-$RANK.tmp"
mv "$d/r$DROVER_RESTART_COUNT-$RANK.tmp" "$d/r$DROVER_RESTART_COUNT-$RANK"
if [ -f "$d/fail" ] && [ "$RANK" = 0 ]; then exit 3; fi
while [ ! -f "$d/done" ]; do sleep 0.05; done
echo "rank=$RANK done"
'''


def clean_env(mark, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE",
                                "LOCAL_", "GROUP_", "OMPI_", "SLURM_"))}
    env[MARK_VARIABLE] = mark
    env.update(extra)
    return env


@pytest.fixture
def etcd(tmp_path):
    with EtcdCluster(tmp_path / "etcd", members=3) as cluster:
        yield cluster


@pytest.fixture
def mark():
    value = new_mark()
    yield value
    assert_no_leftovers(value)


class Agents:
    """`drover agent` processes started by hand, each with its own log."""

    def __init__(self, tmp_path, mark, address):
        self.tmp_path, self.mark, self.address = tmp_path, mark, address
        self.procs = {}

    def start(self, executor, *args, command):
        log = open(self.tmp_path / f"agent-{executor}.log", "w")
        self.procs[executor] = subprocess.Popen(
            [DROVER, "agent", "--rendezvous", self.address, "--executor-id", executor,
             "--host", "127.0.0.1", "--grace", "2", *args, "--", *command],
            env=clean_env(self.mark), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        return self.procs[executor]

    def log(self, executor):
        return (self.tmp_path / f"agent-{executor}.log").read_text()

    def wait(self, executor):
        try:
            return self.procs[executor].wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"agent {executor} still running; its log:\n" +
                                 self.log(executor))

    def kill_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def agents(tmp_path, mark, etcd):
    made = []

    def make(run):
        made.append(Agents(tmp_path, mark, etcd.address(run)))
        return made[-1]

    yield make
    for each in made:
        each.kill_all()


def wait_for(condition, what, procs=()):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"an agent exited ({proc.returncode}) while waiting for "
                                     + what)
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def round_files(directory, number):
    """rank -> (world size, agent pid) of the programs of round `number`."""
    found = {}
    for path in directory.glob(f"r{number}-*"):
        if not path.name.endswith(".tmp"):
            world, agent = path.read_text().split()
            found[int(path.name.split("-")[1])] = (int(world), int(agent))
    return found


def shell_program(work):
    return ["sh", "-c", PROGRAM, "etcd-test", str(work)]


def until_files_exist(*paths, tenths):
    """A shell loop that waits until every path exists, at most `tenths`
    tenths of a second (a hang detector: the test fails on what is missing)."""
    missing = " || ".join(f"[ ! -e {path} ]" for path in paths)
    return (f"i=0; while {{ {missing}; }} && [ $i -lt {tenths} ]; do sleep 0.1; "
            "i=$((i+1)); done")


def drover_status(address):
    return subprocess.run([DROVER, "status", address], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_three_agents_without_a_driver_train_digits(tmp_path, agents, etcd):
    for module in ("torch", "sklearn"):
        if subprocess.run([PYTHON, "-c", f"import {module}"]).returncode != 0:
            pytest.fail(f"{PYTHON} cannot import {module}: scripts/deps.sh installs it")
    run = agents("digits")
    model_dir = tmp_path / "model"
    for i in range(3):
        run.start(str(i), "--nodes", "3",
                  command=[PYTHON, str(TRAIN), "--epochs", "15", "--model-dir", str(model_dir)])
    codes = [run.wait(str(i)) for i in range(3)]
    logs = "\n".join(run.log(str(i)) for i in range(3))
    assert codes == [0, 0, 0], logs
    accuracy = [float(line.split()[-1]) for line in logs.splitlines()
                if line.startswith("test accuracy:")]
    assert accuracy and accuracy[0] >= 0.95, logs
    assert (model_dir / "digits_mlp.pt").exists()
    status = drover_status(etcd.address("digits"))
    assert status.returncode == 0, status.stderr
    assert "stopped" in status.stdout and "every node's program finished" in status.stdout


def test_an_etcd_member_killed_mid_run_changes_nothing(tmp_path, agents, etcd):
    work = tmp_path / "work"
    work.mkdir()
    run = agents("one-member")
    procs = [run.start(str(i), "--nodes", "2", command=shell_program(work)) for i in range(2)]
    wait_for(lambda: len(round_files(work, 0)) == 2, "both ranks of round 0", procs)
    etcd.kill(0)  # the first endpoint every node talks to
    (work / "done").touch()
    assert [run.wait(str(i)) for i in range(2)] == [0, 0], run.log("0") + run.log("1")
    assert not list(work.glob("r1-*")), "a member's death must not re-form the nodes"


def test_a_lost_quorum_stops_the_nodes_with_a_clear_error(tmp_path, agents, etcd):
    work = tmp_path / "work"
    work.mkdir()
    run = agents("quorum")
    procs = [run.start(str(i), "--nodes", "2", "--etcd-timeout", "5",
                       command=shell_program(work)) for i in range(2)]
    wait_for(lambda: len(round_files(work, 0)) == 2, "both ranks of round 0", procs)
    etcd.kill(1)
    etcd.kill(2)
    codes = [run.wait(str(i)) for i in range(2)]
    for i in range(2):
        log = run.log(str(i))
        assert codes[i] == 1, log
        assert "etcd: no quorum at" in log or "etcd: cannot reach" in log, log


def test_a_node_done_before_the_quorum_is_lost_does_not_claim_success(tmp_path, agents, etcd):
    """Its peers may still fail the run: it cannot know, so it exits 1."""
    work = tmp_path / "work"
    work.mkdir()
    address = etcd.address("early")
    run = agents("early")
    procs = [run.start("0", "--nodes", "2", "--etcd-timeout", "5", command=shell_program(work)),
             run.start("1", "--nodes", "2", "--etcd-timeout", "5", command=["true"])]
    wait_for(lambda: "executor 1 on 127.0.0.1  finished" in drover_status(address).stdout,
             "executor 1's program to finish", procs)
    etcd.kill(1)
    etcd.kill(2)
    codes = [run.wait(str(i)) for i in range(2)]
    assert codes == [1, 1], run.log("0") + run.log("1")
    assert "cannot learn how the run ends: etcd: no quorum at" in run.log("1") or \
        "cannot learn how the run ends: etcd: cannot reach" in run.log("1"), run.log("1")


def test_a_lost_agent_leaves_and_the_others_form_again(tmp_path, agents):
    work = tmp_path / "work"
    work.mkdir()
    run = agents("lost")
    args = ("--nodes", "2:3", "--lease-ttl", "2", "--max-restarts", "3")
    procs = [run.start(str(i), *args, command=shell_program(work)) for i in range(3)]
    wait_for(lambda: len(round_files(work, 0)) == 3, "the three ranks of round 0", procs)
    victim = round_files(work, 0)[2][1]
    os.kill(victim, signal.SIGKILL)

    def reformed():
        rounds = sorted({int(p.name[1:].split("-")[0]) for p in work.glob("r*-*")
                         if not p.name.endswith(".tmp")})
        last = round_files(work, rounds[-1])
        return rounds[-1] > 0 and len(last) == 2 and all(w == 2 for w, _ in last.values())

    wait_for(reformed, "a round of the two survivors")
    survivors = [e for e, p in run.procs.items() if p.pid != victim]
    assert len(survivors) == 2
    (work / "done").touch()
    for executor in survivors:
        assert run.wait(executor) == 0, run.log(executor)


def test_a_late_agent_joins_at_the_next_round(tmp_path, agents):
    work = tmp_path / "work"
    work.mkdir()
    run = agents("join")
    args = ("--nodes", "2:3", "--join-wait", "1")
    procs = [run.start(str(i), *args, command=shell_program(work)) for i in range(2)]
    wait_for(lambda: len(round_files(work, 0)) == 2, "round 0 with two nodes", procs)
    procs.append(run.start("2", *args, command=shell_program(work)))
    wait_for(lambda: len(round_files(work, 1)) == 3, "round 1 with the joiner", procs)
    assert all(world == 3 for world, _ in round_files(work, 1).values())
    (work / "done").touch()
    assert [run.wait(str(i)) for i in range(3)] == [0, 0, 0]


def test_a_failure_past_max_restarts_fails_every_node(tmp_path, agents):
    work = tmp_path / "work"
    work.mkdir()
    (work / "fail").touch()
    run = agents("fail")
    [run.start(str(i), "--nodes", "2", "--max-restarts", "1", command=shell_program(work))
     for i in range(2)]
    codes = [run.wait(str(i)) for i in range(2)]
    assert all(code != 0 for code in codes), codes
    assert round_files(work, 1), "one restart in place before the run fails"
    for i in range(2):
        assert "the run failed" in run.log(str(i)) or "exit code 3" in run.log(str(i))


def test_a_node_asking_for_another_shape_is_refused(tmp_path, agents):
    work = tmp_path / "work"
    work.mkdir()
    run = agents("shape")
    first = run.start("0", "--nodes", "2", command=shell_program(work))
    wait_for(lambda: drover_status(run.address).returncode == 0, "the run's config in etcd",
             [first])
    run.start("1", "--nodes", "3", command=shell_program(work))
    assert run.wait("1") == 1
    assert "was started with --nodes 2:2; this node asks for --nodes 3:3" in run.log("1")
    run.kill_all()


def start_driver(tmp_path, mark, *args, name="driver", **env):
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([DROVER, "run", "--log-dir", str(tmp_path / "logs"), *args],
                            env=clean_env(mark, **env), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def attach_and_finish(tmp_path, mark, address, done):
    """`drover run --attach address`; once it attached, touches `done` (the
    programs' cue to finish) and returns the attached driver's output, after
    checking it exited 0."""
    attached = start_driver(tmp_path, mark, "--attach", address, name="attached")
    wait_for(lambda: "attached to the run" in (tmp_path / "attached.log").read_text(),
             "the driver to attach", [attached])
    done.touch()
    assert attached.wait(timeout=WAIT_S) == 0, (tmp_path / "attached.log").read_text()
    return (tmp_path / "attached.log").read_text()


def test_a_driver_attached_to_agents_started_by_hand_records_how_each_ended(
        tmp_path, mark, agents):
    """Agents started by hand run where the driver cannot wait for them: its
    record of the run waits instead until each node wrote how its program
    ended, the ps stopped at the end last of all."""
    work = tmp_path / "work"
    work.mkdir()
    up, done = work / "ps-up", work / "done"
    run = agents("byhand")
    program = ["sh", "-c", f'if [ -z "$RANK" ]; then touch {up}; exec sleep 600; fi; '
               + until_files_exist(up, done, tenths=2400)]
    for executor in ("0", "1", "2"):
        run.start(executor, "--nodes", "3", "--chief", "--ps", "1", command=program)
    wait_for(up.exists, "the ps to start", list(run.procs.values()))  # the run exists
    log = attach_and_finish(tmp_path, mark, run.address, done)
    assert "every node's program finished" in log, log
    for executor in ("0", "1", "2"):
        assert run.wait(executor) == 0, run.log(executor)
    record = json.loads((tmp_path / "logs" / "etcd-byhand" / "run.json").read_text())
    ends = {node["task"]: (node["state"], (node["exit"] or {}).get("text"))
            for node in record["nodes"]}
    assert ends == {"chief:0": ("finished", "exit code 0"), "worker:0": ("finished", "exit code 0"),
                    "ps:0": ("stopped", "killed by SIGTERM")}, ends


def test_a_killed_driver_leaves_the_run_going_and_attach_takes_it_up(tmp_path, mark, etcd):
    work = tmp_path / "work"
    work.mkdir()
    address = etcd.address("attach")
    driver = start_driver(tmp_path, mark, "--rendezvous", address, "--nodes", "2", "--",
                          *shell_program(work))
    wait_for(lambda: len(round_files(work, 0)) == 2, "both ranks of round 0", [driver])
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    agents = [agent for _, agent in round_files(work, 0).values()]
    for agent in agents:
        os.kill(agent, 0)  # still there: the run goes on without its driver
    log = attach_and_finish(tmp_path, mark, address, work / "done")
    assert "every node's program finished" in log, log
    assert "[worker:0] rank=0 done" in log and "[worker:1] rank=1 done" in log, log
    assert not list(work.glob("r1-*")), "the driver's death must not re-form the nodes"


def running(pid):
    """Whether `pid` is a live process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_driver_gone_past_driver_timeout_has_the_nodes_stop_the_run(tmp_path, mark, etcd):
    work = tmp_path / "work"
    work.mkdir()
    address = etcd.address("abandoned")
    driver = start_driver(tmp_path, mark, "--rendezvous", address, "--nodes", "2", "--lease-ttl",
                          "2", "--driver-timeout", "1", "--", *shell_program(work))
    wait_for(lambda: len(round_files(work, 0)) == 2, "both ranks of round 0", [driver])
    agents = [agent for _, agent in round_files(work, 0).values()]
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    # The programs never finish on their own: only the timeout ends them.
    wait_for(lambda: not any(running(agent) for agent in agents),
             "the agents to stop the run once their driver stayed away")
    status = drover_status(address)
    assert "the driver has been gone for 1 s (--driver-timeout); the run is stopped" in \
        status.stdout, status.stdout + status.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "logs" / "etcd-abandoned").glob("*.log"))
    assert "the run failed: the driver has been gone" in logs, logs


def test_driver_timeout_without_etcd_is_bad_input():
    done = subprocess.run([DROVER, "run", "--nodes", "1", "--driver-timeout", "5", "--", "true"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "--driver-timeout goes with --rendezvous etcd://" in done.stderr, done.stderr


def test_sigint_to_the_driver_stops_an_etcd_run(tmp_path, mark, etcd):
    work = tmp_path / "work"
    work.mkdir()
    driver = start_driver(tmp_path, mark, "--rendezvous", etcd.address("interrupt"), "--nodes",
                          "2", "--", *shell_program(work))
    wait_for(lambda: len(round_files(work, 0)) == 2, "both ranks of round 0", [driver])
    os.killpg(driver.pid, signal.SIGINT)
    assert driver.wait(timeout=WAIT_S) == 128 + signal.SIGINT
    log = (tmp_path / "driver.log").read_text()
    assert "SIGINT: stopping the run" in log, log
    status = drover_status(etcd.address("interrupt"))
    assert "stopped" in status.stdout, status.stdout + status.stderr


def test_tls_and_a_client_certificate_pass_through(tmp_path, mark):
    tls = TlsFiles(tmp_path / "tls")
    with EtcdCluster(tmp_path / "etcd", members=1, tls=tls) as etcd:
        work = tmp_path / "work"
        work.mkdir()
        (work / "done").touch()
        run = Agents(tmp_path, mark, etcd.address("tls"))
        try:
            flags = ("--nodes", "2", "--etcd-cacert", str(tls.ca), "--etcd-cert",
                     str(tls.client_cert), "--etcd-key", str(tls.client_key))
            for i in range(2):
                run.start(str(i), *flags, command=shell_program(work))
            assert [run.wait(str(i)) for i in range(2)] == [0, 0], run.log("0") + run.log("1")
            # Without the CA the agent cannot trust etcd, and says so.
            run.start("plain", "--nodes", "2", "--etcd-timeout", "2",
                      command=shell_program(work))
            assert run.wait("plain") == 1
            assert "etcd" in run.log("plain"), run.log("plain")
        finally:
            run.kill_all()


def test_etcd_users_pass_through_and_a_wrong_password_is_refused(tmp_path, mark, etcd):
    etcd.etcdctl("user", "add", "root:rootpw", "--interactive=false")
    etcd.etcdctl("user", "add", "trainer:secret", "--interactive=false")
    etcd.etcdctl("role", "add", "runs")
    etcd.etcdctl("role", "grant-permission", "runs", "--prefix=true", "readwrite", "/users/")
    etcd.etcdctl("user", "grant-role", "trainer", "runs")
    etcd.etcdctl("auth", "enable")
    work = tmp_path / "work"
    work.mkdir()
    (work / "done").touch()
    run = Agents(tmp_path, mark, etcd.address("users/run"))
    for i in range(2):
        run.start(str(i), "--nodes", "2", "--etcd-user", "trainer:secret",
                  command=shell_program(work))
    assert [run.wait(str(i)) for i in range(2)] == [0, 0], run.log("0") + run.log("1")
    run.start("wrong", "--nodes", "2", "--etcd-user", "trainer:nope",
              command=shell_program(work))
    assert run.wait("wrong") == 1
    assert "permission denied" in run.log("wrong").lower() or \
        "authentication failed" in run.log("wrong").lower(), run.log("wrong")
    # Outside the user's prefix: etcd refuses, and the agent says so.
    outside = Agents(tmp_path, mark, etcd.address("elsewhere"))
    outside.start("x", "--nodes", "1", "--etcd-user", "trainer:secret",
                  command=shell_program(work))
    assert outside.wait("x") == 1
    assert "permission denied" in outside.log("x").lower(), outside.log("x")


def test_nothing_in_etcd_is_a_secret(tmp_path, agents, etcd):
    """No cluster token exists in an etcd run, and no key holds one: every
    value is the run's shape, rounds, nodes, or what the programs stored."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "done").touch()
    run = agents("secrets")
    for i in range(2):
        run.start(str(i), "--nodes", "2", command=shell_program(work))
    assert [run.wait(str(i)) for i in range(2)] == [0, 0]
    dump = etcd.etcdctl("get", "--prefix", "/secrets")
    assert "/secrets/c/f/config" in dump and "/secrets/c/f/end" in dump, dump
    import re
    assert not re.search(r"[0-9a-f]{64}", dump), dump
    assert "drover-node-v1" not in dump and "drover-status-v1" not in dump


def test_an_idle_node_keeps_its_lease_without_writing_its_status(tmp_path, agents, etcd):
    """A node whose status does not change sends etcd keep-alives only: its
    status key stays at the revision of its first write across several
    keep-alives (seen as its lease's time to live going back up), so an idle
    run asks nothing of etcd's raft log."""
    work = tmp_path / "work"
    work.mkdir()
    run = agents("idle")
    # A keep-alive every 2 s: the time to live, read in whole seconds, then
    # falls to 4 between two and goes back up with each.
    proc = run.start("0", "--nodes", "1", "--lease-ttl", "6", command=shell_program(work))

    def status():
        found = json.loads(etcd.etcdctl("get", "/idle/s/0", "-w", "json")).get("kvs", [])
        return found[0] if found else None

    wait_for(lambda: round_files(work, 0) and status(), "the program and its status", [proc])
    first = status()
    lease = "%x" % int(first["lease"])
    renewals, last_ttl = 0, None
    deadline = time.monotonic() + WAIT_S
    while renewals < 3:
        assert time.monotonic() < deadline and proc.poll() is None, run.log("0")
        ttl = json.loads(etcd.etcdctl("lease", "timetolive", lease, "-w", "json"))["ttl"]
        renewals += last_ttl is not None and ttl > last_ttl
        last_ttl = ttl
        time.sleep(0.05)
    assert status()["mod_revision"] == first["mod_revision"], (first, status())
    (work / "done").touch()
    assert run.wait("0") == 0, run.log("0")


@pytest.mark.parametrize("args, message", [
    (["--rendezvous", "127.0.0.1:2379", "--nodes", "2", "--", "true"],
     "--rendezvous and --attach take etcd://"),
    (["--attach", "etcd://127.0.0.1:1/r", "--", "true"], "--attach takes over watching a run"),
])
def test_bad_etcd_runs_are_bad_input(args, message):
    done = subprocess.run([DROVER, "run", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr


def test_an_agent_without_a_reachable_etcd_says_so_within_its_timeout(tmp_path):
    done = subprocess.run(
        [DROVER, "agent", "--rendezvous", "etcd://127.0.0.1:1/nowhere", "--nodes", "1",
         "--etcd-timeout", "2", "--", "true"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert "etcd: cannot reach any member of 127.0.0.1:1" in done.stderr, done.stderr


def test_a_driver_whose_agents_all_died_says_so(tmp_path, mark, etcd):
    """Nodes end an etcd run among themselves: with all of them gone, the
    driver is the one left to say so, and must not wait for ever."""
    work = tmp_path / "work"
    work.mkdir()
    driver = start_driver(tmp_path, mark, "--rendezvous", etcd.address("orphaned"), "--nodes",
                          "2", "--", *shell_program(work))
    wait_for(lambda: len(round_files(work, 0)) == 2, "both ranks of round 0", [driver])
    for _, agent in round_files(work, 0).values():
        os.kill(agent, signal.SIGKILL)
    assert driver.wait(timeout=WAIT_S) == 1
    log = (tmp_path / "driver.log").read_text()
    assert "exited before the run ended" in log, log


def test_a_driver_with_a_chief_and_a_ps_through_etcd(tmp_path, mark, etcd):
    work = tmp_path / "work"
    work.mkdir()
    (work / "done").touch()
    # The ps serves until the chief and the worker are done, and is stopped.
    # They wait for it to start (a run this short could otherwise end before
    # the ps's agent read the cluster, and it would never start at all).
    up = work / "ps-up"
    driver = start_driver(tmp_path, mark, "--rendezvous", etcd.address("roles"), "--workers",
                          "1", "--chief", "--ps", "1", "--", "sh", "-c",
                          'echo "TF_CONFIG=$TF_CONFIG"; '
                          f'if [ -z "$RANK" ]; then touch {up}; exec sleep 600; fi; '
                          + until_files_exist(up, tenths=1200))
    assert driver.wait(timeout=WAIT_S) == 0, (tmp_path / "driver.log").read_text()
    log = (tmp_path / "driver.log").read_text()
    assert "formed with 3 nodes: ps:0 on 127.0.0.1, chief:0 on 127.0.0.1, worker:0 on" in log, log
    assert '[chief:0] TF_CONFIG={"cluster":' in log and '"task":{"type":"chief"' in log, log
    # The record of the finished run says how each program ended and after
    # how long, though the nodes' leased keys are gone by the driver's last
    # look (their last status stays in left/ID).
    record = json.loads((tmp_path / "logs" / "etcd-roles" / "run.json").read_text())
    assert record["rendezvous"]["registered"] == 3, record["rendezvous"]
    assert isinstance(record["rendezvous"]["duration_s"], float), record["rendezvous"]
    ends = {node["task"]: (node["exit"], node["runtime_s"]) for node in record["nodes"]}
    for task in ("chief:0", "worker:0"):
        assert ends[task][0]["text"] == "exit code 0" and ends[task][1] > 0, ends
    # Stopped as the run ended; the driver writes the record only once the
    # ps's agent wrote how it ended (left/ID), after the chief and worker.
    assert ends["ps:0"][0]["text"] == "killed by SIGTERM", ends
    states = {node["task"]: node["state"] for node in record["nodes"]}
    assert states == {"chief:0": "finished", "worker:0": "finished", "ps:0": "stopped"}, states
    places = {node["task"]: (node["rank"], node["chief"]) for node in record["nodes"]}
    assert places == {"chief:0": (0, True), "worker:0": (1, False), "ps:0": (None, False)}, places
    status = drover_status(etcd.address("roles"))
    assert status.returncode == 0, status.stderr
    assert "3 registered" in status.stdout, status.stdout
    assert status.stdout.count("finished") >= 2 and "exit code 0 after" in status.stdout, \
        status.stdout
    assert re.search(r"ps:0 .*  stopped .*killed by SIGTERM after", status.stdout), status.stdout
    assert re.search(r"3 registered of at most 3, formed in \S+ m?s\n", status.stdout), \
        status.stdout
    as_json = subprocess.run([DROVER, "status", "--json", etcd.address("roles")],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert as_json.returncode == 0, as_json.stderr
    shown = json.loads(as_json.stdout)
    assert {node["task"]: node["state"] for node in shown["nodes"]} == states, shown
    assert isinstance(shown["rendezvous_s"], float), shown

"""`drover run --engine ssh` on three real SSH hosts (network namespaces with
their own sshd, see conftest.py): the digits job across the hosts, a killed
agent, an interrupted driver, the pre-flight check, host keys, and the three
ways to name hosts. The hosts share this machine's filesystem and its process
table, so the tests see remote processes in /proc: every process drover
starts carries DROVER_TEST_MARK (drover forwards DROVER_* to the hosts), and
none may be left when drover is gone."""

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from cluster_util import (MARK_VARIABLE, assert_no_leftovers, established_tcp_connections,
                          marked_processes, new_mark, wait_for)

REPO = Path(__file__).resolve().parents[2]
DROVER = os.path.abspath(os.environ.get("DROVER_BIN", str(REPO / "build" / "bin" / "drover")))
EXAMPLE = REPO / "examples" / "digits"
PYTHON = "/usr/bin/python3"


@pytest.fixture
def mark(monkeypatch):
    value = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, value)
    yield value
    assert_no_leftovers(value, wait=30.0)


def run_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("TF_CONFIG", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_",
                                 "GROUP_", "OMPI_", "SLURM_"))}


def drover(ssh_hosts, hosts, *args, command, timeout=300, **kwargs):
    argv = [DROVER, "run", "--engine", "ssh", "--hosts", hosts, "--ssh-config", ssh_hosts.config,
            "--grace", "2", *args, "--", *command]
    return subprocess.run(argv, env=run_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def start_drover(ssh_hosts, hosts, *args, command):
    argv = [DROVER, "run", "--engine", "ssh", "--hosts", hosts, "--ssh-config", ssh_hosts.config,
            "--grace", "2", *args, "--", *command]
    return subprocess.Popen(argv, env=run_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def agents_of(mark):
    """pid -> command line of the live `drover agent` processes of this test."""
    return {pid: cmdline for pid, cmdline in marked_processes(mark)
            if cmdline.startswith(DROVER + " agent ")}


def test_digits_across_three_hosts_reaches_95_percent(ssh_hosts, mark, tmp_path):
    data = tmp_path / "digits-data"
    subprocess.run([PYTHON, str(EXAMPLE / "make_csv.py"), str(data)], check=True,
                   capture_output=True)
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml")
    log_dir = tmp_path / "logs"
    done = drover(ssh_hosts, spec, "--log-dir", str(log_dir), "--input",
                  str(data / "train-*.csv"), "--epochs", "40",
                  command=[PYTHON, str(EXAMPLE / "train.py"), "--test", str(data / "test.csv")],
                  timeout=540)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # Every host passed the pre-flight check and runs one node.
    for address in ssh_hosts.addresses:
        assert re.search(r"^  %s: ssh ok; /usr/bin/python3 at /usr/bin/python3; drover ok; "
                         r"driver %s:[0-9]+ reachable$" % (re.escape(address),
                                                           re.escape(ssh_hosts.driver_address)),
                         output, re.MULTILINE), output
    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1 and float(accuracies[0]) >= 0.95, output
    assert "[worker:0] worker:0: rank 0 of 3, chief=True" in output, output
    # The nodes' addresses are the hosts' (TF_CONFIG / MASTER_ADDR reach them).
    for index, address in enumerate(ssh_hosts.addresses):
        context = (log_dir / ("drover-context-%d.json" % index)).read_text()
        assert '"%s:' % address in context, context


def test_nodes_go_to_slots_of_a_host_list_and_a_hostfile(ssh_hosts, mark, tmp_path):
    command = ["sh", "-c", 'echo "on $(hostname) as $DROVER_EXECUTOR_ID"']
    done = drover(ssh_hosts, "h1:2,h3", command=command)
    assert done.returncode == 0, done.stderr
    for executor, host in ((0, "h1"), (1, "h1"), (2, "h3")):
        assert "[worker:%d] on %s as %d" % (executor, host, executor) in done.stdout, done.stdout

    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# two hosts\nh2 slots=1\n10.200.0.13 slots=2  # the last one\n")
    done = drover(ssh_hosts, str(hostfile), "--nodes", "2", command=command)
    assert done.returncode == 0, done.stderr
    assert "[worker:0] on h2 as 0" in done.stdout and "[worker:1] on h3 as 1" in done.stdout


def ssh_clients(mark):
    """The live ssh client processes of this test (not the ControlMaster ones)."""
    return [c for p, c in marked_processes(mark) if c.startswith("ssh -F")]


# Each node says who it is and sends a megabyte of one byte, waits for the
# test's go, says its last line; node 1 then waits for the others to end and
# exits with 1, the others with 0. $0: a directory the hosts share.
LOUD = ["sh", "-c", 'id=$DROVER_EXECUTOR_ID; echo "first from $id on $(hostname)"; '
        'head -c 1048576 /dev/zero | tr "\\0" "$id"; echo; touch "$0/started.$id"; '
        'while [ ! -e "$0/go" ]; do sleep 0.05; done; echo "last from $id"; '
        '[ "$id" != 1 ] && touch "$0/done.$id" && exit 0; '
        'until [ "$(ls "$0" | grep -c done)" = 4 ]; do sleep 0.05; done; exit 1']


@pytest.mark.parametrize("agents", ["host", "node"])
def test_one_agent_and_one_ssh_a_host_keep_each_nodes_output_and_exit_code(
        ssh_hosts, mark, tmp_path, agents):
    """--agents host (the default): the three nodes of h1 share one agent and
    one ssh, as do the two of h2; each node's output and exit code still
    come back apart, and a host's agent holds one rendezvous connection for
    its nodes. --agents node: an agent, an ssh and a connection a node."""
    log_dir = tmp_path / "logs"
    sync = tmp_path / "sync"
    sync.mkdir()
    process = start_drover(ssh_hosts, "h1:3,h2:2", "--agents", agents, "--log-dir",
                           str(log_dir), command=LOUD + [str(sync)])
    try:
        wait_for(lambda: len(list(sync.glob("started.*"))) == 5, "every node's megabyte")
        running = agents_of(mark)
        clients = ssh_clients(mark)
        connections = [established_tcp_connections(pid) for pid in running]
        (sync / "go").touch()
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    expected = 2 if agents == "host" else 5
    assert len(running) == expected, running
    assert len(clients) == expected, clients
    assert connections == [1] * expected, (connections, running)
    # No credential in any agent's argv: each node's comes on stdin.
    for cmdline in running.values():
        assert "--token-file -" in cmdline or ":-:" in cmdline, cmdline
        assert "drover-node-v1" not in cmdline, cmdline
    assert process.returncode == 1, err
    for executor, host in ((0, "h1"), (1, "h1"), (2, "h1"), (3, "h2"), (4, "h2")):
        assert "[worker:%d] first from %d on %s" % (executor, executor, host) in out, err
        assert "[worker:%d] last from %d" % (executor, executor) in out, err
        # The node's megabyte is its own, whole, in its log.
        log = (log_dir / ("worker-%d.log" % executor)).read_text()
        assert str(executor) * 1048576 in log, (executor, len(log))
        assert re.search(r"^worker:%d +%d +10\.200\.0\.1[12] .* exit code %d " % (
            executor, executor, 1 if executor == 1 else 0), err, re.MULTILINE), err
    assert "drover run: worker:1 (executor 1 on 10.200.0.11) failed: exit code 1" in err, err


def test_more_nodes_than_slots_is_bad_input(ssh_hosts, mark):
    done = drover(ssh_hosts, "h1,h2", "--nodes", "3", command=["true"])
    assert done.returncode == 2
    assert "3 nodes asked, but the 2 hosts have 2 slots" in done.stderr


def test_resource_spec_with_an_unknown_key_names_its_line(ssh_hosts, mark, tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: 10.200.0.11\n    chief: true\n    gpu: [0]\n")
    done = drover(ssh_hosts, str(spec), command=["true"])
    assert done.returncode == 2, done.stderr
    assert "gpu" in done.stderr and "line 4" in done.stderr, done.stderr


@pytest.mark.parametrize("hosts,victim,programs,failed", [
    # An agent a node (hosts of one slot): the node's own agent.
    ("h1,h2,h3", "--executor-id 1 ", 3, r"worker:1 \(executor 1 on 10\.200\.0\.12\)"),
    # One agent for h1's two nodes: both fail with it, the first one named.
    ("h1:2,h2:2", "--node 0:-::-", 4, r"worker:[01] \(executor [01] on 10\.200\.0\.11\)"),
])
def test_killed_agent_is_reported_and_every_host_is_cleaned_up(ssh_hosts, mark, hosts, victim,
                                                               programs, failed):
    process = start_drover(ssh_hosts, hosts, command=["sh", "-c", "echo ready; exec sleep 300"])
    try:
        wait_for(lambda: len([p for p, c in marked_processes(mark) if c.startswith("sleep 300")])
                 == programs, "every node's program")
        pid = [p for p, cmdline in agents_of(mark).items() if victim in cmdline]
        assert len(pid) == 1, agents_of(mark)
        os.kill(pid[0], signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, err
    # The driver names the node and its host.
    assert re.search("drover run: %s failed: " % failed, err), err
    # The other hosts' programs were stopped; the fixture checks nothing is left.


def test_elastic_run_goes_on_without_a_host_whose_agent_died(ssh_hosts, mark):
    """--nodes 2:3 over three hosts: the agent on h2 is SIGKILLed, as when
    the host dies; the agents on h1 and h3 stay up and their programs start
    again as a group of two."""
    program = ('echo "round=$DROVER_RESTART_COUNT world=$WORLD_SIZE"; '
               '[ "$DROVER_RESTART_COUNT" = 0 ] && exec sleep 300; exit 0')
    process = start_drover(ssh_hosts, "h1,h2,h3", "--nodes", "2:3",
                           command=["sh", "-c", program])
    try:
        wait_for(lambda: len([p for p, c in marked_processes(mark) if c.startswith("sleep 300")])
                 == 3, "a program on each of the three hosts")
        victim = [pid for pid, cmdline in agents_of(mark).items()
                  if "--executor-id 1 " in cmdline]
        assert len(victim) == 1, agents_of(mark)
        os.kill(victim[0], signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "re-forming the group with 2 nodes (round 1) after worker:1 on 10.200.0.12" in err, err
    lines = out.splitlines()
    assert "[worker:0] round=1 world=2" in lines and "[worker:1] round=1 world=2" in lines, out


def status_address(process, lines):
    """Reads the driver's stderr, keeping it in `lines`, up to the status
    page's address."""
    for line in process.stderr:
        lines.append(line)
        if "status page http://" in line:
            return line.split("status page ", 1)[1].split()[0].rstrip("/")
    raise AssertionError("no status page address: " + "".join(lines))


def heartbeats_quiet(address, host):
    """Whether every node on `host` runs and its agent has not heartbeated
    for over two intervals: quiet, not late (the run's silence limit is 65 s)."""
    with urllib.request.urlopen(address + "/api/cluster", timeout=10) as response:
        nodes = [n for n in json.load(response)["nodes"] if n["host"] == host]
    return bool(nodes) and all(n["state"] == "running" and (n["last_heartbeat_age_s"] or 0) > 2.5
                               for n in nodes)


@pytest.mark.parametrize("hosts", ["h1,h2,h3", "h1,h2:2"])  # h2: an agent a node; one for two
def test_a_host_cut_off_the_network_is_found_by_keepalive_and_cleans_up_itself(
        ssh_hosts, mark, hosts):
    """h2's link to the bridge goes down once its agent's heartbeats are quiet
    (every program sleeps, nothing to report; at --quiet-heartbeat 60 its
    silence would count after 65 s). The driver's kernel finds the host by TCP
    keepalive and the run fails naming it; the agent on h2 finds the driver
    the same way and stops its programs while the link is still down."""
    process = start_drover(ssh_hosts, hosts, "--quiet-heartbeat", "60",
                           command=["sh", "-c", "echo ready; exec sleep 300"])
    link = "veth-h2"
    lines = []
    try:
        address = status_address(process, lines)
        wait_for(lambda: heartbeats_quiet(address, "10.200.0.12"), "h2's heartbeats to go quiet")
        subprocess.run(["ip", "link", "set", link, "down"], check=True, timeout=30)
        try:
            out, err = process.communicate(timeout=120)
            err = "".join(lines) + err
            assert process.returncode == 1, err
            assert re.search(r"drover run: worker:\d \(executor \d on 10\.200\.0\.12\) failed: "
                             r".*its host stopped answering", err), err
            # Nothing of the run is left anywhere, h2 included, while h2 is
            # still cut off: its agent stopped its programs by itself.
            assert_no_leftovers(mark, wait=120.0)
        finally:
            subprocess.run(["ip", "link", "set", link, "up"], check=True, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.parametrize("hosts", ["h1,h2,h3", "h1:2,h2"])  # an agent a node; h1's shared
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_interrupted_driver_leaves_nothing_on_the_hosts(ssh_hosts, mark, how, hosts):
    process = start_drover(ssh_hosts, hosts, command=["sleep", "300"])
    try:
        wait_for(lambda: len([p for p, c in marked_processes(mark) if c.startswith("sleep 300")])
                 == 3, "the three nodes' programs")
        process.send_signal(how)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    if how == signal.SIGTERM:
        assert process.returncode == 128 + signal.SIGTERM
    # Even after SIGKILL, each agent sees its stdin end and stops its program.
    assert_no_leftovers(mark, wait=30.0)


# A program that leaves its process group and its session behind it.
ESCAPING = ["sh", "-c", "sleep 300 & setsid sleep 300 & echo ready; wait"]


def drover_tmp_entries():
    return {p for p in Path("/tmp").glob("drover-*") if p.name != "drover-%d" % os.getuid()} | \
        set(Path("/tmp/drover-%d" % os.getuid()).glob("*"))


@pytest.mark.parametrize("victim", ["agent", "driver"])
def test_descendants_that_escape_their_group_do_not_outlive_a_killed_agent_or_driver(
        ssh_hosts, mark, victim):
    before = drover_tmp_entries()
    process = start_drover(ssh_hosts, "h1,h2,h3", command=ESCAPING)
    try:
        # Progress before the fault: every host's program started both sleeps.
        wait_for(lambda: len([p for p, c in marked_processes(mark) if c.startswith("sleep 300")])
                 == 6, "two descendants on each of the three hosts")
        if victim == "agent":
            pid = [p for p, c in agents_of(mark).items() if "--executor-id 1 " in c]
            assert len(pid) == 1, agents_of(mark)
            os.kill(pid[0], signal.SIGKILL)
        else:
            os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    # The fixture checks that no process is left on any host; no file either.
    assert_no_leftovers(mark, wait=30.0)
    try:
        wait_for(lambda: not drover_tmp_entries() - before, "drover's /tmp files to go",
                 timeout=30)
    except AssertionError:
        # Which ones: another suite running at the same time makes its own.
        raise AssertionError("drover's /tmp files still there after 30 s: %s" %
                             sorted(str(p) for p in drover_tmp_entries() - before))


def test_preflight_names_the_host_that_refuses_ssh(ssh_hosts, mark, tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text(
        "nodes:\n"
        "  - address: 10.200.0.11\n    chief: true\n    ssh_config: ci\n"
        "  - address: 10.200.0.12\n    ssh_config: closed\n"
        "ssh:\n"
        "  ci:\n    username: root\n    key_file: %s\n"
        "  closed:\n    username: root\n    key_file: %s\n    port: 2222\n"
        % (ssh_hosts.key_file, ssh_hosts.key_file))
    done = drover(ssh_hosts, str(spec), command=["sleep", "300"])
    assert done.returncode == 1, done.stderr
    assert re.search(r"^  10\.200\.0\.11: ssh ok", done.stderr, re.MULTILINE), done.stderr
    assert re.search(r"^  10\.200\.0\.12: ssh FAILED: .*Connection refused", done.stderr,
                     re.MULTILINE), done.stderr
    assert "pre-flight check failed on 10.200.0.12; nothing was started" in done.stderr
    assert "formed" not in done.stderr


def test_preflight_names_a_missing_program_and_an_unreachable_driver(ssh_hosts, mark):
    done = drover(ssh_hosts, "h1,h2", command=["/no/such/program"])
    assert done.returncode == 1, done.stderr
    assert re.search(r"^  h1 \(10\.200\.0\.11\): ssh ok; /no/such/program NOT FOUND",
                     done.stderr, re.MULTILINE), done.stderr
    # 127.0.0.1 here is not the hosts' loopback: they cannot reach it.
    done = drover(ssh_hosts, "h1", "--driver-address", "127.0.0.1", command=["true"])
    assert done.returncode == 1, done.stderr
    assert re.search(r"driver 127\.0\.0\.1:[0-9]+ NOT REACHABLE", done.stderr), done.stderr


def test_host_keys_are_checked_unless_turned_off(ssh_hosts, mark, tmp_path):
    # The same hosts, with a known_hosts file that knows none of them.
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n"
                      "  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n"
                      % (ssh_hosts.key_file, tmp_path / "known_hosts"))
    argv = [DROVER, "run", "--engine", "ssh", "--hosts", "10.200.0.11", "--ssh-config",
            str(config), "--", "true"]
    done = subprocess.run(argv, env=run_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Host key verification failed" in done.stderr, done.stderr
    done = subprocess.run(argv[:-2] + ["--no-host-key-check", "--", "true"], env=run_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "known_hosts").exists()


def consumed_by_epoch(prefix):
    """Per epoch, how often each record was consumed: each round's records up
    to its last "#commit", and all of a node's last round."""
    counts = {}
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        rounds = []
        for line in path.read_text().splitlines():
            if line.startswith("#round"):
                rounds.append([[], []])  # committed, pending
            elif line == "#commit":
                rounds[-1][0] += rounds[-1][1]
                rounds[-1][1] = []
            else:
                epoch, record = line.split("\t", 1)
                rounds[-1][1].append((int(epoch), int(record.split(",", 1)[0])))
        for i, (committed, pending) in enumerate(rounds):
            for epoch, record in committed + (pending if i == len(rounds) - 1 else []):
                per_epoch = counts.setdefault(epoch, {})
                per_epoch[record] = per_epoch.get(record, 0) + 1
    return counts


@pytest.mark.parametrize("balance", ["equal", "dynamic"])
def test_a_killed_worker_resumes_after_its_last_commit_across_hosts(ssh_hosts, mark, tmp_path,
                                                                     balance):
    """worker:1 on h2 SIGKILLs itself mid-epoch; the next round feeds each of
    the three shares from its last commit (equal), or puts back in the queue
    what was not consumed before each node's last commit (dynamic: small
    queues and partitions, so every node claims as it goes, and the victim
    dies within what its queue first takes): relative to the commits every
    record is consumed once per epoch."""
    total = 6000
    with open(tmp_path / "data.csv", "w") as f:
        f.writelines(f"{i},payload-{i}\n" for i in range(total))
    out = tmp_path / "seen"
    feeding = (["--split-bytes", "20000"] if balance == "equal" else
               ["--balance", "dynamic", "--split-bytes", "8000", "--queue-bytes", "65536"])
    done = drover(ssh_hosts, "h1,h2,h3", "--input", str(tmp_path / "data.csv"),
                  *feeding, "--epochs", "2", "--max-restarts", "1",
                  command=[PYTHON, str(Path(__file__).parent / "commit_reader.py"), str(out),
                           "1", "700" if balance == "equal" else "200"])
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "re-forming the group (restart 1 of 1) after worker:1 on " in output, output
    resumed = ("feed share 1 resumes after its last commit" if balance == "equal" else
               "the feed resumes after the last commits")
    assert resumed in output, output
    counts = consumed_by_epoch(out)
    assert sorted(counts) == [0, 1], output
    for epoch, seen in counts.items():
        assert sorted(seen) == list(range(total)), epoch
        assert set(seen.values()) == {1}, (epoch, [r for r, n in seen.items() if n != 1][:10])

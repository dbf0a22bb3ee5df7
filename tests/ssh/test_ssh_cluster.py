"""drover.ssh.SSHCluster (AutoDist's SSHCluster) on three real SSH hosts
(network namespaces with their own sshd, see conftest.py): file writes and
copies read back through ssh, remote_exec, AutoDist's Cluster questions,
errors that name the host, and start()/terminate() over `drover run --engine
ssh`. The hosts share this machine's filesystem and process table, so remote
processes are visible in /proc; the ones a test starts carry DROVER_TEST_MARK
(set through the spec's shared_envs)."""

import hashlib
import os
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from cluster_util import (MARK_VARIABLE, assert_no_leftovers, marked_processes, new_mark,
                          wait_for)

import drover
from drover.ssh import SSHCluster

REPO = Path(__file__).resolve().parents[2]
DROVER = os.path.abspath(os.environ.get("DROVER_BIN", str(REPO / "build" / "bin" / "drover")))


@pytest.fixture
def mark():
    value = new_mark()
    yield value
    assert_no_leftovers(value, wait=30.0)


@pytest.fixture
def cluster(ssh_hosts, tmp_path, mark):
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml",
                                   extra_ssh="    shared_envs: {%s: %s}" % (MARK_VARIABLE, mark))
    with SSHCluster(spec, ssh_config=ssh_hosts.config) as c:
        yield c


def remote_sha256(ssh_hosts, host, path):
    out = ssh_hosts.ssh(host, "sha256sum -- %s" % shlex.quote(str(path))).stdout
    return out.split()[0]


def remote_mode(ssh_hosts, host, path):
    out = ssh_hosts.ssh(host, "stat -c %%a -- %s" % shlex.quote(str(path))).stdout
    return int(out.strip(), 8)


def test_exported_under_autodist_names():
    assert drover.SSHCluster is SSHCluster
    for name in ("is_chief", "get_address_from_task", "get_local_address",
                 "get_local_worker_task_index", "get_local_session_target", "remote_exec",
                 "remote_file_write", "remote_copy", "start", "terminate"):
        assert getattr(SSHCluster, name).__doc__, name


def test_remote_file_write_text_round_trips(cluster, ssh_hosts, tmp_path):
    host = ssh_hosts.addresses[1]
    target = tmp_path / "remote" / "new dir" / "nested" / "cluster_spec.json"
    text = '{"worker": ["a:1"]}\nünïcode \'quotes\' "$HOME" `x`\n'
    cluster.remote_file_write(str(target), text, host)
    assert ssh_hosts.ssh(host, "cat -- %s" % shlex.quote(str(target))).stdout == text


def test_remote_file_write_binary_round_trips(cluster, ssh_hosts, tmp_path):
    host = ssh_hosts.addresses[2]
    data = bytes(range(256)) * 4096 + b"\0\0tail\0"
    target = tmp_path / "bin" / "a" / "b" / "blob.bin"
    cluster.remote_file_write(str(target), data, host)
    assert remote_sha256(ssh_hosts, host, target) == hashlib.sha256(data).hexdigest()
    # Overwrites; empty data gives an empty file.
    cluster.remote_file_write(str(target), b"", host)
    assert remote_sha256(ssh_hosts, host, target) == hashlib.sha256(b"").hexdigest()


def test_remote_file_write_home_relative(cluster, ssh_hosts, mark):
    host = ssh_hosts.addresses[0]
    name = "drover-test-%s/x.txt" % mark
    try:
        cluster.remote_file_write("~/" + name, "home", host)
        assert ssh_hosts.ssh(host, "cat ~/%s" % name).stdout == "home"
    finally:
        ssh_hosts.ssh(host, "rm -rf ~/drover-test-%s" % mark, check=False)


def test_remote_copy_file_keeps_content_and_mode(cluster, ssh_hosts, tmp_path):
    host = ssh_hosts.addresses[1]
    local = tmp_path / "starter.sh"
    local.write_bytes(b"#!/bin/sh\necho hi\n\0binary\xff")
    local.chmod(0o751)
    into = tmp_path / "remote" / "work dir"
    cluster.remote_copy(str(local), str(into), host)
    copied = into / "starter.sh"
    assert remote_sha256(ssh_hosts, host, copied) == hashlib.sha256(local.read_bytes()).hexdigest()
    assert remote_mode(ssh_hosts, host, copied) == 0o751
    # Into an existing directory, again (overwrites).
    local.write_text("v2\n")
    cluster.remote_copy(str(local), str(into), host)
    assert ssh_hosts.ssh(host, "cat -- %s" % shlex.quote(str(copied))).stdout == "v2\n"


def test_remote_copy_directory_recursively(cluster, ssh_hosts, tmp_path):
    host = ssh_hosts.addresses[2]
    tree = tmp_path / "model"
    (tree / "variables" / "deep").mkdir(parents=True)
    files = {
        "saved_model.pb": (os.urandom(200000), 0o644),
        "variables/index": (b"index\n", 0o600),
        "variables/deep/run.sh": (b"#!/bin/sh\n", 0o755),
    }
    for name, (data, mode) in files.items():
        (tree / name).write_bytes(data)
        (tree / name).chmod(mode)
    (tree / "variables" / "deep").chmod(0o750)
    into = tmp_path / "remote"
    cluster.remote_copy(str(tree), str(into), host)
    for name, (data, mode) in files.items():
        assert remote_sha256(ssh_hosts, host, into / "model" / name) == \
            hashlib.sha256(data).hexdigest(), name
        assert remote_mode(ssh_hosts, host, into / "model" / name) == mode, name
    assert remote_mode(ssh_hosts, host, into / "model" / "variables" / "deep") == 0o750
    listing = ssh_hosts.ssh(host, "cd %s && find . | sort" % shlex.quote(str(into))).stdout.split()
    assert listing == [".", "./model", "./model/saved_model.pb", "./model/variables",
                       "./model/variables/deep", "./model/variables/deep/run.sh",
                       "./model/variables/index"]


def test_remote_copy_errors_name_host_and_path(cluster, ssh_hosts, tmp_path):
    host = ssh_hosts.addresses[0]
    missing = tmp_path / "no-such-file"
    with pytest.raises(ValueError, match="no-such-file.*No such file"):
        cluster.remote_copy(str(missing), str(tmp_path / "r"), host)
    local = tmp_path / "f.txt"
    local.write_text("x")
    # A remote directory that cannot be made: /proc refuses new entries.
    with pytest.raises(OSError) as raised:
        cluster.remote_copy(str(local), "/proc/drover-test/dir", host)
    assert host in str(raised.value) and "/proc/drover-test/dir" in str(raised.value)
    assert "mkdir" in str(raised.value)


def test_remote_exec_output_and_exit_code(cluster, ssh_hosts):
    host = ssh_hosts.addresses[1]
    proc = cluster.remote_exec(
        ["echo", "out:$%s;" % MARK_VARIABLE, "echo", "err", ">&2;", "hostname -I;", "exit", "3"],
        host, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    lines = out.decode().split("\n")
    assert lines[0].startswith("out:drover-test-")
    assert host in lines[1]
    assert err.decode() == "err\n"
    assert proc.returncode == 3


def test_remote_exec_ends_with_its_process(cluster, ssh_hosts, mark):
    host = ssh_hosts.addresses[2]
    proc = cluster.remote_exec(["echo started; sleep 600; echo never"], host,
                               stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"started\n"
    wait_for(lambda: marked_processes(mark), "the remote sleep")
    proc.terminate()
    proc.wait(timeout=60)
    # The remote command goes once its ssh is gone (the mark fixture checks).
    assert_no_leftovers(mark, wait=60.0)


def test_cluster_questions(ssh_hosts, tmp_path, monkeypatch):
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml", chief=1)
    monkeypatch.delenv("AUTODIST_WORKER", raising=False)
    monkeypatch.delenv("DROVER_WORKER", raising=False)
    with SSHCluster(spec, ssh_config=ssh_hosts.config) as c:
        chief = ssh_hosts.addresses[1]
        assert c.addresses == ssh_hosts.addresses
        assert c.is_chief()
        assert c.is_chief(chief)
        assert not c.is_chief(ssh_hosts.addresses[0])
        assert c.get_local_address() == chief
        assert c.get_local_worker_task_index() == 1
        assert c.get_local_session_target() == "grpc://localhost:15001"
        for index, address in enumerate(sorted(ssh_hosts.addresses)):
            assert c.get_address_from_task("worker", index) == address
        with pytest.raises(ValueError):
            c.get_address_from_task("worker", 3)
        monkeypatch.setenv("AUTODIST_WORKER", ssh_hosts.addresses[2])
        assert not c.is_chief()
        assert c.get_local_address() == ssh_hosts.addresses[2]
        assert c.get_local_worker_task_index() == 2
        assert c.get_local_session_target() == "grpc://localhost:15002"


def test_unknown_hostname_is_named(cluster, tmp_path):
    with pytest.raises(ValueError, match="'10.9.9.9' is not a node"):
        cluster.remote_file_write(str(tmp_path / "x"), "x", "10.9.9.9")
    with pytest.raises(ValueError, match="'h1' is not a node"):
        cluster.remote_copy(str(tmp_path), str(tmp_path / "y"), "h1")
    with pytest.raises(ValueError, match="'nosuch' is not a node"):
        cluster.remote_exec(["true"], "nosuch")


def closed_port():
    with socket.socket() as s:
        s.bind(("10.200.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("where", ["absent host", "closed port"])
def test_unreachable_host_is_named(ssh_hosts, tmp_path, where):
    if where == "absent host":
        spec = ssh_hosts.resource_spec(tmp_path / "spec.yml",
                                       addresses=[ssh_hosts.addresses[0], "10.200.0.99"])
        host, port = "10.200.0.99", None
    else:
        # The bridge's own address, on a port where nothing listens.
        host, port = "10.200.0.1", closed_port()
        spec = ssh_hosts.resource_spec(tmp_path / "spec.yml",
                                       addresses=[ssh_hosts.addresses[0], host])
        text = Path(spec).read_text().replace("port: 22", "port: %d" % port)
        Path(spec).write_text(text)
    with SSHCluster(spec, ssh_config=ssh_hosts.config, ssh_options=["ConnectTimeout=5"]) as c:
        with pytest.raises(RuntimeError) as raised:
            c.remote_file_write(str(tmp_path / "x"), "data", host)
        message = str(raised.value)
        assert "ssh to %s failed" % host in message
        assert "ssh:" in message or "connect" in message.lower()
        local = tmp_path / "f"
        local.write_text("x")
        with pytest.raises(RuntimeError, match="ssh to %s failed" % host.replace(".", r"\.")):
            c.remote_copy(str(local), str(tmp_path / "d"), host)
        proc = c.remote_exec(["true"], host, stderr=subprocess.PIPE)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 255 and err


def test_close_removes_the_control_master_directory(ssh_hosts, tmp_path):
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml")
    c = SSHCluster(spec, ssh_config=ssh_hosts.config)
    control_dir = c._impl.control_dir
    c.remote_file_write(str(tmp_path / "x"), "x", ssh_hosts.addresses[0])
    assert os.listdir(control_dir), "no ControlMaster socket"
    c.close()
    c.close()
    assert not os.path.exists(control_dir)
    with pytest.raises(RuntimeError, match="closed"):
        c.is_chief()


def test_run_argv(ssh_hosts, tmp_path):
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml")
    with SSHCluster(spec, ssh_config=ssh_hosts.config, check_host_keys=False) as c:
        argv = c.run_argv("python3 train.py --x 'a b'", driver_address="10.200.0.1",
                          env={"A": "1"}, grace=2)
        assert argv[1:] == ["run", "--engine", "ssh", "--hosts", spec, "--ssh-config",
                            ssh_hosts.config, "--no-host-key-check", "--nodes", "3",
                            "--driver-address", "10.200.0.1", "--env", "A=1", "--grace", "2",
                            "--", "python3", "train.py", "--x", "a b"]


def ssh_engine_ready():
    if not os.access(DROVER, os.X_OK):
        return False
    try:
        help_text = subprocess.run([DROVER, "run", "--help"], capture_output=True, text=True,
                                   timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--ssh-config" in help_text.stdout + help_text.stderr


needs_ssh_engine = pytest.mark.skipif(
    not ssh_engine_ready(),
    reason="waiting on the ssh engine: `drover run --engine ssh` (--ssh-config) is not in %s"
    % DROVER)


@needs_ssh_engine
def test_start_and_terminate(cluster, ssh_hosts, tmp_path, mark):
    out = tmp_path / "started"
    out.mkdir()
    script = "touch %s/$(hostname -I | cut -d' ' -f1); sleep 600" % out
    log = tmp_path / "run.log"
    with open(log, "w") as log_file:
        process = cluster.start(["bash", "-c", script], timeout=240, log=log_file, grace=2)
        assert process.poll() is None
        wait_for(lambda: len(os.listdir(out)) == 3, "a program on every node", timeout=120)
        code = cluster.terminate()
        assert code is not None
        assert cluster.terminate() == code  # idempotent
    assert "formed" in log.read_text()


STARTER = r"""
import sys, time
from drover.ssh import SSHCluster
cluster = SSHCluster(sys.argv[1], ssh_config=sys.argv[2])
cluster.start(["sh", "-c", "setsid sleep 600 & echo ready; wait"], timeout=240, grace=2)
open(sys.argv[3], "w").close()
print("started", file=sys.stderr, flush=True)
time.sleep(600)
"""


@needs_ssh_engine
def test_start_does_not_outlive_a_killed_interpreter(ssh_hosts, tmp_path, mark):
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml",
                                   extra_ssh="    shared_envs: {%s: %s}" % (MARK_VARIABLE, mark))
    script = tmp_path / "starter.py"
    script.write_text(STARTER)
    # The mark on this side too: the guard, drover run and its ssh clients.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in __import__("sys").path if p),
               **{MARK_VARIABLE: mark})
    started = tmp_path / "started"
    output = tmp_path / "starter.out"
    with open(output, "w") as out:
        starter = subprocess.Popen(
            ["/usr/bin/python3", str(script), str(spec), ssh_hosts.config, str(started)],
            env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        # start() returned: a file, not a line on the stdout the run's tagged
        # output shares (one such wait once saw nothing for 10 minutes).
        try:
            wait_for(lambda: started.exists() or starter.poll() is not None,
                     "SSHCluster.start to return", timeout=300)
        finally:
            if not started.exists():
                raise AssertionError("SSHCluster.start did not return; the starter's output:\n"
                                     + output.read_text())
        # Progress before the fault: the program runs on every host.
        wait_for(lambda: len([p for p, c in marked_processes(mark) if c.startswith("sleep 600")])
                 == 3, "a program on every host", timeout=120)
        starter.kill()
        starter.wait(60)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
    # The mark fixture checks that nothing is left on any host.


@needs_ssh_engine
def test_start_that_cannot_form_raises(ssh_hosts, tmp_path):
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml",
                                   addresses=[ssh_hosts.addresses[0], "10.200.0.99"])
    with SSHCluster(spec, ssh_config=ssh_hosts.config) as c:
        with pytest.raises((RuntimeError, TimeoutError), match="formed"):
            c.start(["true"], timeout=120, log=None)
        assert c._run.process.poll() is not None


# --- issue 22: AutoDist's ResourceSpec, start() and remote environment ---------


def test_issue_22_remote_exec_sets_autodist_default_environment(cluster, ssh_hosts):
    proc = cluster.remote_exec(["echo", "level=$TF_CPP_MIN_LOG_LEVEL"], ssh_hosts.addresses[1],
                               stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.decode().strip() == "level=0"


def test_issue_22_remote_pre_start_tf_server_copies_starter_and_spec(cluster, ssh_hosts,
                                                                     tmp_path):
    import json
    from drover.compat import tf_server_starter
    host = ssh_hosts.addresses[2]
    remote_dir = "/tmp/drover-issue22-%s" % os.getpid()
    try:
        cluster.remote_pre_start_tf_server(host, tf_server_starter.__file__, remote_dir)
        spec = ssh_hosts.ssh(host, "cat %s/cluster_spec.json" % remote_dir).stdout
        assert json.loads(spec) == cluster.cluster_spec
        assert cluster.cluster_spec == {
            "worker": ["%s:%d" % (a, 15000 + i) for i, a in enumerate(sorted(ssh_hosts.addresses))]}
        assert remote_sha256(ssh_hosts, host, remote_dir + "/tf_server_starter.py") == \
            hashlib.sha256(Path(tf_server_starter.__file__).read_bytes()).hexdigest()
    finally:
        ssh_hosts.ssh(host, "rm -rf %s" % remote_dir, check=False)


def test_issue_22_start_without_command_names_each_host_without_tensorflow(ssh_hosts, tmp_path,
                                                                           mark):
    import importlib.util
    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("checks the error raised where TensorFlow is missing")
    addresses = ssh_hosts.addresses[:2]
    spec = ssh_hosts.resource_spec(tmp_path / "spec.yml", addresses=addresses,
                                   extra_ssh="    shared_envs: {%s: %s}" % (MARK_VARIABLE, mark))
    with SSHCluster(drover.ResourceSpec(spec), ssh_config=ssh_hosts.config) as c:
        with pytest.raises(RuntimeError) as error:
            c.start(timeout=120)
        assert c.subprocesses == []
    message = str(error.value)
    assert "2 of 2 TensorFlow servers did not start" in message
    # The chief's server runs here, the other's over ssh; both lack TensorFlow.
    for address in addresses:
        assert "on %s: TensorFlow is missing on this host" % address in message

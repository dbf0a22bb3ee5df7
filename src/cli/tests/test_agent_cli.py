"""`drover agent` as a black box: started by hand against `drover rendezvous`."""
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import time

from conftest import clean_env, drover_bin, start_server

# A stand-in for a Dask worker: starts the agent, says its pid, then waits.
PARENT = """
import os, subprocess, sys, time
drover, address, token_file, pid_file = sys.argv[1:5]
agent = subprocess.Popen([drover, "agent", "--rendezvous", address, "--token-file", token_file,
                          "--executor-id", "0", "--host", "127.0.0.1", "--grace", "2",
                          "--exit-with-parent", str(os.getpid()), "--",
                          "/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 120"],
                         stdin=subprocess.DEVNULL)
print(agent.pid, flush=True)
time.sleep(120)
"""


def gone(pid):
    """True once `pid` has exited (a zombie nobody reaped yet counts)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def eventually(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_agent_stops_its_program_when_its_parent_is_killed(tmp_path):
    server, token_file, address = start_server(tmp_path, "--nodes", "1", "--timeout", "60")
    pid_file = tmp_path / "program.pid"
    parent = subprocess.Popen(["/usr/bin/python3", "-c", PARENT, drover_bin(), address,
                               str(token_file), str(pid_file)],
                              env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              text=True)
    try:
        agent_pid = int(parent.stdout.readline())
        assert eventually(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"))
        program_pid = int(pid_file.read_text())
        assert not gone(agent_pid) and not gone(program_pid)
        parent.kill()
        parent.wait(timeout=30)
        assert eventually(lambda: gone(agent_pid)), "the agent outlived its parent"
        assert eventually(lambda: gone(program_pid)), "the program outlived its agent"
    finally:
        parent.kill()
        parent.wait(timeout=30)
        os.killpg(server.pid, signal.SIGKILL)
        server.communicate(timeout=30)


def test_agent_whose_parent_is_already_gone_exits_at_once(tmp_path, drover):
    token_file = tmp_path / "token"
    token_file.write_text("ab" * 32)
    token_file.chmod(0o600)
    # pid 1 is never the parent of a process started here.
    result = drover("agent", "--rendezvous", "127.0.0.1:1", "--token-file", str(token_file),
                    "--executor-id", "0", "--exit-with-parent", "1", "--", "/bin/true")
    assert result.returncode == 1
    assert "--exit-with-parent 1" in result.stderr and "is gone" in result.stderr


def test_feed_plan_file_and_inline_are_exclusive(tmp_path, drover):
    token_file = tmp_path / "token"
    token_file.write_text("ab" * 32)
    token_file.chmod(0o600)
    plan = json.dumps({"mode": "train", "format": "pickle", "external": True})
    result = drover("agent", "--rendezvous", "127.0.0.1:1", "--token-file", str(token_file),
                    "--executor-id", "0", "--feed-plan", str(tmp_path / "plan.json"),
                    "--feed-plan-json", plan, "--", "/bin/true")
    assert result.returncode == 2
    assert "--feed-plan and --feed-plan-json" in result.stderr


def node_credential(token_file, executor_id):
    """docs/security.md's node credential, derived here independently of
    drover: HKDF-SHA256 (RFC 5869) of the token, no salt, info
    "drover-node-v1" 0x00 executor_id."""
    token = bytes.fromhex(token_file.read_text().strip())
    prk = hmac.new(b"\0" * 32, token, hashlib.sha256).digest()
    info = b"drover-node-v1\0" + executor_id.encode()
    key = hmac.new(prk, info + b"\x01", hashlib.sha256).hexdigest()
    return "drover-node-v1 %s %s\n" % (executor_id, key)


def run_agent_with_credential_on_stdin(address, executor_id, line, *command):
    """Runs `drover agent --token-file -` with `line` on its stdin, kept open
    until the agent exits (its end would stop the node)."""
    agent = subprocess.Popen(
        [drover_bin(), "agent", "--rendezvous", address, "--token-file", "-", "--executor-id",
         executor_id, "--host", "127.0.0.1", "--", *command],
        env=clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    agent.stdin.write(line)
    agent.stdin.flush()
    try:
        agent.wait(timeout=60)
    finally:
        agent.kill()
        agent.stdin.close()
    return agent.returncode, agent.stdout.read(), agent.stderr.read()


def test_agent_with_its_node_credential_on_stdin_joins_and_another_executors_cannot(tmp_path):
    """What the ssh and slurm engines do: the node's credential on stdin (#15)."""
    server, token_file, address = start_server(tmp_path, "--nodes", "1", "--timeout", "60")
    try:
        code, _, err = run_agent_with_credential_on_stdin(
            address, "0", node_credential(token_file, "1"), "/bin/true")
        assert code == 1
        assert err == ("drover agent 0: the credential given is the node credential of "
                       "executor 1, not executor 0's\n")
        code, out, err = run_agent_with_credential_on_stdin(
            address, "0", node_credential(token_file, "0"), "/bin/echo", "joined")
        assert code == 0, err
        assert "joined" in out
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.communicate(timeout=30)


def test_a_hosts_agent_refuses_malformed_nodes_with_exit_2(tmp_path):
    """`--node` is drover run's (the local engine's); bad specs are one line and exit 2."""
    token = tmp_path / "token"
    token.write_text("unused\n")

    def agent(*flags):
        done = subprocess.run([drover_bin(), "agent", "--rendezvous", "127.0.0.1:1", *flags,
                               "--", "/bin/true"], env=clean_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        return done.returncode, done.stderr

    code, err = agent("--status-fd", "9", "--node", "0:1")
    assert code == 2 and "--node takes ID:OUTPUT_FD:GPUS[:TOKEN_FILE]; got '0:1'" in err, err
    code, err = agent("--status-fd", "9", "--node", "0:x::" + str(token))
    assert code == 2 and "--node takes ID:OUTPUT_FD:GPUS[:TOKEN_FILE]" in err, err
    code, err = agent("--node", "0:1::" + str(token))
    assert code == 2 and "--node needs --status-fd FD" in err, err
    code, err = agent("--status-fd", "9", "--executor-id", "0", "--node", "0:1::" + str(token))
    assert code == 2 and "not --executor-id or --gpus" in err, err
    # One credential a node, or the cluster token for the host's connection.
    code, err = agent("--status-fd", "9", "--node", "0:1:")
    assert code == 2 and "--node 0:1: needs its TOKEN_FILE, or give the cluster token" in err, err
    code, err = agent("--status-fd", "9", "--token-file", str(token), "--node",
                      "0:1::" + str(token))
    assert code == 2 and "the nodes share the host's connection" in err, err
    code, err = agent("--status-fd", "9", "--elastic", "--node", "0:1::" + str(token))
    assert code == 2 and "not elastic" in err, err
    code, err = agent("--status-fd", "9", "--node", "0:1::" + str(tmp_path / "missing"))
    assert code == 2 and "executor 0" in err, err
    # Relayed nodes (OUTPUT_FD '-', the ssh engine's) send everything on stdout.
    code, err = agent("--status-fd", "9", "--node", "0:-::-", "--node", "1:-::-")
    assert code == 2 and "send their exit codes on stdout: no --status-fd" in err, err
    code, err = agent("--status-fd", "9", "--node", "0:-::-", "--node", "1:1::-")
    assert code == 2 and "--node 1:1::-: every node's OUTPUT_FD is '-'" in err, err


def test_a_relayed_hosts_agent_says_why_it_stopped_in_a_frame(tmp_path):
    """With OUTPUT_FD '-' even the agent's own error goes framed on stdout,
    as node 0's output, and the stream ends: the driver shows it."""
    done = subprocess.run([drover_bin(), "agent", "--rendezvous", "127.0.0.1:1", "--node",
                           "0:-::-", "--node", "1:-::-", "--", "/bin/true"], env=clean_env(),
                          input=b"", capture_output=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr == b"", done.stderr
    message = b"stdin ended before the credential (--token-file -)"
    # The agent writes its line in one write, so in one frame.
    frame = re.search(rb"^\x1eo0 ([0-9]+)\n", done.stdout)
    assert frame, done.stdout
    payload = done.stdout[frame.end():frame.end() + int(frame.group(1))]
    assert payload == b"drover agent: executor 0: " + message + b"\n", done.stdout
    # Every channel's end follows.
    assert b"\x1ee0 0\n" in done.stdout and b"\x1ee1 0\n" in done.stdout, done.stdout

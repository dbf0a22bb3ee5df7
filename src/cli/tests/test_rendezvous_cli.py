"""`drover rendezvous` as a black box: nodes (Python clients) join, JSON comes out."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import clean_env, drover_bin, start_server

PYTHONPATH = os.environ.get("DROVER_PYTHONPATH", "")

NODE = """
import sys, drover
token = drover.ClusterToken.read_file(sys.argv[2])
client = drover.RendezvousClient(sys.argv[1], token, name="node " + sys.argv[3], timeout=30)
formed = client.register(sys.argv[3], "127.0.0.1", [31000 + int(sys.argv[3])], timeout=30)
print(formed["job_name"], formed["task_index"])
"""


def run_node(address, token_file, executor_id):
    env = clean_env(PYTHONPATH=PYTHONPATH)
    return subprocess.Popen(["/usr/bin/python3", "-c", NODE, address, str(token_file), executor_id],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(not PYTHONPATH, reason="needs the Python module (DROVER_PYTHONPATH)")
def test_nodes_join_and_the_cluster_is_printed(tmp_path):
    proc, token_file, address = start_server(tmp_path, "--nodes", "2", "--chief", "--timeout", "60")
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    nodes = [run_node(address, token_file, e) for e in ("0", "1")]
    outs = [n.communicate(timeout=60) for n in nodes]
    assert all(n.returncode == 0 for n in nodes), outs
    assert sorted(o[0].strip() for o in outs) == ["chief 0", "worker 0"]
    # Nodes closed their connections: the server notices every node has gone and exits.
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    result = json.loads(stdout)
    assert result["cluster"] == {"chief": ["127.0.0.1:31000"], "worker": ["127.0.0.1:31001"]}
    assert [n["executor_id"] for n in result["nodes"]] == ["0", "1"]


@pytest.mark.skipif(not PYTHONPATH, reason="needs the Python module (DROVER_PYTHONPATH)")
def test_reservation_timeout_lists_who_is_missing(tmp_path):
    proc, token_file, address = start_server(tmp_path, "--nodes", "3", "--timeout", "2")
    node = run_node(address, token_file, "1")
    node.communicate(timeout=60)
    assert node.returncode != 0
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert stdout == ""
    assert "executors 1" in stderr and "missing 2" in stderr


def test_interrupt_while_waiting_exits_cleanly(tmp_path):
    proc, _, _ = start_server(tmp_path, "--nodes", "2")
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "interrupted while waiting for nodes (0 of 2 registered)" in stderr


def test_world_readable_token_file_is_bad_input(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("ab" * 32 + "\n")
    token_file.chmod(0o644)
    out = subprocess.run([drover_bin(), "rendezvous", "--nodes", "1", "--token-file",
                          str(token_file)], env=clean_env(), capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=30)
    assert out.returncode == 2
    assert "chmod 600" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_roles_that_do_not_fit_are_bad_input(tmp_path):
    out = subprocess.run([drover_bin(), "rendezvous", "--nodes", "1", "--ps", "1", "--chief",
                          "--token-file", str(tmp_path / "t")], env=clean_env(),
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert out.returncode == 2
    assert "cannot hold" in out.stderr

"""drover.report: checked arguments, what reaches the node's agent (a real
datagram socket read here as the agent reads it), and the values on a real
`drover run`'s record."""
import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import drover

DROVER = os.path.abspath(os.environ.get("DROVER_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "bin", "drover"))
PYTHONPATH = os.pathsep.join(p for p in sys.path if p and os.path.isdir(os.path.join(p, "drover")))


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    env["PYTHONPATH"] = PYTHONPATH
    return env


def test_outside_drover_a_report_does_nothing_but_checks_its_arguments():
    assert not drover.reports_enabled()
    drover.report(step=3, loss=0.5, acc=np.float32(0.9), n=np.int64(4), flag=True)
    drover.report(loss=float("nan"))
    drover.flush_reports()
    with pytest.raises(ValueError, match="metric name 'bad name'"):
        drover.report(**{"bad name": 1.0})
    with pytest.raises(TypeError, match="'loss' must be a number, not str"):
        drover.report(loss="low")
    with pytest.raises(TypeError, match="'loss' must be a number, not list"):
        drover.report(loss=[1.0])
    with pytest.raises(TypeError, match="step must be an int"):
        drover.report(step=1.5, loss=1.0)


def test_values_reach_the_socket_from_parent_and_forked_child_flushed_at_exit(tmp_path):
    path = str(tmp_path / "metrics.sock")
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    inbox.bind(path)
    inbox.settimeout(30)
    program = textwrap.dedent("""
        import os, drover, numpy as np
        assert drover.reports_enabled()
        for step in range(1000):
            drover.report(step=step, loss=1.0 / (step + 1))
        drover.report(acc=np.float32(0.5))
        pid = os.fork()  # a data loader's worker reports through its own reporter
        if pid == 0:
            drover.report(step=7, child=1.0)
            drover.flush_reports()
            os._exit(0)
        os.waitpid(pid, 0)
        # no flush: exit sends what is left
    """)
    env = clean_env()
    env["DROVER_REPORT_SOCKET"] = path
    done = subprocess.run(["/usr/bin/python3", "-c", program], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    inbox.setblocking(False)
    latest = {}
    while True:
        try:
            datagram = inbox.recv(65536).decode()
        except BlockingIOError:
            break
        for line in datagram.splitlines():
            name, value, *step = line.split(" ")
            latest[name] = (float(value), int(step[0]) if step else None)
    assert latest == {"loss": (1.0 / 1000, 999), "acc": (0.5, None), "child": (1.0, 7)}


def test_a_runs_record_holds_each_nodes_last_values(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent("""
        import drover
        ctx = drover.context()
        for step in range(50):
            drover.report(step=step, loss=1.0 / (step + 1) + ctx.task_index)
        drover.report(accuracy=0.9)
    """))
    done = subprocess.run([DROVER, "run", "--nodes", "2", "--log-dir", str(tmp_path / "logs"),
                           "--", "/usr/bin/python3", str(script)], env=clean_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "logs" / "run.json").read_text())
    nodes = {n["task"]: n for n in record["nodes"]}
    assert nodes["worker:1"]["metrics"]["loss"] == {"value": 1.0 / 50 + 1, "step": 49}
    assert nodes["worker:0"]["metrics"]["accuracy"] == {"value": 0.9, "step": None}
    assert record["metrics_task"] == "worker:0"
    assert record["metrics"] == {"accuracy": 0.9, "loss": 1.0 / 50}
    assert "metrics (worker:0): accuracy 0.9  loss 0.02" in done.stderr

"""`drover logs`, `drover status --list` and `drover status RUN1 RUN2` (#21) as a
user runs them: real `drover run`s of two nodes, their real log directories and
run.json, a real status server for -f.

A live run's program waits for a file the test creates once the follower has
printed the program's first line, so every wait here is on something seen,
never on time passing; the timeouts only keep a broken build from hanging.
"""
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time

import pytest

from conftest import clean_env, drover_bin

TIMEOUT = 60


@pytest.fixture
def env(tmp_path):
    """The environment of every drover here: its own live-runs directory, so
    `drover logs` with no RUN finds this test's run and no other."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    return clean_env(XDG_RUNTIME_DIR=runtime)


def drover(env, *args, cwd=None):
    return subprocess.run([drover_bin(), *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT)


def finished_run(env, log_dir, program):
    return drover(env, "run", "--nodes", "2", "--log-dir", str(log_dir), "--", "sh", "-c", program)


class Output:
    """A process's stdout, read line by line on a thread, so that the test can
    wait for a line with a timeout."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self._queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, predicate, what):
        """Reads until predicate(lines so far) holds; returns the lines."""
        deadline = time.monotonic() + TIMEOUT
        while not predicate(self.lines):
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"timed out waiting for {what}; got {self.lines!r}")
            assert line is not None, f"output ended before {what}; got {self.lines!r}"
            self.lines.append(line)
        return self.lines

    def rest(self):
        """Every line to the end of the output."""
        while True:
            try:
                line = self._queue.get(timeout=TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"output did not end; got {self.lines!r}")
            if line is None:
                return self.lines
            self.lines.append(line)


class LiveRun:
    """`drover run --nodes 2` in the background whose program prints
    `hello RANK`, waits for the file `go`, prints `after RANK` and ends."""

    def __init__(self, tmp_path, env, *args):
        self.go = tmp_path / "go"
        self.log_dir = tmp_path / "live"
        self.err_path = tmp_path / "run.err"
        # At most 60 s, so that a failing test leaves nothing running.
        program = ("echo hello $RANK; i=0; "
                   f"while [ ! -e '{self.go}' ] && [ $i -lt 1200 ]; do "
                   "sleep 0.05; i=$((i+1)); done; echo after $RANK")
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [drover_bin(), "run", "--nodes", "2", "--log-dir", str(self.log_dir), *args,
                 "--", "sh", "-c", program],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True)

    def wait_for_status_server(self):
        deadline = time.monotonic() + TIMEOUT
        while "status page http://" not in self.err_path.read_text():
            assert self.proc.poll() is None, self.err_path.read_text()
            assert time.monotonic() < deadline, self.err_path.read_text()
            time.sleep(0.05)

    def wait_for_log_lines(self, count):
        """Until each node's log holds `count` lines."""
        deadline = time.monotonic() + TIMEOUT
        while not all((self.log_dir / f"worker-{rank}.log").exists() and
                      (self.log_dir / f"worker-{rank}.log").read_text().count("\n") >= count
                      for rank in range(2)):
            assert self.proc.poll() is None, self.err_path.read_text()
            assert time.monotonic() < deadline, self.err_path.read_text()
            time.sleep(0.05)

    def release(self):
        self.go.touch()

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def start_logs(env, *args):
    proc = subprocess.Popen([drover_bin(), "logs", *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, Output(proc)


def end_of(proc):
    try:
        err = proc.stderr.read()
        return proc.wait(timeout=TIMEOUT), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def both_hellos(lines):
    return "[worker:0] hello 0" in lines and "[worker:1] hello 1" in lines


def test_logs_of_a_finished_run_every_node_one_node_and_the_tail(env, tmp_path):
    logs = tmp_path / "drover-logs" / "run-a"
    done = finished_run(env, logs, "for i in 1 2 3; do echo line $i of $RANK; done")
    assert done.returncode == 0, done.stderr

    every = drover(env, "logs", str(logs))
    assert every.returncode == 0, every.stderr
    # Nodes one after another, in the order roles are handed out.
    assert every.stdout.splitlines() == [f"[worker:{rank}] line {i} of {rank}"
                                         for rank in (0, 1) for i in (1, 2, 3)]

    one = drover(env, "logs", str(logs), "worker:1")
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == ["line 1 of 1", "line 2 of 1", "line 3 of 1"]

    # A bare run id names ./drover-logs/<id>; worker-1 is the file's spelling.
    tail = drover(env, "logs", "run-a", "worker-1", "--tail", "2", cwd=tmp_path)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == ["line 2 of 1", "line 3 of 1"]
    tails = drover(env, "logs", "run-a", "--tail", "1", cwd=tmp_path)
    assert tails.stdout.splitlines() == ["[worker:0] line 3 of 0", "[worker:1] line 3 of 1"]
    assert drover(env, "logs", str(logs), "--tail", "0").stdout == ""


def test_logs_bad_input_is_one_clear_line(env, tmp_path):
    logs = tmp_path / "logs"
    assert finished_run(env, logs, "echo hi").returncode == 0

    unknown = drover(env, "logs", str(logs), "worker:9")
    assert unknown.returncode == 1
    assert unknown.stderr == ("drover logs: no task worker:9 in run logs; "
                              "tasks: worker:0, worker:1\n")
    not_a_task = drover(env, "logs", str(logs), "worker")
    assert not_a_task.returncode == 2
    assert len(not_a_task.stderr.splitlines()) == 1 and "not a task" in not_a_task.stderr
    bad_tail = drover(env, "logs", str(logs), "--tail", "-1")
    assert bad_tail.returncode == 2 and len(bad_tail.stderr.splitlines()) == 1

    missing = drover(env, "logs", str(tmp_path / "absent"))
    assert missing.returncode == 1
    assert len(missing.stderr.splitlines()) == 1 and "absent" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = drover(env, "logs", str(tmp_path / "empty"))
    assert empty.returncode == 1 and "not a run's log directory" in empty.stderr
    dead = drover(env, "logs", "127.0.0.1:1")
    assert dead.returncode == 1
    assert dead.stderr.startswith("drover logs: cannot reach a status server at http://127.0.0.1:1")
    assert len(dead.stderr.splitlines()) == 1
    none = drover(env, "logs")
    assert none.returncode == 1
    assert "no drover run with a status server is running" in none.stderr
    assert len(none.stderr.splitlines()) == 1


def test_follow_the_run_going_on_here_to_its_end(env, tmp_path):
    """No RUN: the live run, from its status server. The lines printed after
    the follower started come once each, and the follower ends with the run
    (the server stops at once then: the last lines come from the files)."""
    run = LiveRun(tmp_path, env)
    try:
        run.wait_for_status_server()
        follower, out = start_logs(env, "-f")
        out.until(both_hellos, "the first line of each node")
        run.release()
        lines = out.rest()
        code, err = end_of(follower)
        assert code == 0, err
        assert sorted(lines) == ["[worker:0] after 0", "[worker:0] hello 0",
                                 "[worker:1] after 1", "[worker:1] hello 1"], (lines, err)
        assert lines.index("[worker:0] hello 0") < lines.index("[worker:0] after 0")
        assert lines.index("[worker:1] hello 1") < lines.index("[worker:1] after 1")
        assert run.proc.wait(timeout=TIMEOUT) == 0, run.err_path.read_text()
    finally:
        run.stop()


def test_follow_one_task_ends_when_the_server_says_the_run_ended(env, tmp_path):
    """--status-linger keeps the server up after the end: the follower ends
    on the phase it reports, not on the server going away."""
    run = LiveRun(tmp_path, env, "--status-linger", "120")
    try:
        run.wait_for_status_server()
        follower, out = start_logs(env, "worker:1", "-f", "--tail", "5")
        out.until(lambda lines: "hello 1" in lines, "worker:1's first line")
        run.release()
        lines = out.rest()
        code, err = end_of(follower)
        assert code == 0, err
        assert lines == ["hello 1", "after 1"], (lines, err)
        assert run.proc.poll() is None, "the driver should still be lingering"
        # The server still answers: a plain look at it gives the last lines.
        shown = drover(env, "logs", "--tail", "1")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == ["[worker:0] after 0", "[worker:1] after 1"]
        run.proc.send_signal(signal.SIGTERM)  # ends the linger
        assert run.proc.wait(timeout=TIMEOUT) == 0, run.err_path.read_text()
    finally:
        run.stop()


def test_follow_a_log_directory_until_its_run_json_appears(env, tmp_path):
    run = LiveRun(tmp_path, env)
    try:
        run.wait_for_log_lines(1)
        follower, out = start_logs(env, str(run.log_dir), "-f")
        out.until(both_hellos, "the first line of each node")
        assert not (run.log_dir / "run.json").exists()
        run.release()
        lines = out.rest()
        code, err = end_of(follower)
        assert code == 0, err
        # Nodes one after another for what was there, then lines as they come.
        assert lines[:2] == ["[worker:0] hello 0", "[worker:1] hello 1"], lines
        assert sorted(lines[2:]) == ["[worker:0] after 0", "[worker:1] after 1"], lines
        assert (run.log_dir / "run.json").exists()
    finally:
        run.stop()


def write_record(directory, record):
    directory.mkdir(parents=True)
    (directory / "run.json").write_text(json.dumps(record))


def table_rows(text):
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


def test_status_list_shows_every_run_newest_first(env, tmp_path):
    runs = tmp_path / "drover-logs"
    assert finished_run(env, runs / "run-ok", "echo ok").returncode == 0
    failed = finished_run(env, runs / "run-failed", "exit 3")
    assert failed.returncode == 1, failed.stderr
    # The metrics field as the driver writes it once programs report; by hand here.
    record = json.loads((runs / "run-ok" / "run.json").read_text())
    record.update(started_at=time.time() + 3600, elapsed_s=12.5,
                  metrics={"loss": 0.041, "acc": 0.97},
                  feed={"records": 40000, "bytes": 1000})
    write_record(runs / "run-by-hand", record)
    (runs / "run-broken").mkdir()
    (runs / "run-broken" / "run.json").write_text('{"phase": "succ')
    hour_ago = time.time() - 3600
    os.utime(runs / "run-broken" / "run.json", (hour_ago, hour_ago))
    (runs / "run-live").mkdir()  # no run.json: not a finished run

    listed = drover(env, "status", "--list", cwd=tmp_path)  # ./drover-logs
    assert listed.returncode == 0, listed.stderr
    rows = table_rows(listed.stdout)
    assert rows[0] == ["RUN", "STARTED", "DURATION", "RESULT", "NODES", "RECORDS", "METRICS",
                       "COMMAND"]
    assert [row[0] for row in rows[1:]] == ["run-by-hand", "run-failed", "run-ok", "run-broken"]
    by_hand, failed_row, ok_row, broken = rows[1:]
    assert by_hand[2:] == ["12.5 s", "succeeded", "2", "40,000", "acc=0.97 loss=0.041",
                           "sh -c echo ok"], by_hand
    assert failed_row[3:5] == ["failed (exit 1)", "2"], failed_row
    assert failed_row[-2:] == ["-", "sh -c exit 3"], failed_row
    assert ok_row[3] == "succeeded" and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", ok_row[1])
    assert broken[3] == "unreadable" and broken[-1] == "run.json: not JSON", broken

    assert drover(env, "status", "--list", str(runs)).stdout == listed.stdout
    missing = drover(env, "status", "--list", str(tmp_path / "absent"))
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1
    both = drover(env, "status", "--list", "--json")
    assert both.returncode == 2


def test_status_compares_two_runs_side_by_side(env, tmp_path):
    runs = tmp_path / "drover-logs"
    assert finished_run(env, runs / "run-a", "echo a").returncode == 0
    record = json.loads((runs / "run-a" / "run.json").read_text())
    record.update(elapsed_s=20.0, exit_code=1, phase="failed",
                  feed={"records": 40000, "bytes": 1000}, metrics={"loss": 0.5, "acc": 0.9})
    write_record(runs / "run-b", record)

    compared = drover(env, "status", "run-a", str(runs / "run-b"), cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    rows = {row[0]: row[1:] for row in table_rows(compared.stdout)}
    assert rows["RUN"] == ["run-a", "run-b"]
    assert rows["command"] == ["sh -c echo a", "sh -c echo a"]
    assert rows["result"] == ["succeeded", "failed (exit 1)"]
    assert rows["nodes"] == ["2", "2"]
    assert rows["records"] == ["-", "40,000"]
    assert rows["records/s"] == ["-", "2,000"]
    assert rows["duration"][1] == "20.0 s"
    assert rows["rendezvous"][0].endswith(("ms", "s"))
    # Every metric of either run, "-" where a run has none.
    assert rows["metric acc"] == ["-", "0.9"]
    assert rows["metric loss"] == ["-", "0.5"]

    missing = drover(env, "status", "run-a", str(tmp_path / "absent"), cwd=tmp_path)
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1

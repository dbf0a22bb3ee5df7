"""Seeing a run (#9): the status page in headless Chromium, /api/cluster,
/metrics read by the Prometheus text-format parser, the token beyond
loopback, progress lines, `drover status`, the summary and run.json.

Every run here is a real `drover run` of real agents feeding testing/feed_reader
(a C++ DataFeed program, so these run under the sanitizers too) from a CSV file.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(__file__))
from cdp import Browser  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DROVER = os.path.abspath(os.environ.get("DROVER_BIN") or os.path.join(ROOT, "build", "bin",
                                                                        "drover"))
FEED_READER = os.path.abspath(os.environ.get("DROVER_FEED_READER") or os.path.join(
    ROOT, "build", "bin", "feed_reader"))
ARTIFACTS = os.environ.get("DROVER_ARTIFACTS_DIR")

_CLUSTER_VARS = ("TF_CONFIG", "SLURM_", "OMPI_", "PMI_", "PMIX_", "DROVER_", "AUTODIST_",
                 "JOB_COMPLETION_INDEX")


def env_for(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLUSTER_VARS)}
    # Each test its own registry of live runs, so `drover status` finds only its run.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def wait_for(what, predicate, timeout=60.0, interval=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


def write_csv(path, count):
    with open(path, "w") as f:
        for i in range(count):
            f.write(f"{i},payload-{i:08d}\n")


class Run:
    """A `drover run` in the background: its status URL, its stderr, its end."""

    def __init__(self, tmp_path, *args, env=None, reader_args=(), nodes=2):
        self.tmp_path = tmp_path
        self.mark = "status-test-%d-%d" % (os.getpid(), time.monotonic_ns())
        self.err_path = tmp_path / "drover.err"
        self.out_path = tmp_path / "drover.out"
        self.log_dir = tmp_path / "logs"
        argv = [DROVER, "run", "--nodes", str(nodes), "--log-dir", str(self.log_dir), *args,
                "--", FEED_READER, "--out", str(tmp_path / "seen"), "--tag", self.mark,
                *reader_args]
        self.env = env or env_for(tmp_path)
        with open(self.err_path, "w") as err, open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, cwd=tmp_path, start_new_session=True)
        self.url = None

    def stderr(self):
        return self.err_path.read_text()

    def wait_url(self):
        def find():
            for line in self.stderr().splitlines():
                if "status page http://" in line:
                    return line.split("status page ", 1)[1].split()[0]
            assert self.proc.poll() is None, "drover run ended first:\n" + self.stderr()
            return None
        self.url = wait_for("the status page's address on stderr", find, timeout=30)
        return self.url

    def get(self, path, token=None):
        request = urllib.request.Request(self.url.rstrip("/") + path)
        if token:
            request.add_header("Authorization", "Bearer " + token)
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()

    def cluster(self):
        return json.loads(self.get("/api/cluster")[1])

    def finish(self, timeout=120):
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.stop()

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        assert_no_leftovers(self.mark)


def assert_no_leftovers(mark):
    def alive():
        found = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True)
        return [p for p in found.stdout.split() if int(p) != os.getpid()]
    for _ in range(50):
        if not alive():
            return
        time.sleep(0.1)
    assert alive() == [], "processes left behind: " + " ".join(alive())


@pytest.fixture
def slow_feed(tmp_path):
    """A CSV whose feeding takes a while with --sleep-us: records, path."""
    path = tmp_path / "data.csv"
    write_csv(path, 20000)
    return path


def feed_args(data, epochs=1):
    return ["--input", str(data), "--split-bytes", "32768", "--epochs", str(epochs)]


def artifact(tmp_path, name):
    directory = os.path.join(ARTIFACTS, "status") if ARTIFACTS else str(tmp_path)
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, name)


def test_page_shows_every_node_and_then_the_killed_one_as_failed(tmp_path, slow_feed):
    run = Run(tmp_path, *feed_args(slow_feed, epochs=50), "--status-linger", "60",
              reader_args=["--batch", "50", "--sleep-us", "20000"], nodes=3)
    try:
        url = run.wait_url()
        with Browser(url, width=1280, height=900, timeout=30,
                     artifacts_dir=str(tmp_path / "chromium")) as page:
            page.wait_for("document.querySelectorAll('#nodes tbody tr[data-state=running]')"
                          ".length === 3", 60, "three running nodes in the page's table")
            page.wait_for("parseInt((document.querySelector('#f-records') || {}).textContent"
                          " .replace(/[^0-9]/g, '') || '0') > 0", 30, "records fed on the page")
            time.sleep(3)  # a few points on the rate chart
            page.screenshot(artifact(tmp_path, "status-running.png"))
            assert page.evaluate("document.querySelectorAll('#nodes tbody tr').length") == 3
            # A node's log lines, by clicking its row.
            page.evaluate("document.querySelector('#nodes tbody tr[data-executor=\"1\"]').click()")
            page.wait_for("document.querySelector('#log-title').textContent.includes('worker:1')",
                          15, "worker:1's log panel")

            victim = next(n for n in run.cluster()["nodes"] if n["executor_id"] == "1")
            assert victim["program_pid"] > 0, victim
            os.kill(victim["program_pid"], signal.SIGKILL)
            page.wait_for("(document.querySelector('#nodes tbody tr[data-executor=\"1\"]') || {})"
                          ".dataset.state === 'failed'", 30, "worker:1 shown as failed")
            page.wait_for("document.body.dataset.phase === 'failed'", 30, "the run shown failed")
            page.screenshot(artifact(tmp_path, "status-failed.png"))
            states = page.evaluate("Array.from(document.querySelectorAll('#nodes tbody tr'))"
                                   ".map(r => r.dataset.state).join(',')")
            assert states.split(",")[1] == "failed", states
            assert states.split(",")[0] == states.split(",")[2] == "stopped", states
        # The linger ends at SIGTERM; the run failed.
        run.proc.send_signal(signal.SIGTERM)
        assert run.finish(timeout=30) == 1, run.stderr()
    finally:
        run.stop()
    assert "worker:1 (executor 1) failed" in run.stderr() and "SIGKILL" in run.stderr()


def metrics(run):
    status, text = run.get("/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for family in families.values():
        assert family.name.startswith("drover_"), family.name
        for sample in family.samples:
            assert sample.name.startswith("drover_"), sample.name
    return families


def sample_value(families, family, **labels):
    for sample in families[family].samples:
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise AssertionError(f"no {family} sample with {labels}")


def test_metrics_parse_and_counters_move_during_feeding(tmp_path, slow_feed):
    run = Run(tmp_path, *feed_args(slow_feed, epochs=20),
              reader_args=["--batch", "50", "--sleep-us", "20000"])
    try:
        run.wait_url()
        wait_for("records fed", lambda: sum(
            (n["feed"] or {}).get("records", 0) for n in run.cluster()["nodes"]) > 0)
        first = metrics(run)
        time.sleep(2.5)  # more than two heartbeats
        second = metrics(run)
        # prometheus_client names counter families without their _total suffix.
        for task in ("worker:0", "worker:1"):
            before = sample_value(first, "drover_feed_records", task=task)
            after = sample_value(second, "drover_feed_records", task=task)
            assert after > before, (task, before, after)
            assert sample_value(second, "drover_feed_bytes", task=task) > sample_value(
                first, "drover_feed_bytes", task=task)
            assert sample_value(second, "drover_feed_rate_records_per_second", task=task) > 0
            assert sample_value(second, "drover_node_heartbeat_age_seconds", task=task) < 10
            assert sample_value(second, "drover_feed_queue_capacity_bytes", task=task) > 0
        assert sample_value(second, "drover_nodes", state="running") == 2
        assert sample_value(second, "drover_nodes", state="failed") == 0
        assert sample_value(second, "drover_nodes_expected") == 2
        assert sample_value(second, "drover_rendezvous_duration_seconds") > 0
        assert sample_value(second, "drover_restarts") == 0
        assert second["drover_feed_records"].type == "counter"
        assert second["drover_nodes"].type == "gauge"
    finally:
        run.stop()


def test_api_and_metrics_want_the_token_beyond_loopback(tmp_path, slow_feed):
    token_file = tmp_path / "cluster.token"
    run = Run(tmp_path, *feed_args(slow_feed, epochs=20), "--status-address", "0.0.0.0",
              "--token-file", str(token_file), reader_args=["--sleep-us", "20000"])
    try:
        url = run.wait_url()
        assert (token_file.stat().st_mode & 0o777) == 0o600
        cluster_token = token_file.read_text().strip()
        # The page wants the status key, written beside the logs; the cluster
        # token itself never crosses HTTP and opens nothing there (#15).
        status_file = run.log_dir / "status.token"
        assert f"wants the status key in {status_file}" in run.stderr()
        token = status_file.read_text().strip()
        assert token.startswith("drover-status-v1-")
        assert cluster_token not in token
        run.url = url.replace("0.0.0.0", "127.0.0.1")
        wait_for("the cluster to form", lambda: json.loads(
            run.get("/api/cluster", token=token)[1])["phase"] == "running")
        for path in ("/api/cluster", "/metrics", "/api/nodes/0/log"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                run.get(path)
            assert refused.value.code == 401, path
            for wrong_token in ("0" * 64, cluster_token):
                with pytest.raises(urllib.error.HTTPError) as wrong:
                    run.get(path, token=wrong_token)
                assert wrong.value.code == 401, path
            assert run.get(path, token=token)[0] == 200, path
        assert run.get("/")[0] == 200  # the page holds no data
        address = run.url.split("//", 1)[1].rstrip("/")
        refused = subprocess.run([DROVER, "status", address], env=run.env, capture_output=True,
                                 text=True, timeout=30)
        assert refused.returncode == 1
        assert "wants the status key" in refused.stderr
        # Given the cluster token, drover status sends the status key derived from it.
        for given in (token_file, status_file):
            shown = subprocess.run([DROVER, "status", address, "--token-file", str(given)],
                                   env=run.env, capture_output=True, text=True, timeout=30)
            assert shown.returncode == 0, shown.stderr
            assert "worker:1" in shown.stdout
        # With no address, drover status finds the run and its token file itself.
        found = subprocess.run([DROVER, "status"], env=run.env, capture_output=True, text=True,
                               timeout=30)
        assert found.returncode == 0, found.stderr
        assert "worker:0" in found.stdout
    finally:
        run.stop()


def test_beyond_loopback_without_a_token_file_writes_one_beside_the_logs(tmp_path):
    (tmp_path / "d.csv").write_text("1\n2\n")
    run = Run(tmp_path, "--input", str(tmp_path / "d.csv"), "--status-address", "0.0.0.0",
              reader_args=["--sleep-us", "3000000"])
    try:
        run.wait_url()
        token_file = run.log_dir / "status.token"
        assert f"wants the status key in {token_file}" in run.stderr()
        assert (token_file.stat().st_mode & 0o777) == 0o600
        assert token_file.read_text().startswith("drover-status-v1-")
    finally:
        run.stop()


def test_rendezvous_progress_names_the_node_it_waits_for(tmp_path):
    (tmp_path / "d.csv").write_text("1\n")
    # DROVER_TEST_SKIP_AGENT (test only): the local engine never starts executor 1.
    run = Run(tmp_path, "--input", str(tmp_path / "d.csv"), "--reservation-timeout", "6",
              "--progress", "plain", "--progress-interval", "0.5",
              env=env_for(tmp_path, DROVER_TEST_SKIP_AGENT="1"))
    try:
        run.wait_url()
        cluster = wait_for("the rendezvous to show the registered node",
                           lambda: (lambda c: c if c["rendezvous"]["registered"] == 1 else None)(
                               run.cluster()))
        assert cluster["phase"] == "reserving"
        assert cluster["rendezvous"]["waiting_for"] == ["worker:1 (executor 1) on 127.0.0.1"]
        states = {n["executor_id"]: n["state"] for n in cluster["nodes"]}
        assert states == {"0": "registered", "1": "starting"}, states
        assert run.finish(timeout=60) == 1
    finally:
        run.stop()
    assert ("drover run: 1/2 nodes registered, waiting for worker:1 (executor 1) on 127.0.0.1"
            in run.stderr()), run.stderr()


def test_feeding_progress_summary_run_record_and_status_of_the_log_dir(tmp_path, slow_feed):
    run = Run(tmp_path, *feed_args(slow_feed, epochs=2), "--progress", "plain",
              "--progress-interval", "0.5", reader_args=["--batch", "100", "--sleep-us", "10000"])
    try:
        run.wait_url()
        # While it runs, `drover status` with no address finds it.
        shown = wait_for("drover status to show the running nodes", lambda: (
            lambda r: r if r.returncode == 0 and "running" in r.stdout else None)(
                subprocess.run([DROVER, "status"], env=run.env, capture_output=True, text=True,
                               timeout=30)))
        assert "worker:0" in shown.stdout and "worker:1" in shown.stdout
        raw = subprocess.run([DROVER, "status", "--json"], env=run.env, capture_output=True,
                             text=True, timeout=30)
        assert json.loads(raw.stdout)["log_dir"] == str(run.log_dir)
        assert run.finish(timeout=180) == 0, run.stderr()
    finally:
        run.stop()
    err = run.stderr()
    assert "drover run: feeding epoch 1/2 (" in err, err
    assert "records/s" in err and "ETA" in err
    # The summary: per node its role, runtime, exit and the records it consumed.
    assert "succeeded after" in err
    record = json.loads((run.log_dir / "run.json").read_text())
    assert record["phase"] == "succeeded" and record["exit_code"] == 0
    consumed = {}
    for node in record["nodes"]:
        assert node["state"] == "finished" and node["exit"]["code"] == 0, node
        consumed[node["task"]] = node["feed"]["records"]
        assert f"{node['task']}  {node['executor_id']}" in err
    # Exactly what the readers read: 20,000 records, twice.
    seen = {}
    for name in os.listdir(tmp_path):
        if name.startswith("seen."):
            seen["worker:" + name.split(".")[1]] = sum(1 for _ in open(tmp_path / name))
    assert consumed == seen, (consumed, seen)
    assert sum(consumed.values()) == 40000
    assert record["feed"]["records"] == 40000
    # Later, the log directory alone tells the same story.
    after = subprocess.run([DROVER, "status", str(run.log_dir)], env=run.env, capture_output=True,
                           text=True, timeout=30)
    assert after.returncode == 0, after.stderr
    assert "succeeded" in after.stdout and "40,000 records" in after.stdout


def test_status_without_a_run_or_with_a_dead_address_is_one_clear_error(tmp_path):
    env = env_for(tmp_path)
    none = subprocess.run([DROVER, "status"], env=env, capture_output=True, text=True, timeout=30)
    assert none.returncode == 1
    assert "no drover run with a status server is running" in none.stderr
    dead = subprocess.run([DROVER, "status", "127.0.0.1:1"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert dead.returncode == 1
    assert "cannot reach a status server at http://127.0.0.1:1" in dead.stderr


def test_no_status_serves_nothing_and_a_taken_port_is_an_error(tmp_path):
    done = subprocess.run([DROVER, "run", "--nodes", "1", "--no-status", "--log-dir",
                           str(tmp_path / "a"), "--", "true"], env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "status page" not in done.stderr
    (tmp_path / "d.csv").write_text("1\n")
    run = Run(tmp_path, "--input", str(tmp_path / "d.csv"), reader_args=["--sleep-us", "3000000"])
    try:
        port = run.wait_url().rstrip("/").rsplit(":", 1)[1]
        taken = subprocess.run([DROVER, "run", "--nodes", "1", "--status-port", port, "--log-dir",
                                str(tmp_path / "b"), "--", "true"], env=env_for(tmp_path),
                               capture_output=True, text=True, timeout=60)
        assert taken.returncode == 1
        assert f"cannot serve the status page on 127.0.0.1:{port}" in taken.stderr
    finally:
        run.stop()


def test_progress_on_a_terminal_is_one_line_redrawn_in_place(tmp_path):
    """stderr on a pseudo-terminal: the line is redrawn with \\r and erased
    before the node's output, so no tagged line lands after a half line.
    Waits for the redrawn line itself, then stops the run: a slow agent start
    (asan, a loaded host) must not make a reservation timeout race the line."""
    import pty
    (tmp_path / "d.csv").write_text("1\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [DROVER, "run", "--nodes", "2", "--input", str(tmp_path / "d.csv"),
         "--reservation-timeout", "120", "--log-dir", str(tmp_path / "logs"), "--", "true"],
        env=env_for(tmp_path, DROVER_TEST_SKIP_AGENT="1"), stdin=subprocess.DEVNULL,
        stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    drawn = re.compile(r"\r\x1b\[Kdrover run: 1/2 nodes registered, waiting for worker:1 "
                       r"\(executor 1\) on 127\.0\.0\.1 \([0-9.]+ m?s\)")
    screen = b""
    stopped = False
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: drover and its agents are gone
            break
        if not chunk:
            break
        screen += chunk
        # Redrawn as the time goes on: two draws seen, and one more started.
        if not stopped and len(drawn.findall(screen.decode(errors="replace"))) >= 3:
            proc.send_signal(signal.SIGTERM)
            stopped = True
    os.close(master)
    assert proc.wait(timeout=30) != 0
    text = screen.decode(errors="replace")
    assert stopped, repr(text[-2000:])
    # Whatever came after a drawn line starts by erasing it.
    matches = list(drawn.finditer(text))
    for match in matches:
        after = text[match.end():match.end() + 4]
        assert after in ("", "\r\x1b[K"), repr(text[match.start():match.end() + 80])


def test_status_watch_redraws_until_the_run_ends(tmp_path):
    write_csv(tmp_path / "d.csv", 400)
    run = Run(tmp_path, "--input", str(tmp_path / "d.csv"), "--status-linger", "30",
              reader_args=["--batch", "10", "--sleep-us", "50000"])
    try:
        address = run.wait_url().split("//", 1)[1].rstrip("/")
        watched = subprocess.run([DROVER, "status", "--watch", "0.3", address], env=run.env,
                                 capture_output=True, text=True, timeout=60)
        assert watched.returncode == 0, watched.stderr
        tables = watched.stdout.count("TASK      EXECUTOR")
        assert tables >= 2, watched.stdout
        headers = [line for line in watched.stdout.splitlines() if line.startswith("cluster ")]
        assert any(p in headers[0] for p in (": reserving on", ": running on")), headers
        assert ": succeeded on the local engine" in headers[-1], headers
        # It ended with the run, long before the status server stopped lingering.
        assert run.proc.poll() is None
        run.proc.send_signal(signal.SIGTERM)
        assert run.finish(timeout=30) == 0, run.stderr()
    finally:
        run.stop()

"""Seeing training (#21): what programs report with drover::Report reaches the
status page's charts (one line per node, in headless Chromium), /api/metrics,
/metrics, the progress line, run.json and `drover status`; a node held back is
named as a straggler.

The programs are testing/feed_reader with --report (the C++ API: a loss of
1/step and the records read, every batch), so the asan preset runs these too.
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from cdp import Browser  # noqa: E402
from test_status import (DROVER, Run, artifact, feed_args, metrics, sample_value,  # noqa: E402
                         wait_for, write_csv)


def series(run):
    return json.loads(run.get("/api/metrics")[1])


def falling(points):
    values = [p[2] for p in points if p[2] is not None]
    return len(values) >= 3 and values[-1] < values[0]


def test_page_charts_each_nodes_falling_loss_and_the_record_keeps_it(tmp_path):
    data = tmp_path / "data.csv"
    write_csv(data, 20000)
    run = Run(tmp_path, *feed_args(data, epochs=2), "--status-linger", "120",
              reader_args=["--batch", "50", "--sleep-us", "10000", "--report"], nodes=2)
    try:
        run.wait_url()
        # Progress, not the clock: three points of a falling loss per node.
        wait_for("a falling loss from both nodes on /api/metrics",
                 lambda: all(falling(series(run).get("loss", {}).get(task, []))
                             for task in ("worker:0", "worker:1")), timeout=120, interval=0.5)
        with Browser(run.url, width=1280, height=1000, timeout=30,
                     artifacts_dir=str(tmp_path / "chromium")) as page:
            page.wait_for("document.querySelectorAll('.mchart[data-metric=\"loss\"] .series')"
                          ".length === 2", 60, "one loss line per node in the chart")
            page.wait_for("Array.from(document.querySelectorAll("
                          "'.mchart[data-metric=\"loss\"] .series')).every("
                          "l => parseInt(l.dataset.points) >= 3)", 60, "three points per line")
            tasks = page.evaluate("Array.from(document.querySelectorAll("
                                  "'.mchart[data-metric=\"loss\"] .series'))"
                                  ".map(l => l.dataset.task).sort().join(',')")
            assert tasks == "worker:0,worker:1", tasks
            page.wait_for("document.querySelector('#lead-metrics').textContent"
                          ".startsWith('metrics (worker:0): loss')", 30, "the chief's metrics")
            page.wait_for("document.querySelector('#nodes tbody tr[data-executor=\"1\"] "
                          "td[data-col=metrics]').textContent.includes('loss')", 30,
                          "worker:1's last metrics in the node table")
            assert page.evaluate("document.querySelectorAll('.mchart').length") == 2  # loss, records
            page.screenshot(artifact(tmp_path, "status-training.png"))
        families = metrics(run)
        assert sample_value(families, "drover_metric", name="loss", task="worker:0") > 0
        wait_for("the run's end on stderr", lambda: "succeeded after" in run.stderr(), timeout=300)
        run.proc.send_signal(signal.SIGTERM)  # ends the linger
        run.finish(timeout=30)
    finally:
        run.stop()
    record = json.loads((run.log_dir / "run.json").read_text())
    assert record["phase"] == "succeeded", record["phase"]
    assert record["metrics_task"] == "worker:0"
    assert set(record["metrics"]) == {"loss", "records"}
    for node in record["nodes"]:
        assert node["metrics"]["loss"]["step"] == node["step"] > 0, node
        assert node["metrics"]["records"]["value"] == node["feed"]["records"], node
    assert falling(record["metric_history"]["loss"]["worker:1"])
    shown = subprocess.run([DROVER, "status", str(run.log_dir)], capture_output=True, text=True,
                           timeout=30, env=run.env)
    assert shown.returncode == 0, shown.stderr
    assert "STEP" in shown.stdout and "loss " in shown.stdout, shown.stdout
    assert "metrics (worker:0): loss" in shown.stdout, shown.stdout


def test_a_node_held_back_is_named_a_straggler(tmp_path):
    data = tmp_path / "data.csv"
    write_csv(data, 20000)
    run = Run(tmp_path, *feed_args(data, epochs=100), "--straggler-after", "2",
              "--progress", "plain", "--progress-interval", "1",
              reader_args=["--batch", "20", "--sleep-us", "5000", "--slow", "2=100000",
                           "--report"], nodes=3)
    try:
        run.wait_url()

        def named():
            cluster = run.cluster()
            return [s for s in cluster.get("stragglers", []) if s.startswith("worker:2 on ")]
        text = wait_for("worker:2 named a straggler", named, timeout=120, interval=0.5)[0]
        assert "% of the median step rate" in text, text
        nodes = {n["task"]: n for n in run.cluster()["nodes"]}
        assert nodes["worker:2"]["straggler"], nodes["worker:2"]
        assert nodes["worker:0"]["straggler"] is None and nodes["worker:1"]["straggler"] is None
        assert nodes["worker:2"]["step_rate"] < nodes["worker:0"]["step_rate"]
        families = metrics(run)
        assert sample_value(families, "drover_straggler", task="worker:2") == 1
        assert sample_value(families, "drover_straggler", task="worker:0") == 0
        with Browser(run.url, width=1280, height=900, timeout=30,
                     artifacts_dir=str(tmp_path / "chromium")) as page:
            page.wait_for("document.querySelector('#stragglers').textContent"
                          ".includes('worker:2 on')", 60, "the straggler named on the page")
            page.wait_for("(document.querySelector('#nodes tbody tr[data-executor=\"2\"]') || {})"
                          ".className.includes('straggler')", 30, "worker:2's row marked")
            page.screenshot(artifact(tmp_path, "status-straggler.png"))
        wait_for("the straggler on the progress line",
                 lambda: "straggler: worker:2 on" in run.stderr(), timeout=60)
        run.proc.send_signal(signal.SIGTERM)
        assert run.finish(timeout=60) == 128 + signal.SIGTERM, run.stderr()
    finally:
        run.stop()

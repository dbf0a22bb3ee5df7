"""Every benchmark in bench/ run once, small, so that a change that breaks one
(a flag it passes, an output it parses, a program it starts) fails here and
not on the day its figures are next wanted for RESULTS.md.

Each test checks that the bench exits 0 and prints the rows it is for; none
looks at a time. recovery_bench.py runs without its torchrun rows (they
take about 90 s even at 2 nodes); ssh_startup_bench.py is left out (it needs
the ssh hosts).
The build directory comes from DROVER_BUILD_DIR (set by ctest).
"""
import os
import re
import signal
import subprocess
import sys

import pytest

PYTHON = "/usr/bin/python3"
BENCH = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("DROVER_BUILD_DIR", os.path.join(BENCH, "..", "build"))
DROVER = os.path.join(BUILD, "bin", "drover")


def run(*argv, timeout=300):
    """Runs a bench in a process group of its own; one that does not end in
    `timeout` seconds fails the test, and its group (whatever it started) is
    killed with it."""
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    process = subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(argv)} did not end within {timeout} s:\n"
                    f"{(stdout + stderr)[-4000:]}")
    output = stdout + stderr
    assert process.returncode == 0, \
        f"{' '.join(argv)} exited {process.returncode}:\n{output[-4000:]}"
    return stdout


def bench(name):
    return os.path.join(BENCH, name)


def binary(name):
    return os.path.join(BUILD, "bin", name)


def test_host_figures():
    out = run(PYTHON, bench("host_figures.py"))
    assert re.search(r"memcpy [\d.]+ GB/s, read\(\) .* [\d.]+ GB/s, copied out of a mapping of "
                     r"it [\d.]+ GB/s, fork\+exec of 8 programs", out), out


def test_cluster_spec_bench_and_its_ratios(tmp_path):
    result = tmp_path / "spec.json"
    # bench/run.sh's flags, shorter: ratios.py reads the repetitions' medians.
    run(binary("cluster_spec_bench"), "--benchmark_format=json", "--benchmark_min_time=0.01",
        "--benchmark_repetitions=2", "--benchmark_report_aggregates_only=true",
        f"--benchmark_out={result}")
    ratios = run(PYTHON, bench("ratios.py"), str(result), "BM_MemcpyBaseline")
    assert re.search(r"^BM_MemcpyBaseline\s+\d+\s+\d+\s+[\d,]+\s+1\.0$", ratios, re.MULTILINE), \
        ratios
    assert len(re.findall(r"^BM_\w+\s+\d+", ratios, re.MULTILINE)) > 2, ratios
    refused = subprocess.run([PYTHON, bench("ratios.py"), str(result), "BM_NoSuchBaseline"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "has no BM_NoSuchBaseline" in refused.stderr


@pytest.mark.parametrize("flags", [[], ["--nodes-per-host", "4", "--node-credentials"]])
def test_rendezvous_bench(flags):
    out = run(binary("rendezvous_bench"), *flags, "--reps", "1", "8", "16")
    for server in ("naive", "own", "drover"):
        assert re.search(rf"^{server}\s+16\s", out, re.MULTILINE), out


def test_rendezvous_bench_refuses_a_bad_count():
    done = subprocess.run([binary("rendezvous_bench"), "--bogus"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "not a node count: --bogus" in done.stderr


def test_etcd_formation_bench():
    out = run(binary("etcd_formation_bench"), "--repetitions", "1", "4")
    assert re.search(r"^\s+4\s+[\d.]+\s+[\d.]+", out, re.MULTILINE), out


def test_feed_bench_reports_every_path_and_target(tmp_path):
    out = run(PYTHON, bench("feed_bench.py"), "--build", BUILD, "--kinds", "mnist,b100",
              "--bytes", "20000000", "--reps", "1", "--settle", "0", "--tfos-records",
              "mnist=200,b100=200", "--data-dir", str(tmp_path))
    for kind in ("MNIST rows", "100 B"):
        for path in ("(0) read() limit", "(1) memcpy", "(2) drover -> C++",
                     "(3) drover -> Python", "(4) TFoS queues", "(5) pipeline limit",
                     "(6) one thread, read", "(7) one thread, map"):
            assert re.search(rf"^{re.escape(kind)}\s+{re.escape(path)}\s+[\d,]+\s+[\d.]+", out,
                             re.MULTILINE), (kind, path, out)
    # Every #19 feeding target gets a verdict, met or not.
    assert len(re.findall(r"^target .*: [\d.,]+: (met|NOT met)", out, re.MULTILINE)) == 7, out


def test_startup_bench():
    out = run(PYTHON, bench("startup_bench.py"), "--drover", DROVER, "--nodes", "2", "--reps", "1")
    for launcher in ("drover run", "torchrun", "mpirun"):
        assert re.search(rf"^{launcher}\s+2\s+[\d,]+", out, re.MULTILINE), out


def test_footprint_bench():
    out = run(PYTHON, bench("footprint_bench.py"), "--drover", DROVER, "--nodes", "2",
              "--window", "1")
    assert re.search(r"^drover\s+agent\s+1\s", out, re.MULTILINE), out
    assert re.search(r"^mpirun\s+mpirun\s+1\s", out, re.MULTILINE), out


def test_plan_bench(tmp_path):
    out = run(PYTHON, bench("plan_bench.py"), "--drover", DROVER, "--dir", str(tmp_path),
              "--mib", "5", "--nodes", "2", "--reps", "1")
    assert re.search(r"^\s+2\s+[\d.]+\s+[\d.]+", out, re.MULTILINE), out


def test_window_feed_bench(tmp_path):
    # Too small for the measured choice (96 MiB of probes a way): its row is
    # there, its choice is not.
    out = run(PYTHON, bench("window_feed_bench.py"), "--build", BUILD, "--dir", str(tmp_path),
              "--mib", "4", "--reps", "1")
    for fmt in ("jsonl", "tfrecord", "files"):
        assert re.search(fmt + r": [\d.]+ GB, \d+ records, median of 1; read\(\) limit", out), out
    for way in ("map", "read", "measure"):
        assert re.search(r"^\s+" + way + r"\s+[\d.]+\s+[\d.]+$", out, re.MULTILINE), out
    assert "measure at " in out and "(no choice said)" in out, out


def test_report_bench():
    out = run(PYTHON, bench("report_bench.py"), "--drover", DROVER, "--steps", "1000", "--reps",
              "1")
    assert re.search(r"^outside drover: [\d,]+ steps/s without reports, [\d,]+ with", out,
                     re.MULTILINE), out
    assert re.search(r"^under drover run: [\d,]+ steps/s without reports", out, re.MULTILINE), out
    assert 'the driver saw: {"loss"' in out, out


def test_recovery_bench_without_torchrun():
    out = run(PYTHON, bench("recovery_bench.py"), "--drover", DROVER, "--nodes", "2", "--reps",
              "1", "--launchers", "drover")
    for launcher in ("drover run", r"drover run N:N \(in place\)", r"drover run 1:N \(elastic\)"):
        assert re.search(rf"^{launcher}\s+2\s+[\d,]+\s+[\d,]+", out, re.MULTILINE), out
    assert not re.search(r"^torchrun", out, re.MULTILINE), out  # no torchrun rows


def test_digits_bench():
    out = run(PYTHON, bench("digits_bench.py"), "--build", BUILD, "--reps", "1")
    assert re.search(r"^Python \(train\.py, DDP\)\s+0\.\d+", out, re.MULTILINE), out
    assert re.search(r"^C\+\+ \(digits_cpp, gloo\)\s+0\.\d+", out, re.MULTILINE), out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))

"""`drover run` as a user runs it: real agents, real programs, checked for leftovers."""
import json
import os
import signal
import subprocess
import time
import uuid

from conftest import clean_env, drover_bin


def marker():
    return "drover-test-" + uuid.uuid4().hex[:12]


def leftovers(mark):
    """Processes whose command line carries the marker (none should survive drover)."""
    found = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True)
    return [pid for pid in found.stdout.split() if int(pid) != os.getpid()]


def assert_no_leftovers(mark):
    # Orphans would stay; give the kernel a moment to reap what is dying anyway.
    for _ in range(50):
        if not leftovers(mark):
            return
        time.sleep(0.1)
    assert leftovers(mark) == [], subprocess.run(
        ["ps", "-o", "pid,pgid,ppid,args", "-p", ",".join(leftovers(mark))],
        capture_output=True, text=True).stdout


def run(drover, tmp_path, *args, env=None, timeout=120):
    return drover("run", "--log-dir", str(tmp_path / "logs"), *args, env=env, timeout=timeout)


def test_three_nodes_print_tagged_lines_and_write_logs(drover, tmp_path):
    result = run(drover, tmp_path, "--nodes", "3", "--", "sh", "-c", "echo rank=$RANK")
    assert result.returncode == 0, result.stderr
    for rank in range(3):
        assert f"[worker:{rank}] rank={rank}" in result.stdout.splitlines(), result.stdout
        log = tmp_path / "logs" / f"worker-{rank}.log"
        assert log.exists(), result.stderr
        assert f"rank={rank}" in log.read_text()


def test_node_list_never_leaves_out_tf_config_but_not_the_ranks(drover, tmp_path):
    program = ('echo "tf=${TF_CONFIG-unset} spec=${DROVER_CLUSTER_SPEC-unset} '
               'rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT"; '
               f'cp "$DROVER_CONTEXT_FILE" {tmp_path}/context-$RANK.json')
    result = run(drover, tmp_path, "--nodes", "2", "--node-list", "never", "--", "sh", "-c",
                 program)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        line = next(l for l in result.stdout.splitlines() if l.startswith(f"[worker:{rank}] tf="))
        assert f"tf=unset spec=unset rank={rank} world=2 master=" in line, line
        assert not line.endswith(":"), line
    assert "did not get the node list (2 nodes, --node-list never)" in result.stdout + result.stderr
    context = json.loads((tmp_path / "context-1.json").read_text())
    assert context["cluster_spec"] == {} and context["num_workers"] == 2, context
    # The default gives the list to a cluster this small.
    result = run(drover, tmp_path, "--nodes", "2", "--", "sh", "-c", "echo tf=$TF_CONFIG")
    assert result.returncode == 0, result.stderr
    line = next(l for l in result.stdout.splitlines() if l.startswith("[worker:1] tf="))
    assert json.loads(line.split("tf=", 1)[1])["task"] == {"type": "worker", "index": 1}


def test_node_killed_by_sigkill_is_named_and_nothing_is_left(drover, tmp_path):
    mark = marker()
    program = ('if [ "$RANK" = 1 ]; then sleep 1; echo about-to-die; kill -9 $$; '
               'else sleep 300; fi')
    result = run(drover, tmp_path, "--nodes", "3", "--grace", "2", "--",
                 "sh", "-c", program, mark)
    assert result.returncode != 0
    assert "worker:1 (executor 1) failed" in result.stderr, result.stderr
    assert "SIGKILL" in result.stderr, result.stderr
    assert "about-to-die" in result.stderr, result.stderr  # its last lines
    assert_no_leftovers(mark)


def test_max_restarts_reforms_the_group_and_says_why(drover, tmp_path):
    program = ('echo DROVER_RESTART_COUNT=$DROVER_RESTART_COUNT; '
               'echo "reason=${DROVER_RESTART_REASON-unset}"; '
               '[ "$DROVER_RESTART_COUNT" = 1 ] || { [ "$RANK" = 0 ] && exit 5; sleep 300; }')
    result = run(drover, tmp_path, "--nodes", "2", "--max-restarts", "1", "--grace", "2", "--",
                 "sh", "-c", program)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "[worker:0] DROVER_RESTART_COUNT=1" in lines, result.stdout
    assert "[worker:1] DROVER_RESTART_COUNT=1" in lines, result.stdout
    why = "worker:0 on 127.0.0.1: exit code 5"
    assert "restart 1 of 1) after " + why in result.stderr, result.stderr
    # Each round's programs know why it began; the first round has no reason.
    assert "[worker:0] reason=unset" in lines, result.stdout
    assert "[worker:1] reason=" + why in lines, result.stdout
    with open(tmp_path / "logs" / "drover-context-1.json") as f:
        assert json.load(f)["restart_reason"] == why
    with open(tmp_path / "logs" / "run.json") as f:
        record = json.load(f)
    assert (record["round"], record["round_reason"]) == (1, why)


def test_missing_node_reservation_timeout_names_it(drover, tmp_path):
    mark = marker()
    # DROVER_TEST_SKIP_AGENT is test-only: the local engine never starts that executor.
    result = run(drover, tmp_path, "--nodes", "3", "--reservation-timeout", "3", "--",
                 "sh", "-c", "sleep 300", mark, env={"DROVER_TEST_SKIP_AGENT": "2"})
    assert result.returncode == 1, result.stderr
    assert "reservation timed out" in result.stderr, result.stderr
    assert "worker:2" in result.stderr, result.stderr
    assert_no_leftovers(mark)


def test_parameter_server_is_stopped_after_the_workers(drover, tmp_path):
    mark = marker()
    program = 'if [ "$DROVER_JOB_NAME" = ps ]; then sleep 300; else echo trained; fi'
    result = run(drover, tmp_path, "--workers", "2", "--ps", "1", "--grace", "3", "--",
                 "sh", "-c", program, mark)
    assert result.returncode == 0, result.stderr
    assert "[worker:0] trained" in result.stdout.splitlines()
    assert "[worker:1] trained" in result.stdout.splitlines()
    assert "stopping ps:0" in result.stderr, result.stderr
    assert_no_leftovers(mark)


def test_sigint_stops_every_node(tmp_path):
    mark = marker()
    proc = subprocess.Popen(
        [drover_bin(), "run", "--nodes", "2", "--grace", "3", "--log-dir", str(tmp_path / "logs"),
         "--", "sh", "-c", "echo started; sleep 300", mark],
        env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        # Wait until both programs run.
        deadline = time.time() + 60
        while time.time() < deadline and len(leftovers(mark)) < 2:
            time.sleep(0.1)
        assert len(leftovers(mark)) >= 2
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "SIGINT" in err
    assert_no_leftovers(mark)


def test_dry_run_prints_the_plan_and_starts_nothing(drover, tmp_path):
    mark = marker()
    result = run(drover, tmp_path, "--workers", "2", "--ps", "1", "--chief", "--dry-run", "--",
                 "sh", "-c", "sleep 300", mark)
    assert result.returncode == 0, result.stderr
    assert "ps:0  executor 0" in result.stdout, result.stdout
    assert "chief:0  executor 1" in result.stdout, result.stdout
    assert "worker:1  executor 3" in result.stdout, result.stdout
    assert "RANK=0" in result.stdout
    assert not (tmp_path / "logs").exists()
    assert leftovers(mark) == []


def test_failing_program_exit_code_and_last_lines(drover, tmp_path):
    program = 'echo line-one; echo line-two >&2; [ "$RANK" = 0 ] && exit 3; sleep 300'
    result = run(drover, tmp_path, "--nodes", "2", "--grace", "2", "--", "sh", "-c", program)
    assert result.returncode == 1, result.stderr
    assert "worker:0 (executor 0) failed: exit code 3" in result.stderr, result.stderr
    assert "line-two" in result.stderr.split("failed")[1]


def test_bad_input_is_one_line_and_exit_2(drover, tmp_path):
    result = run(drover, tmp_path, "--nodes", "1", "--ps", "2", "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("drover run:")


def test_heartbeat_sets_the_interval_and_is_for_the_built_in_rendezvous(drover, tmp_path):
    # Many heartbeats while the programs run, none of them late enough to
    # lose a node.
    result = run(drover, tmp_path, "--nodes", "2", "--heartbeat", "0.05", "--", "sh", "-c",
                 "sleep 0.6; echo done")
    assert result.returncode == 0, result.stderr
    assert "[worker:1] done" in result.stdout, result.stdout
    result = run(drover, tmp_path, "--nodes", "1", "--heartbeat", "0", "--", "true")
    assert result.returncode == 2 and "--heartbeat" in result.stderr, result.stderr
    result = run(drover, tmp_path, "--nodes", "1", "--heartbeat", "2", "--rendezvous",
                 "etcd://127.0.0.1:9/run", "--", "true")
    assert result.returncode == 2, result.stderr
    assert "--heartbeat is for the built-in rendezvous" in result.stderr, result.stderr


def test_tensorboard_missing_is_a_clear_error(drover, tmp_path):
    env = {"PATH": "/nonexistent"}
    result = run(drover, tmp_path, "--nodes", "1", "--tensorboard", "--", "/bin/true", env=env)
    assert result.returncode == 2
    assert "tensorboard" in result.stderr
    assert not (tmp_path / "logs").exists()


def test_issue_15_output_without_a_newline_is_cut_and_the_driver_stays_small(tmp_path):
    """500 MB without a newline (a progress bar that never ends its line): the driver shows
    the first 64 KiB with a mark, logs every byte, and never holds the line."""
    mark = marker()
    size = 500_000_000
    program = f"head -c {size} /dev/zero | tr '\\0' x; echo; echo after"
    out_path, err_path = tmp_path / "out", tmp_path / "err"

    def peak_rss_mb(name, *command):
        """Runs `drover run --nodes 1 -- command` to its end; the peak RSS of the
        driver and of everything it reaped (the agent, whose children it reaped
        in turn), from wait4."""
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [drover_bin(), "run", "--nodes", "1", "--log-dir", str(tmp_path / name), "--",
                 *command],
                # Under AddressSanitizer, freed memory waits in a quarantine of
                # 256 MB by default: what the test measures is what drover keeps.
                env=clean_env(ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                              ":quarantine_size_mb=16"),
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        deadline = time.time() + 300
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise AssertionError("drover run did not finish within 300 s")
            time.sleep(0.1)
        assert os.waitstatus_to_exitcode(status) == 0, err_path.read_text(errors="replace")
        return usage.ru_maxrss / 1024  # KiB on Linux

    # What this build of drover takes to run a program at all: a few MB, or
    # well over 100 MB under AddressSanitizer on a host where faulting in its
    # large binary is slow. The 500 MB line may add nothing near its size.
    baseline_mb = peak_rss_mb("baseline", "true")
    peak_mb = peak_rss_mb("logs", "sh", "-c", program, mark)
    assert peak_mb < baseline_mb + 100, f"peak RSS {peak_mb:.0f} MB, {baseline_mb:.0f} MB idle"

    lines = out_path.read_text(encoding="utf-8").splitlines()
    cut = "[worker:0] " + "x" * 65536 + "\u2026[line cut at 65536 bytes]"
    assert lines.count(cut) == 1, [line[:80] for line in lines]
    assert "[worker:0] after" in lines
    assert not any(line.startswith("[worker:0] x") and line != cut for line in lines)

    log = tmp_path / "logs" / "worker-0.log"
    try:
        with open(log, "rb") as f:
            head = f.read(65536 + 16)
            f.seek(-16, os.SEEK_END)
            tail = f.read()
        assert head.startswith(b"x" * (65536 + 16))
        assert tail.endswith(b"x\nafter\n")
        assert log.stat().st_size >= size + len(b"\nafter\n")
    finally:
        log.unlink()
    assert_no_leftovers(mark)


# Each program says which agent started it: its guard's parent.
WHOSE_AGENT = ('agent=$(ps -o ppid= -p $PPID | tr -d " "); echo "agent=$agent"; ')


def agent_pids(stdout):
    return {line.split("] agent=")[0]: line.split("agent=")[1]
            for line in stdout.splitlines() if "] agent=" in line}


def test_one_agent_runs_every_node_each_with_its_own_output_and_exit(drover, tmp_path):
    mark = marker()
    # worker:1 fails once every node's program has started (its file is there).
    program = (WHOSE_AGENT + f'touch {tmp_path}/started-$RANK; if [ "$RANK" = 1 ]; then '
               f'for i in $(seq 600); do [ $(ls {tmp_path} | grep -c started-) = 3 ] && break; '
               'sleep 0.1; done; echo failing; exit 3; fi; sleep 300')
    result = run(drover, tmp_path, "--nodes", "3", "--agents", "host", "--grace", "2", "--",
                 "sh", "-c", program, mark)
    pids = agent_pids(result.stdout)
    assert len(pids) == 3 and len(set(pids.values())) == 1, result.stdout
    assert result.returncode == 1, result.stderr
    assert "worker:1 (executor 1) failed: exit code 3" in result.stderr, result.stderr
    assert "failing" in result.stderr.split("failed")[1], result.stderr
    assert (tmp_path / "logs" / "worker-2.log").read_text().startswith("agent="), result.stderr
    summary = {line.split()[0]: line for line in result.stderr.splitlines()
               if line.startswith("worker:")}
    assert "exit code 3" in summary["worker:1"], result.stderr
    assert "exit code 0" in summary["worker:0"], result.stderr  # stopped by the driver
    assert_no_leftovers(mark)


def test_the_host_agent_holds_its_nodes_credentials_and_not_the_cluster_token(drover, tmp_path):
    """Each program reads its agent's argv: the one agent got a credential
    file for each of the three nodes, and no --token-file."""
    program = (WHOSE_AGENT + r'args=$(tr "\0" "\n" < /proc/$agent/cmdline); '
               r'echo "token-files=$(echo "$args" | grep -c "^--token-file$")"; '
               r'echo "credentials=$(echo "$args" | grep -c "node-[0-9]*\.credential$")"')
    result = run(drover, tmp_path, "--nodes", "3", "--", "sh", "-c", program)
    assert result.returncode == 0, result.stderr
    assert len(set(agent_pids(result.stdout).values())) == 1, result.stdout
    assert result.stdout.count("token-files=0") == 3, result.stdout
    assert result.stdout.count("credentials=3") == 3, result.stdout


def test_agents_node_starts_an_agent_process_a_node(drover, tmp_path):
    result = run(drover, tmp_path, "--nodes", "3", "--agents", "node", "--",
                 "sh", "-c", WHOSE_AGENT)
    assert result.returncode == 0, result.stderr
    pids = agent_pids(result.stdout)
    assert len(pids) == 3 and len(set(pids.values())) == 3, result.stdout

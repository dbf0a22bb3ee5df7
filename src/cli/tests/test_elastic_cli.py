"""Elastic membership (`drover run --nodes MIN:MAX`): real agents SIGKILLed,
an agent started by hand joining, programs restarted in place. Every wait is
for something the run did (a file a program wrote, a line drover printed),
never for the clock."""
import os
import random
import signal
import subprocess
import time

import pytest
from conftest import clean_env, drover_bin
from test_feed_cli import FEED_READER, assert_each_record_once, consumed_by_epoch, write_csv
from test_run_cli import assert_no_leftovers, marker

# Each worker writes <dir>/r<round>-<rank>: its world size and its agent's
# pid (the guard is its parent, the agent the guard's), then waits for
# <dir>/done. When <dir>/fail exists, round 0's rank 0 exits 3 once rank 1
# has written its file.
PROGRAM = r'''
d="$1"
if [ -z "$RANK" ]; then  # a ps node: serves until the run ends
  while [ ! -f "$d/done" ]; do sleep 0.05; done
  exit 0
fi
agent=$(ps -o ppid= -p $PPID | tr -d ' ')
echo "round=$DROVER_RESTART_COUNT rank=$RANK world=$WORLD_SIZE"
echo "$WORLD_SIZE $agent ${DROVER_RESTART_REASON-}" > "$d/r$DROVER_RESTART_COUNT-$RANK.tmp"
mv "$d/r$DROVER_RESTART_COUNT-$RANK.tmp" "$d/r$DROVER_RESTART_COUNT-$RANK"
if [ -f "$d/fail" ] && [ "$DROVER_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; then
  while [ ! -f "$d/r0-1" ]; do sleep 0.05; done
  exit 3
fi
while [ ! -f "$d/done" ]; do sleep 0.05; done
'''

WAIT_S = 120  # bounds a broken run; nothing below measures time


def wait_for(condition, what, proc=None):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"drover exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def round_files(directory, number):
    """rank -> (world size, agent pid, reason) of the programs of round `number`."""
    found = {}
    for name in os.listdir(directory):
        if name.startswith(f"r{number}-") and not name.endswith(".tmp"):
            world, agent, *reason = (directory / name).read_text().split(" ", 2)
            found[int(name.split("-")[1])] = (int(world), int(agent), " ".join(reason).strip())
    return found


def start_run(tmp_path, mark, *args, fail=False):
    work = tmp_path / "work"
    work.mkdir()
    if fail:
        (work / "fail").touch()
    err = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(
        [drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--grace", "2",
         "--token-file", str(tmp_path / "token"), *args,
         "--", "sh", "-c", PROGRAM, mark, str(work)],
        env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
        text=True, start_new_session=True)
    return proc, work


def stderr_of(tmp_path):
    return (tmp_path / "stderr.txt").read_text()


def agent_pid(mark, executor):
    # drover-agent, or drover itself where drover-agent is not beside it.
    found = subprocess.run(["pgrep", "-f", f"drover(-agent)? agent .*--executor-id {executor} .*{mark}"],
                           capture_output=True, text=True)
    pids = found.stdout.split()
    assert len(pids) == 1, (executor, pids)
    return int(pids[0])


def finish(proc, work):
    (work / "done").touch()
    out, _ = proc.communicate(timeout=WAIT_S)
    return out


def test_lost_agent_leaves_and_an_agent_started_by_hand_joins(tmp_path):
    mark = marker()
    proc, work = start_run(tmp_path, mark, "--nodes", "2:3")
    try:
        wait_for(lambda: len(round_files(work, 0)) == 3, "round 0's three programs", proc)
        first = round_files(work, 0)
        assert {rank: world for rank, (world, _, _) in first.items()} == {0: 3, 1: 3, 2: 3}
        os.kill(agent_pid(mark, 1), signal.SIGKILL)

        # The survivors go on as two, their agents the same processes.
        wait_for(lambda: len(round_files(work, 1)) == 2, "round 1's two programs", proc)
        second = round_files(work, 1)
        assert sorted(world for world, _, _ in second.values()) == [2, 2]
        assert {agent for _, agent, _ in second.values()} == {first[0][1], first[2][1]}
        why = "worker:1 on 127.0.0.1: its agent was killed by SIGKILL"
        assert all(reason == why for _, _, reason in second.values()), second

        # An agent started by hand, as a user would, joins at the next round.
        port = stderr_of(tmp_path).split("agents may join at 127.0.0.1:")[1].split()[0]
        joiner = subprocess.Popen(
            [drover_bin(), "agent", "--rendezvous", "127.0.0.1:" + port,
             "--token-file", str(tmp_path / "token"), "--executor-id", "extra",
             "--host", "127.0.0.1", "--elastic", "--", "sh", "-c", PROGRAM, mark, str(work)],
            env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        wait_for(lambda: len(round_files(work, 2)) == 3, "round 2's three programs", proc)
        third = round_files(work, 2)
        assert sorted(world for world, _, _ in third.values()) == [3, 3, 3]
        assert third[2][2] == "executor extra joined"
        out = finish(proc, work)
        joined_out, _ = joiner.communicate(timeout=WAIT_S)
    finally:
        (work / "done").touch()
        proc.kill()
    err = stderr_of(tmp_path)
    assert proc.returncode == 0, err
    assert joiner.returncode == 0, joined_out
    assert "round=2 rank=2 world=3" in joined_out, joined_out
    assert "re-forming the group with 2 nodes (round 1) after " + why in err, err
    assert "re-forming the group with 3 nodes (round 2) after executor extra joined" in err, err
    assert "[worker:1] round=1 rank=1 world=2" in out.splitlines(), out
    assert_no_leftovers(mark)


def test_failed_program_restarts_in_place_under_the_same_agents(tmp_path):
    mark = marker()
    proc, work = start_run(tmp_path, mark, "--nodes", "2:2", "--max-restarts", "1", fail=True)
    try:
        wait_for(lambda: len(round_files(work, 1)) == 2, "round 1's programs", proc)
        out = finish(proc, work)
    finally:
        (work / "done").touch()
        proc.kill()
    err = stderr_of(tmp_path)
    assert proc.returncode == 0, err
    first, second = round_files(work, 0), round_files(work, 1)
    assert {r: agent for r, (_, agent, _) in first.items()} == \
        {r: agent for r, (_, agent, _) in second.items()}
    assert "after worker:0 on 127.0.0.1: worker:0 exited with exit code 3" in err, err
    assert "[worker:0] round=1 rank=0 world=2" in out.splitlines(), out
    assert_no_leftovers(mark)


def test_program_failures_past_max_restarts_end_the_run(tmp_path):
    mark = marker()
    proc, work = start_run(tmp_path, mark, "--nodes", "2:3", fail=True)
    try:
        proc.wait(timeout=WAIT_S)
    finally:
        (work / "done").touch()
        proc.kill()
    err = stderr_of(tmp_path)
    assert proc.returncode == 1, err
    assert "worker:0 exited with exit code 3" in err, err
    assert "re-forming" not in err, err
    assert_no_leftovers(mark)


def test_below_min_the_run_fails_at_once_naming_who_was_lost(tmp_path):
    mark = marker()
    proc, work = start_run(tmp_path, mark, "--nodes", "2:2")
    try:
        wait_for(lambda: len(round_files(work, 0)) == 2, "round 0's programs", proc)
        os.kill(agent_pid(mark, 1), signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
    finally:
        (work / "done").touch()
        proc.kill()
    err = stderr_of(tmp_path)
    assert proc.returncode == 1, err
    assert "1 node remains, fewer than the 2 the run needs at least" in err, err
    assert "lost worker:1 (executor 1)" in err, err
    assert_no_leftovers(mark)


def test_forms_with_the_nodes_there_when_one_never_starts(tmp_path):
    mark = marker()
    work = tmp_path / "work"
    work.mkdir()
    (work / "done").touch()
    # DROVER_TEST_SKIP_AGENT is test-only: the local engine never starts that executor.
    result = subprocess.run(
        [drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "2:3",
         "--join-wait", "1", "--", "sh", "-c", PROGRAM, mark, str(work)],
        env=clean_env(DROVER_TEST_SKIP_AGENT="2"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 0, result.stderr
    assert sorted(world for world, _, _ in round_files(work, 0).values()) == [2, 2]
    assert_no_leftovers(mark)


def test_bad_ranges_are_refused(tmp_path):
    for args, text in [(["--nodes", "3:2"], "MIN 3 is over MAX 2"),
                       (["--nodes", "0:2"], "whole numbers >= 1"),
                       (["--nodes", "a:b"], "takes N or MIN:MAX"),
                       (["--nodes", "1:2", "--input", str(tmp_path), "--balance", "equal"],
                        "--balance equal needs a fixed membership")]:
        result = subprocess.run([drover_bin(), "run", *args, "--", "true"], env=clean_env(),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=WAIT_S)
        assert result.returncode == 2, (args, result.stderr)
        assert text in result.stderr, (args, result.stderr)


ELASTIC_KILL_TRIALS = 20 if os.environ.get("DROVER_KILL_MATRIX") == "full" else 3


@pytest.mark.parametrize("trial", range(ELASTIC_KILL_TRIALS))
def test_lost_agent_mid_feed_every_record_once_relative_to_commits(tmp_path, trial):
    """Three fed nodes on --nodes 2:3; a random node stops reading once it has
    read a random number of records (it writes "#held" and waits), and its
    agent is SIGKILLed there, as a host would die. The others, which may have
    read everything else by then and wait as finished members, go on in a new
    round from the queue the commits left: relative to them every record is
    consumed once per epoch, none twice, none lost."""
    rng = random.Random(9100 + trial)
    total = 6000
    write_csv(tmp_path / "data.csv", 0, total)
    victim = rng.randrange(3)
    kill_after = rng.randrange(100, total // 4)
    commit_every = rng.randint(1, 3)
    out = tmp_path / "seen"
    mark = marker()
    err = open(tmp_path / "stderr.txt", "w")
    reader = (f"exec {FEED_READER} --out {out} --batch 50 --append --commit-every {commit_every} "
              f"--hold {victim}={tmp_path / 'never'} --hold-after {kill_after} --tag {mark}")
    proc = subprocess.Popen(
        [drover_bin(), "run", "--log-dir", str(tmp_path / "logs"), "--nodes", "2:3",
         "--input", str(tmp_path / "data.csv"), "--split-bytes", "8000",
         "--queue-bytes", "65536", "--epochs", "2", "--grace", "2", "--", "sh", "-c", reader,
         mark],
        env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        cwd=tmp_path, start_new_session=True)
    context = (victim, kill_after, commit_every)
    try:
        def victim_held():
            path = f"{out}.{victim}"
            return os.path.exists(path) and "#held\n" in open(path).read()

        wait_for(victim_held, f"executor {victim} to hold after {kill_after} records", proc)
        os.kill(agent_pid(mark, victim), signal.SIGKILL)
        proc.wait(timeout=300)
    finally:
        proc.kill()
    stderr = stderr_of(tmp_path)
    assert proc.returncode == 0, (context, stderr)
    assert "re-forming the group with 2 nodes (round 1)" in stderr, (context, stderr)
    assert_each_record_once(consumed_by_epoch(out, final_round=1), total, 2, context)
    assert_no_leftovers(mark)


def test_workers_range_keeps_the_ps_and_re_forms_the_workers(tmp_path):
    """--workers 1:2 --ps 1: the ps node stays, a worker's agent dies, and the
    next round is the ps and one worker (WORLD_SIZE counts the workers)."""
    mark = marker()
    proc, work = start_run(tmp_path, mark, "--workers", "1:2", "--ps", "1")
    try:
        wait_for(lambda: len(round_files(work, 0)) == 2, "round 0's two workers", proc)
        victim = 2  # executor 0 is the ps, 1 and 2 the workers
        os.kill(agent_pid(mark, victim), signal.SIGKILL)
        wait_for(lambda: len(round_files(work, 1)) == 1, "round 1's worker", proc)
        finish(proc, work)
    finally:
        (work / "done").touch()
        proc.kill()
    err = stderr_of(tmp_path)
    assert proc.returncode == 0, err
    assert round_files(work, 1)[0][0] == 1, round_files(work, 1)
    assert "formed: ps:0 = executor 0, worker:0 = executor 1" in err, err
    assert "stopping ps:0" in err, err
    assert_no_leftovers(mark)


def test_dry_run_says_the_run_is_elastic(tmp_path):
    result = subprocess.run([drover_bin(), "run", "--dry-run", "--nodes", "2:4", "--join-wait",
                             "5", "--", "true"], env=clean_env(), stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 0, result.stderr
    assert "elastic: 2 to 4 nodes; forms with at least 2 after a join wait of 5 s" in \
        result.stdout, result.stdout

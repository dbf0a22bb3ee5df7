"""Helpers for the drover.Cluster tests: a marker every process the test
starts inherits, and a check that none of them outlives the cluster."""

import json
import os
import time
import uuid

import pytest

MARK_VARIABLE = "DROVER_TEST_MARK"


def new_mark():
    return "drover-test-" + uuid.uuid4().hex[:12]


def marked_processes(mark, exclude=()):
    """(pid, command line) of live processes whose environment carries the mark."""
    needle = ("%s=%s" % (MARK_VARIABLE, mark)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == os.getpid() or pid in exclude:
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                environ = f.read().split(b"\0")
            with open("/proc/%d/stat" % pid, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in environ and state != b"Z":
            found.append((pid, cmdline))
    return found


def assert_no_leftovers(mark, exclude=(), wait=10.0):
    deadline = time.monotonic() + wait
    while marked_processes(mark, exclude) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = marked_processes(mark, exclude)
    assert left == [], "processes left behind: %r" % (left,)


def wait_for(predicate, what, timeout=60.0):
    """Polls `predicate` until it returns something true, and returns that;
    fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def count_records(args, ctx):
    """A main_fun: reads the whole feed and writes [epoch, record] pairs to
    <args>/<job>-<index>.json."""
    if ctx.job_name == "ps":
        return  # not fed
    feed = ctx.get_data_feed(train_mode=True)
    seen = []
    while not feed.should_stop():
        batch = feed.next_batch(7)
        if not batch:
            break
        seen.extend([feed.epoch, record] for record in batch)
    with open(os.path.join(args, "%s-%d.json" % (ctx.job_name, ctx.task_index)), "w") as out:
        json.dump(seen, out)


def seen_records(directory, tasks):
    """(epoch, record) pairs the workers `tasks` wrote with count_records."""
    seen = []
    for task in tasks:
        with open(os.path.join(directory, "worker-%d.json" % task)) as f:
            seen.extend(tuple(pair) for pair in json.load(f))
    return seen


# Fixtures for the modules that start clusters: import them by name.
@pytest.fixture
def in_tmp_path(tmp_path, monkeypatch):
    """The test runs in its tmp_path: node logs go to ./drover-logs/<cluster id>."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def mark(monkeypatch):
    """A fresh mark every process the test starts inherits; none may outlive it."""
    value = new_mark()
    monkeypatch.setenv(MARK_VARIABLE, value)
    yield value
    assert_no_leftovers(value)


def established_tcp_connections(pid):
    """How many established TCP connections process `pid` holds (read in its
    own network namespace's table, /proc/PID/net)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with open("/proc/%d/net/%s" % (pid, table)) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                count += fields[3] == "01" and fields[9] in inodes
    return count

"""drover.engines.Dask: one node per Dask worker, fed by Dask tasks.

Each node's agent is started by a long-running task pinned to one worker
(``workers=[address]``, no other worker allowed); the task leaves the
worker's thread pool (``secede``) and waits for the agent, so the worker keeps
its threads for feeding tasks. The agent runs in its own session with
``--exit-with-parent``: if the worker dies, the agent stops its program and
nothing is left behind. Its output comes back over a TCP connection to the
driver, which relays and logs it like any node's.

Cluster.train and inference take a dask.bag or a dask.dataframe. Partition i
goes to fed node i mod n; a feeding task for it runs on the worker that hosts
that node (after the node's previous feeding task: one writer at a time) and
pushes the records through the node's shared-memory queue.
"""

import ipaddress
import os
import secrets
import shutil
import signal as signals
import socket
import subprocess
import sys
import tempfile
import threading
import time

from drover import _feeding, _paths

# Agents started in this worker process, by nonce (for signal requests).
_AGENTS = {}
_AGENTS_LOCK = threading.Lock()
_HELLO_TIMEOUT = 30.0
_WORKER_CHECK_INTERVAL = 1.0


def _localize(argv, payload_path, credential_path):
    """The driver's agent argv made right for this host: this host's drover
    binary and Python, this host's copies of the payload and the node's
    credential, and the agent tied to this worker process."""
    argv = list(argv)
    argv[0] = _paths.drover_binary()
    argv[argv.index("--token-file") + 1] = credential_path
    separator = argv.index("--")
    argv[separator + 1] = sys.executable
    argv[-1] = payload_path
    argv[2:2] = ["--exit-with-parent", str(os.getpid())]
    return argv


def _run_agent(argv, payload, credential, log_host, log_port, nonce):
    """The node task: starts the agent, then waits for it outside the thread
    pool. Returns the agent's exit code (-N: killed by signal N)."""
    from distributed import secede

    workdir = tempfile.mkdtemp(prefix="drover-node-")  # 0700
    try:
        payload_path = os.path.join(workdir, "main_fun.pkl")
        with open(payload_path, "wb") as out:
            out.write(payload)
        credential_path = os.path.join(workdir, "node.credential")
        with open(os.open(credential_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
                  "wb") as out:
            out.write(credential)
        with socket.create_connection((log_host, log_port), timeout=_HELLO_TIMEOUT) as relay:
            relay.sendall(nonce.encode() + b"\n")
            # The thread that starts the agent must outlive it: the agent's
            # parent-death signal follows this thread, which waits below.
            process = subprocess.Popen(_localize(argv, payload_path, credential_path),
                                       stdin=subprocess.DEVNULL,
                                       stdout=relay.fileno(), stderr=subprocess.STDOUT,
                                       start_new_session=True, close_fds=True)
        with _AGENTS_LOCK:
            _AGENTS[nonce] = process
        secede()
        try:
            return process.wait()
        finally:
            with _AGENTS_LOCK:
                _AGENTS.pop(nonce, None)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _signal_agent(nonce, sig):
    with _AGENTS_LOCK:
        process = _AGENTS.get(nonce)
    if process is None or process.returncode is not None:
        return False
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return False
    return True


class _DaskAgent:
    """The driver's handle on one agent started by a Dask task (the process
    object drover's C++ driver polls; see python/driver_bindings.cc)."""

    pid = -1  # remote: not a pid of this host

    def __init__(self, engine, executor_id, worker, nonce, future):
        self._engine = engine
        self.executor_id = executor_id
        self.worker = worker
        self._nonce = nonce
        self._future = future
        self._conn = None
        self._output_closed = False
        self._signals = []

    def _attach(self, conn):
        if self._output_closed or self._conn is not None:
            conn.close()
            return
        conn.setblocking(False)
        self._conn = conn

    def output_fd(self):
        return self._conn.fileno() if self._conn is not None else -1

    def close_output(self):
        self._output_closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def poll(self):
        if self._future.done():
            if self._future.status == "finished":
                return int(self._future.result())
            return 255
        if not self._engine._worker_alive(self.worker):
            # The worker (and with it the agent, by its parent-death signal)
            # is gone; no exit status will come. _explain says so.
            return -int(signals.SIGKILL)
        return None

    def signal(self, sig):
        if self._future.done() or not self._engine._worker_alive(self.worker):
            return
        self._signals.append(self._engine.client.submit(
            _signal_agent, self._nonce, int(sig), workers=[self.worker],
            allow_other_workers=False, pure=False))

    def kill(self):
        self.signal(signals.SIGKILL)
        self.close_output()
        self._engine._retire(self._future, self._signals)


class Dask:
    """Runs each node on its own Dask worker.

    Args:
      client: a distributed.Client connected to the scheduler.
      workers: the worker addresses to use, in order; None: every worker the
        scheduler knows, sorted by address. A cluster of N nodes needs N
        workers (ps nodes excluded with driver_ps_nodes=True).
      rendezvous_host: the address of this host the workers can reach; None:
        the one this host uses to reach the scheduler.
    """

    name = "dask"

    def __init__(self, client, workers=None, rendezvous_host=None):
        self.client = client
        self._workers = list(workers) if workers is not None else None
        self._rendezvous_host = rendezvous_host
        self._assignment = {}
        self._agents = {}
        self._payload = b""
        self._listener = None
        self._alive = {}
        self._alive_checked = 0.0
        self._retired = []
        self._lock = threading.Lock()

    def __repr__(self):
        return "drover.engines.Dask(%r)" % (self.client,)

    # --- what the C++ driver calls (python/driver_bindings.cc) -------------
    def rendezvous_host(self):
        if self._rendezvous_host is None:
            self._rendezvous_host = _address_towards(self.client.scheduler.address)
        return self._rendezvous_host

    def agent_host(self, index):
        return _host_of(self._assignment[int(index)])

    def launch(self, executor_id, argv):
        worker = self._assignment[int(executor_id)]
        nonce = secrets.token_hex(16)
        log_host, log_port = self._listener.getsockname()[:2]
        # The driver wrote this node's credential (it joins as this node
        # only; the cluster token never leaves the driver) to its private
        # directory; the worker's host may not share it, so its bytes travel
        # with the task, through the scheduler.
        with open(argv[argv.index("--token-file") + 1], "rb") as credential_file:
            credential = credential_file.read()
        future = self.client.submit(
            _run_agent, list(argv), self._payload, credential, log_host, log_port, nonce,
            key="drover-node-%s-%s" % (executor_id, nonce[:8]), workers=[worker],
            allow_other_workers=False, pure=False, retries=0)
        agent = _DaskAgent(self, executor_id, worker, nonce, future)
        with self._lock:
            self._agents[nonce] = agent
        return agent

    # --- what drover.Cluster calls (drover/engines/__init__.py) ------------
    def _driver_engine(self):
        return self

    def _local_host(self):
        return self.rendezvous_host()

    def _start(self, num_nodes, local_executors, payload):
        available = self._workers
        if available is None:
            available = sorted(self.client.scheduler_info()["workers"])
        remote = [i for i in range(num_nodes) if str(i) not in local_executors]
        if len(available) < len(remote):
            raise ValueError(
                "the cluster needs %d Dask workers (one node per worker) but the scheduler at %s "
                "has %d: %s" % (len(remote), self.client.scheduler.address, len(available),
                                ", ".join(available) or "none"))
        self._assignment = dict(zip(remote, available))
        self._payload = payload
        self._listener = socket.create_server((self.rendezvous_host(), 0))
        threading.Thread(target=self._accept, name="drover-dask-output", daemon=True).start()

    def _accept(self):
        listener = self._listener
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._hello, args=(conn,), daemon=True).start()

    def _hello(self, conn):
        try:
            conn.settimeout(_HELLO_TIMEOUT)
            line = b""
            while not line.endswith(b"\n") and len(line) < 64:
                chunk = conn.recv(1)
                if not chunk:
                    break
                line += chunk
            with self._lock:
                agent = self._agents.get(line.strip().decode("ascii", "replace"))
        except OSError:
            agent = None
        if agent is None:
            conn.close()
            return
        agent._attach(conn)

    def _worker_alive(self, worker):
        now = time.monotonic()
        if now - self._alive_checked >= _WORKER_CHECK_INTERVAL:
            self._alive_checked = now
            try:
                workers = self.client.scheduler_info()["workers"]
                self._alive = {address: True for address in workers}
            except Exception:  # noqa: BLE001 - an unreachable scheduler: keep the last view
                pass
        return self._alive.get(worker, False)

    def _retire(self, future, signal_futures):
        self._retired.append((future, signal_futures))

    def _feed(self, nodes, data, num_epochs, feed_timeout, inference, remainder):
        return _DaskFeed(self, nodes, data, num_epochs, feed_timeout, inference, remainder)

    def _end_feed(self, node):
        worker = self._assignment[int(node["executor_id"])]
        future = self.client.submit(_feeding.end_feed, node["feed_socket"], workers=[worker],
                                    allow_other_workers=False, pure=False)
        return future

    def _explain(self, executor_id, reason):
        worker = self._assignment.get(int(executor_id))
        if worker is not None and not self._worker_alive(worker):
            return "its Dask worker %s left the cluster, and its agent with it (%s)" % (
                worker, reason)
        return reason

    def _describe(self, executor_id):
        worker = self._assignment.get(int(executor_id))
        if worker is None:
            return "on the driver's host"
        gone = "" if self._worker_alive(worker) else ", which has left the Dask cluster"
        return "on Dask worker %s%s" % (worker, gone)

    def _close(self):
        if self._listener is not None:
            self._listener.close()
        futures = []
        for future, signal_futures in self._retired:
            futures.append(future)
            futures.extend(signal_futures)
        if futures:
            # Finished tasks free their results; tasks stuck on a lost worker are dropped.
            self.client.cancel(futures)
        self._retired = []


class _DaskFeed:
    """Feeding tasks for one train() or inference() call."""

    def __init__(self, engine, nodes, data, num_epochs, feed_timeout, inference, remainder):
        client = engine.client
        self._client = client
        parts = _delayed_partitions(data)
        part_futures = client.compute(parts)
        self._futures = []
        self._result_futures = [None] * len(parts)
        self._part_futures = part_futures
        # Equal shares need each partition's count: a task beside each
        # partition, which is computed for feeding anyway.
        counts = client.gather(client.map(_feeding.count_records, part_futures, pure=False))
        shares = _feeding.share_units(counts, len(nodes), num_epochs, inference, remainder)
        for node, units in zip(nodes, shares):
            worker = engine._assignment[int(node["executor_id"])]
            previous = None
            for i, unit in enumerate(units):
                partition, epoch, begin, _ = unit
                future = client.submit(
                    _feeding.feed_task, part_futures[partition], previous, node["feed_socket"],
                    unit, feed_timeout, inference, i == len(units) - 1,
                    key="drover-feed-%s-e%d-p%d-r%d-%s" % (
                        node["task"].replace(":", ""), epoch, partition, begin,
                        secrets.token_hex(4)),
                    workers=[worker], allow_other_workers=False, pure=False, retries=0)
                previous = future
                self._futures.append((node["task"], future))
                if inference:
                    self._result_futures[partition] = future

    def done(self):
        return all(future.done() for _, future in self._futures)

    def error(self):
        for task, future in self._futures:
            if future.done() and future.status == "error":
                return task, future.exception()
        return None

    def results(self):
        import dask
        import dask.bag

        return dask.bag.from_delayed([dask.delayed(_identity)(future)
                                      for future in self._result_futures])

    def cancel(self):
        futures = [f for _, f in self._futures] + list(self._part_futures)
        if futures:
            self._client.cancel(futures)


def _identity(value):
    return value


def _delayed_partitions(data):
    to_delayed = getattr(data, "to_delayed", None)
    if to_delayed is None:
        raise TypeError("the Dask engine feeds a dask.bag or a dask.dataframe, got %s"
                        % type(data).__name__)
    return to_delayed(optimize_graph=True)


def _host_of(address):
    """'tcp://10.0.0.2:4567' -> '10.0.0.2'."""
    rest = address.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0]
    return host.strip("[]")


def _address_towards(address):
    """This host's address on the route to `address` (a Dask address)."""
    host = _host_of(address)
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # no packet is sent: this only picks the route
        return probe.getsockname()[0]

"""drover.Cluster: TensorFlowOnSpark's TFCluster over drover's C++ driver.

    cluster = drover.Cluster.run(drover.engines.Dask(client), main_fun, args,
                                 num_executors=2, input_mode=drover.InputMode.FEED)
    cluster.train(bag, num_epochs=10)
    cluster.shutdown()

run() starts one node per executor through the engine, forms the cluster
through drover's rendezvous and returns once every node knows its role; each
node runs main_fun(args, ctx) with ctx its drover.NodeContext. The driver (the
C++ one behind `drover run`) supervises the nodes on a thread of this
process: their output is printed tagged "[worker:1] ..." and logged under
``drover_log_dir``; the first node that fails stops the others and surfaces
here as drover.NodeError from whichever call is waiting. docs/python_api.md
maps every TensorFlowOnSpark call to drover's.
"""

import atexit
import enum
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref

from drover import _drover, _paths

# The line drover._node_main prints before a main_fun traceback.
FAILURE_MARKER = "drover: main_fun raised an exception on "

# TensorFlowOnSpark's train(num_epochs=0): "unspecified", fed 10 times.
TFOS_UNSPECIFIED_EPOCHS = 10
# TensorFlowOnSpark's shutdown() default: three days.
DEFAULT_SHUTDOWN_TIMEOUT = 259200
# How long a failing feeding task waits for the driver to name the node that failed.
_FAILURE_SETTLE = 6.0
_POLL = 0.1
# How long a node's next_batch waits for records: the driver stops a node's
# feed when the cluster stops, so this only bounds a driver that vanished.
_NODE_READ_TIMEOUT = float(DEFAULT_SHUTDOWN_TIMEOUT)


class InputMode(enum.IntEnum):
    """How data reaches the nodes (TensorFlowOnSpark's InputMode).

    FRAMEWORK (TensorFlowOnSpark's TENSORFLOW): the program reads its data
    itself; train() and inference() are not used.
    FEED (TensorFlowOnSpark's SPARK): the engine's partitions are pushed into
    each node's queue by train() and inference(); the program reads them with
    ctx.get_data_feed().
    """

    FRAMEWORK = 0
    FEED = 1
    TENSORFLOW = 0
    SPARK = 1


class NodeError(RuntimeError):
    """A node of the cluster failed. Attributes: node ("worker:1"),
    executor_id, host, reason (how it failed), traceback (the Python
    traceback main_fun raised, "" if none), last_lines (its last lines of
    output) and log (its log file on the driver's host)."""

    def __init__(self, node, executor_id, host, reason, traceback, last_lines, log, where=""):
        self.node = node
        self.executor_id = executor_id
        self.host = host
        self.reason = reason
        self.traceback = traceback
        self.last_lines = list(last_lines)
        self.log = log
        who = node or "executor %s" % executor_id
        message = "%s (executor %s %s) failed: %s" % (who, executor_id, where or "on " + host,
                                                     reason)
        if traceback:
            message += "\n" + traceback
        elif last_lines:
            message += "\nits last lines:\n" + "\n".join("  | " + line for line in last_lines)
        if log:
            message += "\n(full log: %s)" % log
        super().__init__(message)


def _traceback_of(lines):
    """The traceback _node_main printed after its marker, if any."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(FAILURE_MARKER):
            return "\n".join(lines[i + 1:]).rstrip()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback (most recent call last):"):
            return "\n".join(lines[i:]).rstrip()
    return ""


def _new_cluster_id():
    return time.strftime("run-%Y%m%d-%H%M%S-") + os.urandom(2).hex()


class Cluster:
    """A running cluster (TensorFlowOnSpark's TFCluster). Make one with
    Cluster.run(...). Attributes as in TensorFlowOnSpark: cluster_id,
    cluster_info (one dict per node: executor_id, host, job_name, task_index,
    port, addr, ...), cluster_meta, num_executors, input_mode; and
    drover_log_dir (where every node's output is logged)."""

    def __init__(self):
        raise TypeError("make a cluster with drover.Cluster.run(engine, main_fun, args, ...)")

    @classmethod
    def run(cls, engine, main_fun, args, num_executors, num_ps=0, tensorboard=False,
            input_mode=InputMode.FRAMEWORK, log_dir=None, driver_ps_nodes=False,
            master_node=None, reservation_timeout=600, queues=None, eval_node=False,
            release_port=True, *, queue_bytes=64 << 20, drover_log_dir=None, grace=5.0,
            status_port=None, rendezvous=None, driver_timeout=None, etcd_cacert=None,
            etcd_cert=None, etcd_key=None, etcd_user=None):
        """Starts a cluster and returns once every node has its role.

        Args (TensorFlowOnSpark's TFCluster.run):
          engine: drover.engines.Local() or drover.engines.Dask(client).
          main_fun: main_fun(args, ctx), run on every node (pickled with
            cloudpickle, so closures and lambdas work).
          args: passed to main_fun as is.
          num_executors: nodes in the cluster, ps included (also with
            driver_ps_nodes=True, as TensorFlowOnSpark counts: then the engine
            runs num_executors - num_ps of them).
          num_ps: parameter-server nodes.
          tensorboard: start TensorBoard on log_dir beside the driver; its
            address is in tensorboard_url().
          input_mode: InputMode.FEED to feed data with train()/inference(),
            InputMode.FRAMEWORK when the program reads its own data.
          log_dir: TensorBoard's event directory (TensorFlowOnSpark's log_dir).
          driver_ps_nodes: run the ps nodes on this host, beside the driver,
            instead of on engine workers.
          master_node: "chief" or "master": the name of the first non-ps node.
          reservation_timeout: seconds to wait for every node to register.
          queues: TensorFlowOnSpark's queue names; ignored (one input and one
            output queue per node).
          eval_node: one node is an "evaluator".
          release_port: True (TensorFlowOnSpark's default): the node's
            address port is free when main_fun starts. False: the node holds
            it bound (ctx.tmp_socket) until main_fun calls ctx.release_port(),
            TensorFlowOnSpark's guard against another process taking it.
          queue_bytes: the size of each node's input and output queue.
          drover_log_dir: where node logs go (default ./drover-logs/<id>).
          grace: seconds between SIGTERM and SIGKILL when stopping a node.
          status_port: serve the driver's status page, /api/cluster and
            /metrics on 127.0.0.1 at this port (0: a free one; its address
            is in status_url()); None: no status server (docs/status.md).
          rendezvous: None (drover's built-in rendezvous, in this process),
            or "etcd://HOST:PORT[,HOST:PORT...]/RUN": the nodes form and keep
            the run's state in etcd, so the run outlives this process (the
            local engine only; docs/python_api.md, "Through etcd").
            `drover run --attach etcd://.../RUN` takes up a run whose Python
            driver died. drover_log_dir then defaults to
            ./drover-logs/etcd-RUN.
          driver_timeout: with rendezvous etcd://, stop the run when no
            driver has watched it for this many seconds (None: never, the
            nodes' programs go on to their end).
          etcd_cacert, etcd_cert, etcd_key, etcd_user: etcd's TLS and user,
            as drover run's --etcd-* flags (etcd_user "NAME" takes its
            password from DROVER_ETCD_PASSWORD, or "NAME:PASSWORD").

        Raises ValueError for a bad argument or too few workers, NodeError
        when a node failed before the cluster formed, RuntimeError (with the
        driver's account: the reservation timeout names the missing nodes)
        when it did not form otherwise.
        """
        del queues
        if not callable(main_fun):
            raise TypeError("main_fun must be callable as main_fun(args, ctx)")
        input_mode = InputMode(input_mode)
        if num_executors < 1:
            raise ValueError("num_executors must be at least 1, got %r" % (num_executors,))
        if num_ps < 0:
            raise ValueError("num_ps must be >= 0, got %r" % (num_ps,))
        if master_node not in (None, "chief", "master"):
            raise ValueError("master_node must be None, 'chief' or 'master', got %r"
                             % (master_node,))
        trainers = num_executors - num_ps - (1 if eval_node else 0)
        if trainers < 1:
            raise ValueError(
                "num_executors=%d leaves no chief, master or worker node after %d ps%s"
                % (num_executors, num_ps, " and the evaluator" if eval_node else ""))
        num_nodes = num_executors
        etcd = _etcd_options(rendezvous, engine, driver_timeout, etcd_cacert, etcd_cert,
                             etcd_key, etcd_user)
        if etcd is not None and drover_log_dir is None:
            drover_log_dir = os.path.join(os.getcwd(), "drover-logs", "etcd-" + etcd["run"])
        import cloudpickle  # pickles main_fun by value when it lives in __main__

        # The third item is read by drover._node_main (older payloads have two).
        payload = cloudpickle.dumps((main_fun, args, {"release_port": bool(release_port)}))
        self = object.__new__(cls)
        self._init(engine, num_nodes, num_ps, input_mode, tensorboard, log_dir, drover_log_dir)
        self._local_executors = {str(i) for i in range(num_ps)} if driver_ps_nodes else set()
        self._through_etcd = etcd is not None
        try:
            # Through etcd the run outlives this process, and a new round
            # starts the programs again: main_fun stays with the run's logs,
            # named for this cluster (another Cluster.run with the same RUN
            # joins that run and must not replace its main_fun).
            payload_dir = self.drover_log_dir if etcd is not None else self._private_dir
            os.makedirs(payload_dir, exist_ok=True)
            payload_path = os.path.join(payload_dir, "main_fun-%s.pkl" % self._cluster_id
                                        if etcd is not None else "main_fun.pkl")
            with open(payload_path, "wb") as out:
                out.write(payload)
            command = [sys.executable, "-m", "drover._node_main", payload_path]
            external_feed = None
            if input_mode == InputMode.FEED:
                external_feed = {"queue_bytes": int(queue_bytes),
                                 "feed_timeout": _NODE_READ_TIMEOUT}
            if etcd is not None:
                self._driver = _drover._ClusterDriver.through_etcd(
                    address=etcd["address"], num_nodes=num_nodes, num_ps=num_ps,
                    master_node=master_node, eval_node=eval_node, command=command,
                    agent_binary=_paths.drover_binary(), run_dir=self.drover_log_dir,
                    grace=float(grace), external_feed=external_feed, host=engine._local_host(),
                    status_port=-1 if status_port is None else int(status_port),
                    driver_timeout=etcd["driver_timeout"], etcd=etcd["tls"])
            else:
                engine._start(num_nodes, self._local_executors, payload)
                self._driver = _drover._ClusterDriver(
                    num_nodes=num_nodes, num_ps=num_ps, master_node=master_node,
                    eval_node=eval_node, command=command, agent_binary=_paths.drover_binary(),
                    log_dir=self.drover_log_dir, reservation_timeout=float(reservation_timeout),
                    grace=float(grace), others_grace=0.0, last_lines=200,
                    cluster_id=self._cluster_id, external_feed=external_feed,
                    engine=engine._driver_engine(), local_executors=self._local_executors,
                    host=engine._local_host(),
                    status_port=-1 if status_port is None else int(status_port))
            self._driver.start()
        except BaseException:
            self._finish()
            raise
        return self._formed(reservation_timeout, tensorboard)

    def _formed(self, reservation_timeout, tensorboard):
        """Waits for the cluster to form; returns self."""
        _live_clusters.add(self)
        if not self._driver.wait_formed(float(reservation_timeout) + 30.0):
            error = self._error_from_driver("the cluster did not form")
            self._finish()
            raise error
        formed = self._driver.formed
        self.cluster_id = formed["cluster_id"]
        self.cluster_spec = formed["cluster_spec"]
        self._nodes = formed["nodes"]
        for node in self._nodes:
            node["task"] = "%s:%d" % (node["job_name"], node["task_index"])
            node["executor_id"] = int(node["executor_id"])
            node["tb_port"] = 0
            node["tb_pid"] = 0
        if tensorboard:
            self._start_tensorboard()
        return self

    def _init(self, engine, num_nodes, num_ps, input_mode, tensorboard, log_dir, drover_log_dir):
        self._through_etcd = False
        self.engine = engine
        self.num_executors = num_nodes
        self.num_ps = num_ps
        self.input_mode = input_mode
        self.log_dir = log_dir
        self.tensorboard = tensorboard
        self._tensorboard = None
        self._tensorboard_url = None
        self._shut_down = False
        self._driver = None
        self._private_dir = tempfile.mkdtemp(prefix="drover-cluster-")
        self._cluster_id = _new_cluster_id()
        if drover_log_dir is None:
            drover_log_dir = os.path.join(os.getcwd(), "drover-logs", self._cluster_id)
        self.drover_log_dir = os.path.abspath(drover_log_dir)

    # --- TensorFlowOnSpark's attributes ---------------------------------
    @property
    def cluster_info(self):
        """One dict per node, in cluster order: executor_id, host, job_name,
        task_index, port, addr, pid, gpus, tb_port, tb_pid."""
        internal = ("feed_socket", "task", "agent_address")
        return [{k: v for k, v in node.items() if k not in internal} for node in self._nodes]

    @property
    def cluster_meta(self):
        template = {}
        for node in self._nodes:
            template.setdefault(node["job_name"], []).append(node["executor_id"])
        return {"id": self.cluster_id, "cluster_template": template,
                "num_executors": self.num_executors, "default_fs": "file://",
                "working_dir": os.getcwd(), "server_addr": None,
                "drover_log_dir": self.drover_log_dir}

    def tensorboard_url(self):
        """TensorBoard's address when run(tensorboard=True), else None."""
        return self._tensorboard_url

    def status_url(self):
        """The status page's address when run(status_port=...), else None."""
        return self._driver.status_url if self._driver is not None else None

    def status(self):
        """The run as the status page shows it: /api/cluster's dict (phase,
        rendezvous, nodes with state, heartbeat age, exit and feed counters,
        the feed's totals and rate; docs/status.md)."""
        import json
        return json.loads(self._driver.status_json()) if self._driver is not None else None

    # --- feeding --------------------------------------------------------
    def _fed_nodes(self):
        # The driver gives each node its share (drover/placement.h's rule).
        return sorted((n for n in self._nodes if n["feed_share"] is not None),
                      key=lambda n: n["feed_share"])

    def _check_feedable(self, call):
        if self._shut_down:
            raise RuntimeError("%s: the cluster was shut down" % call)
        if self.input_mode != InputMode.FEED:
            raise ValueError("%s feeds data: start the cluster with input_mode=InputMode.FEED "
                             "(this one uses InputMode.FRAMEWORK: the program reads its own data)"
                             % call)
        self._raise_if_failed()

    def train(self, data, num_epochs=1, feed_timeout=600, qname="input", remainder="pad"):
        """Feeds `data` to the chief/master and worker nodes, num_epochs
        times, and returns once they have taken every record (as
        TensorFlowOnSpark's train returns once its queues are drained).

        data: a dask.bag or dask.dataframe (Dask engine); an iterable of
        partitions, each an iterable of records (local engine). Every fed
        node gets the same number of records each epoch (equal shares, as
        `drover run --input`: the partitions are counted, then split into
        contiguous shares), so a synchronous program needs no Join;
        remainder="pad" (default) feeds the records left over again from
        the start, "drop" feeds them to nobody. A node reads a record as
        the object it was (a DataFrame row as a dict). feed_timeout: seconds
        a node may take nothing before TimeoutError. qname is
        TensorFlowOnSpark's and ignored. num_epochs=0 means 10 epochs, as in
        TensorFlowOnSpark ("unspecified: an arbitrarily large number"); a
        negative count is a ValueError.
        """
        del qname
        if remainder not in ("pad", "drop"):
            raise ValueError("remainder is 'pad' or 'drop', got %r" % (remainder,))
        self._check_feedable("train")
        if isinstance(num_epochs, bool) or not isinstance(num_epochs, int):
            raise TypeError("num_epochs must be an int, got %r" % (num_epochs,))
        if num_epochs < 0:
            raise ValueError("num_epochs cannot be negative, got %r" % (num_epochs,))
        if num_epochs == 0:
            num_epochs = TFOS_UNSPECIFIED_EPOCHS
        self._run_feed(data, num_epochs, feed_timeout, inference=False, remainder=remainder)

    def inference(self, data, feed_timeout=600, qname="input"):
        """Feeds `data` once for inference and returns the results, one per
        record in input order: a dask.bag (Dask engine) or a list (local).
        Partition i goes to fed node i mod n, whole. The program answers
        each batch with feed.batch_results(results)."""
        del qname
        self._check_feedable("inference")
        return self._run_feed(data, 1, feed_timeout, inference=True)

    def _run_feed(self, data, num_epochs, feed_timeout, inference, remainder="pad"):
        nodes = self._fed_nodes()
        if not nodes:
            raise ValueError("this cluster has no chief, master or worker node to feed")
        job = self.engine._feed(nodes, data, num_epochs, float(feed_timeout), inference,
                                remainder)
        try:
            return self._wait_feed(job, inference)
        except KeyboardInterrupt:
            job.cancel()
            self._finish()  # Ctrl-C stops the cluster, as it stops `drover run`
            raise

    def _wait_feed(self, job, inference):
        failed_at = None
        while True:
            if self._driver.failure is not None or self._driver.exit_code is not None:
                job.cancel()
                self._raise_if_failed()
                raise RuntimeError("the cluster ended while feeding:\n" + self._driver.messages)
            error = job.error()
            if error is not None:
                # A node that failed makes its feeding task fail too; name the node.
                failed_at = failed_at or time.monotonic()
                if time.monotonic() - failed_at >= _FAILURE_SETTLE:
                    job.cancel()
                    task, exception = error
                    kind = TimeoutError if isinstance(exception, TimeoutError) else RuntimeError
                    raise kind("feeding %s failed: %s" % (task, exception)) from exception
            elif job.done():
                return job.results() if inference else None
            time.sleep(_POLL)

    # --- the end --------------------------------------------------------
    def shutdown(self, ssc=None, grace_secs=0, timeout=DEFAULT_SHUTDOWN_TIMEOUT):
        """Ends the nodes' feeds (InputMode.FEED), waits for the chief/master
        and workers to finish, stops the ps and evaluator nodes grace_secs
        later, and frees everything. timeout: seconds to wait for the nodes
        (-1: forever); past it every node is stopped and TimeoutError raised.
        Raises NodeError when a node failed.

        ssc is TensorFlowOnSpark's StreamingContext, in its place: None, or an
        object with awaitTerminationOrTimeout(seconds) and stop(...); shutdown
        then waits until it terminates or the cluster's nodes are done, and
        stops it (stopSparkContext=False, stopGraceFully=True) as
        TensorFlowOnSpark does. The arguments are checked before anything
        is stopped: a bad one raises TypeError and leaves the cluster running.
        """
        if ssc is not None and not (hasattr(ssc, "awaitTerminationOrTimeout") and
                                    hasattr(ssc, "stop")):
            raise TypeError(
                "shutdown(ssc=None, grace_secs=0, timeout=%d): ssc must be None or a streaming "
                "context (with awaitTerminationOrTimeout and stop), got %r; pass grace_secs "
                "and timeout by keyword; the cluster is still running"
                % (DEFAULT_SHUTDOWN_TIMEOUT, ssc))
        for name, value in (("grace_secs", grace_secs), ("timeout", timeout)):
            if value is None and name == "timeout":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError("shutdown: %s must be a number of seconds, got %r; the cluster "
                                "is still running" % (name, value))
        if self._shut_down:
            return
        try:
            if ssc is not None:
                self._await_streaming(ssc)
            if self._driver.exit_code is None:
                self._driver.set_others_grace(float(grace_secs))
                if self.input_mode == InputMode.FEED:
                    self._end_feeds()
            wait = float("inf") if timeout is None or timeout < 0 else float(timeout)
            deadline = time.monotonic() + wait
            while not self._driver.join(min(1.0, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    self._driver.request_stop()
                    self._driver.join(60.0)
                    raise TimeoutError(
                        "shutdown: the nodes were not done %s s after their feeds ended; every "
                        "node was stopped (logs in %s)" % (timeout, self.drover_log_dir))
            self._raise_if_failed()
            code = self._driver.exit_code
            if code != 0:
                raise RuntimeError("the cluster ended with code %s:\n%s"
                                   % (code, self._driver.messages))
        finally:
            self._finish()

    def _await_streaming(self, ssc):
        """TensorFlowOnSpark's streaming wait: until the streaming context
        terminates or the cluster has ended, then stop the context."""
        while not ssc.awaitTerminationOrTimeout(1):
            if self._ended():
                ssc.stop(stopSparkContext=False, stopGraceFully=True)
                break

    def _ended(self):
        return self._driver.failure is not None or self._driver.exit_code is not None

    def _end_feeds(self):
        """Tells every fed node its feed is over. A node that already failed
        is left to the driver's report."""
        pending = []
        for node in self._fed_nodes():
            if self._ended():
                return
            try:
                pending.append((node, self.engine._end_feed(node)))
            except Exception as error:  # noqa: BLE001 - reported below, unless a node failed
                pending.append((node, error))
        for node, outcome in pending:
            while hasattr(outcome, "done") and not outcome.done() and not self._ended():
                time.sleep(_POLL)
            if hasattr(outcome, "done"):
                outcome = outcome.exception() if outcome.done() and outcome.status == "error" \
                    else None
            if outcome is None:
                continue
            settle = time.monotonic() + _FAILURE_SETTLE
            while not self._ended() and time.monotonic() < settle:
                time.sleep(_POLL)
            self._raise_if_failed()
            if self._driver.exit_code is None:
                raise RuntimeError("shutdown: cannot end the feed of %s: %s"
                                   % (node["task"], outcome)) from outcome

    def _finish(self):
        """Stops everything this cluster started; idempotent."""
        if self._shut_down:
            return
        self._shut_down = True
        if self._driver is not None and self._driver.exit_code is None:
            self._driver.request_stop()
        if self._driver is not None:
            self._driver.join(120.0)
        if self._tensorboard is not None:
            _stop_group(self._tensorboard)
            self._tensorboard = None
        try:
            self.engine._close()
        finally:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            _live_clusters.discard(self)

    def _raise_if_failed(self):
        failure = self._driver.failure if self._driver is not None else None
        if failure is None:
            return
        error = self._node_error(failure)
        self._finish()
        raise error

    def _node_error(self, failure):
        lines = failure["last_lines"]
        log = ""
        if self._through_etcd and failure["executor_id"]:
            log = os.path.join(self.drover_log_dir, "node-%s.log" % failure["executor_id"])
        elif failure["task"]:
            job, index = failure["task"].split(":")
            log = os.path.join(self.drover_log_dir, "%s-%s.log" % (job, index))
        reason = self.engine._explain(failure["executor_id"], failure["reason"])
        return NodeError(failure["task"], failure["executor_id"], failure["host"],
                         reason, _traceback_of(lines), lines[-20:], log,
                         where=self.engine._describe(failure["executor_id"]))

    def _error_from_driver(self, what):
        failure = self._driver.failure
        if failure is not None:
            return self._node_error(failure)
        messages = self._driver.messages.strip()
        return RuntimeError("%s:\n%s" % (what, messages) if messages else what)

    def _start_tensorboard(self):
        binary = shutil.which("tensorboard")
        if binary is None:
            self._finish()
            raise RuntimeError("tensorboard=True: no 'tensorboard' executable on PATH (install "
                               "TensorBoard, or pass tensorboard=False)")
        logdir = self.log_dir or os.path.join(self.drover_log_dir, "tensorboard")
        os.makedirs(logdir, exist_ok=True)
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        # Under a guard tied to this interpreter's life (its stdin).
        self._tensorboard = subprocess.Popen(
            _paths.guarded([binary, "--logdir", logdir, "--port", str(port)], grace=5.0),
            stdin=subprocess.PIPE, start_new_session=True)
        # TensorBoard runs beside the driver, not on a node: its address is
        # tensorboard_url(), and the nodes' tb_port / tb_pid stay 0.
        self._tensorboard_url = "http://%s:%d" % (socket.gethostname(), port)

    def __repr__(self):
        state = "shut down" if self._shut_down else "running"
        return "drover.Cluster(%s, %d nodes on %r, %s)" % (
            getattr(self, "cluster_id", "?"), self.num_executors, self.engine, state)


def _etcd_options(rendezvous, engine, driver_timeout, cacert, cert, key, user):
    """Cluster.run's etcd arguments checked; None for the built-in rendezvous."""
    tls = {"cacert": cacert, "cert": cert, "key": key, "user": user}
    if rendezvous is None:
        given = ["etcd_" + name for name, value in tls.items() if value is not None]
        if driver_timeout is not None:
            given.insert(0, "driver_timeout")
        if given:
            raise ValueError("%s needs rendezvous='etcd://HOST:PORT/RUN' (the built-in "
                             "rendezvous lives in this process)" % given[0])
        return None
    address = str(rendezvous)
    run = address[len("etcd://"):].partition("/")[2]
    if not address.startswith("etcd://") or not run or not address[len("etcd://"):].split("/")[0]:
        raise ValueError("rendezvous is None (built-in) or 'etcd://HOST:PORT[,HOST:PORT...]/RUN', "
                         "got %r" % (rendezvous,))
    if engine._driver_engine() is not None:
        raise ValueError(
            "rendezvous=%r: through etcd drover.Cluster starts its nodes on this host "
            "(drover.engines.Local); on other hosts start `drover agent --rendezvous %s "
            "--nodes ...` on each (docs/run.md)" % (address, address))
    if driver_timeout is not None and (isinstance(driver_timeout, bool) or
                                       not isinstance(driver_timeout, (int, float)) or
                                       driver_timeout <= 0):
        raise ValueError("driver_timeout is a positive number of seconds or None, got %r"
                         % (driver_timeout,))
    tls = {name: "" if value is None else str(value) for name, value in tls.items()}
    name, colon, password = tls["user"].partition(":")
    if colon:
        tls["user"], tls["password"] = name, password
    else:
        tls["password"] = os.environ.get("DROVER_ETCD_PASSWORD", "") if name else ""
    return {"address": address, "run": "".join(c if c.isalnum() or c in "-_" else "_"
                                                for c in run.rsplit("/", 1)[-1]),
            "driver_timeout": None if driver_timeout is None else float(driver_timeout),
            "tls": tls}


def _stop_group(process):
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


_live_clusters = weakref.WeakSet()


@atexit.register
def _stop_live_clusters():
    """A script that ends without shutdown() leaves no node behind."""
    for cluster in list(_live_clusters):
        try:
            cluster._finish()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


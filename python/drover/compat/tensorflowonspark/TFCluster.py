"""TensorFlowOnSpark's TFCluster on drover.Cluster.

``run(sc, map_fun, tf_args, num_executors, num_ps, ...)`` takes
TensorFlowOnSpark's arguments in its order and with its defaults; ``sc`` is a
drover engine (drover.engines.Local(), drover.engines.Dask(client)) or a
``distributed.Client``. Each node runs ``map_fun(tf_args, ctx)`` with ``ctx``
a TFNode.TFNodeContext. The returned TFCluster has train, inference,
shutdown and tensorboard_url as TensorFlowOnSpark's, over a drover.Cluster
(``cluster.drover_cluster``). docs/porting.md lists what differs on purpose.
"""

import logging
import sys

import drover
from drover.cluster import DEFAULT_SHUTDOWN_TIMEOUT, InputMode
from drover.compat.tensorflowonspark import TFNode

logger = logging.getLogger(__name__)

__all__ = ["InputMode", "TFCluster", "run"]


class ClusterConfigError(ValueError, AssertionError):
    """A cluster TensorFlowOnSpark refuses with an assertion (too few
    executors, no worker or master): an AssertionError there, and a
    ValueError as drover.Cluster.run raises it."""


def _engine_of(sc):
    """The drover engine behind TensorFlowOnSpark's ``sc``."""
    if hasattr(sc, "_start") and hasattr(sc, "_feed"):
        return sc
    try:
        from distributed import Client
    except ImportError:
        Client = None
    if Client is not None and isinstance(sc, Client):
        return drover.engines.Dask(sc)
    raise TypeError(
        "TFCluster.run: sc must be a drover engine (drover.engines.Local(), "
        "drover.engines.Dask(client)) or a distributed.Client, got %r (a SparkContext cannot "
        "start drover nodes: docs/spark_engine.md)" % (type(sc).__name__,))


class _NodeMain:
    """What every node runs: TensorFlowOnSpark's ctx around drover's, then
    map_fun(tf_args, ctx). Pickled with cloudpickle by drover.Cluster.run;
    this class itself is imported on the node."""

    def __init__(self, map_fun):
        self.map_fun = map_fun

    def __call__(self, args, drover_ctx):
        ctx = TFNode.TFNodeContext(drover_ctx)
        if isinstance(args, list):
            # TensorFlowOnSpark's tf_args may be a command line (ARGV): the
            # node's program then sees it as its own sys.argv.
            sys.argv = args
        if ctx.tmp_socket is not None:
            logger.warning("User code must invoke ctx.release_port() prior to starting "
                           "TF GRPC server")
        return self.map_fun(args, ctx)


class TFCluster:
    """A running cluster, as TensorFlowOnSpark's TFCluster. Attributes:
    sc, defaultFS, working_dir, num_executors, cluster_id, cluster_info,
    cluster_meta, input_mode, queues; nodeRDD and server are None (no RDD,
    and the rendezvous server lives in the driver); drover_cluster is the
    drover.Cluster underneath."""

    sc = None
    defaultFS = None
    working_dir = None
    num_executors = None
    nodeRDD = None
    cluster_id = None
    cluster_info = None
    cluster_meta = None
    input_mode = None
    queues = None
    server = None

    def train(self, dataRDD, num_epochs=0, feed_timeout=600, qname="input"):
        """*For InputMode.SPARK only*: feeds ``dataRDD`` (a dask.bag or
        dataframe; with the local engine a list of partitions) to the
        chief/master and worker nodes, ``num_epochs`` times (0: 10 times, as
        TensorFlowOnSpark), and returns once they have taken every record."""
        if self.input_mode != InputMode.SPARK:
            raise ClusterConfigError("TFCluster.train() requires InputMode.SPARK")
        if qname not in self.queues:
            raise ClusterConfigError("Unknown queue: {}".format(qname))
        if num_epochs < 0:
            raise ClusterConfigError("num_epochs cannot be negative")
        self.drover_cluster.train(dataRDD, num_epochs=num_epochs, feed_timeout=feed_timeout)

    def inference(self, dataRDD, feed_timeout=600, qname="input"):
        """*For InputMode.SPARK only*: feeds ``dataRDD`` once and returns one
        result per record in input order (a dask.bag, or a list with the
        local engine). Unlike an RDD, it is computed during the call."""
        if self.input_mode != InputMode.SPARK:
            raise ClusterConfigError("TFCluster.inference() requires InputMode.SPARK")
        if qname not in self.queues:
            raise ClusterConfigError("Unknown queue: {}".format(qname))
        return self.drover_cluster.inference(dataRDD, feed_timeout=feed_timeout)

    def shutdown(self, ssc=None, grace_secs=0, timeout=DEFAULT_SHUTDOWN_TIMEOUT):
        """Stops the cluster: ends the feeds, waits for the chief/master and
        workers, stops ps and evaluator nodes ``grace_secs`` later.
        ``timeout`` (-1: none) bounds the wait. A failed node raises
        drover.NodeError and a timeout TimeoutError (TensorFlowOnSpark calls
        sys.exit(1); uncaught, these end the program with status 1 too)."""
        self.drover_cluster.shutdown(ssc, grace_secs, timeout)

    def tensorboard_url(self):
        """TensorBoard's address, when run with tensorboard=True."""
        return self.drover_cluster.tensorboard_url()


def run(sc, map_fun, tf_args, num_executors, num_ps, tensorboard=False,
        input_mode=InputMode.TENSORFLOW, log_dir=None, driver_ps_nodes=False, master_node=None,
        reservation_timeout=600, queues=["input", "output", "error"], eval_node=False,
        release_port=True):
    """Starts the cluster and runs ``map_fun(tf_args, ctx)`` on every node
    (TensorFlowOnSpark's TFCluster.run: same arguments, order and defaults).

    Args:
      sc: a drover engine or a distributed.Client: where the nodes run.
      map_fun: the program of every node.
      tf_args: passed to map_fun as is; a list (a command line) is also
        the node's sys.argv, as in TensorFlowOnSpark.
      num_executors: nodes in the cluster, ps included.
      num_ps: parameter-server nodes (the first executors).
      tensorboard: start TensorBoard (beside the driver).
      input_mode: InputMode.TENSORFLOW (the program reads its data) or
        InputMode.SPARK (train/inference feed it).
      log_dir: TensorBoard's event directory.
      driver_ps_nodes: run the ps nodes on the driver's host
        (InputMode.TENSORFLOW only, as in TensorFlowOnSpark).
      master_node: "chief" or "master": the first non-ps node's job.
      reservation_timeout: seconds for every node to register.
      queues: queue names train/inference accept as qname.
      eval_node: one node is an "evaluator" (InputMode.TENSORFLOW only).
      release_port: True: the node's port is free when map_fun starts
        (ctx.tmp_socket is None). False: it is held by ctx.tmp_socket until
        map_fun calls ctx.release_port().

    Returns:
      A TFCluster.
    """
    logger.info("Reserving TFSparkNodes %s", "w/ TensorBoard" if tensorboard else "")
    if driver_ps_nodes and input_mode != InputMode.TENSORFLOW:
        raise ValueError("running PS nodes on driver locally is only supported in "
                         "InputMode.TENSORFLOW")
    if eval_node and input_mode != InputMode.TENSORFLOW:
        raise ValueError("running evaluator nodes is only supported in InputMode.TENSORFLOW")
    num_master = 1 if master_node else 0
    num_eval = 1 if eval_node else 0
    num_workers = max(num_executors - num_ps - num_eval - num_master, 0)
    total_nodes = num_ps + num_master + num_eval + num_workers
    if total_nodes != num_executors:
        raise ClusterConfigError("TensorFlow cluster requires {} nodes, but only {} executors "
                                 "available".format(total_nodes, num_executors))
    if num_master + num_workers <= 0:
        raise ClusterConfigError("TensorFlow cluster requires at least one worker or "
                                 "master/chief node")
    engine = _engine_of(sc)
    cluster = drover.Cluster.run(
        engine, _NodeMain(map_fun), tf_args, num_executors, num_ps, tensorboard, input_mode,
        log_dir, driver_ps_nodes, master_node, reservation_timeout, list(queues), eval_node,
        release_port)
    compat = TFCluster()
    compat.sc = sc
    compat.drover_cluster = cluster
    meta = cluster.cluster_meta
    compat.defaultFS = meta["default_fs"]
    compat.working_dir = meta["working_dir"]
    compat.num_executors = num_executors
    compat.cluster_id = cluster.cluster_id
    compat.cluster_info = cluster.cluster_info
    compat.cluster_meta = dict(meta, release_port=release_port)
    compat.meta = compat.cluster_meta
    compat.input_mode = input_mode
    compat.queues = list(queues)
    return compat


# TensorFlowOnSpark's module keeps the background job's status here; drover
# reports failures as drover.NodeError instead.
tf_status = {}

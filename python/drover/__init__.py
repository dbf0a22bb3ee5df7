"""drover: distributed training clusters from the machines you have.

The C++ core (``drover._drover``) provides TensorFlow-compatible cluster specs
and resolvers; the names below match TensorFlow's, so switching is a change of
import::

    import drover
    cluster = drover.ClusterSpec({"worker": ["w0:2222", "w1:2222"]})
    resolver = drover.TFConfigClusterResolver()

Errors are the exceptions TensorFlow raises: ValueError for an unknown job or
task or malformed input, TypeError for a wrong type, KeyError for duplicate
tasks in a union.

Inside a program started by ``drover run`` (or ``drover agent``),
``drover.context()`` says where the program stands, as TensorFlowOnSpark's
``ctx`` does::

    ctx = drover.context()
    ctx.job_name, ctx.task_index, ctx.is_chief, ctx.num_workers, ctx.cluster_spec
    ctx.absolute_path("model")    # "file:///<working dir>/model"

A program started by ``drover run --input ...`` reads its records with
``drover.DataFeed`` (TensorFlowOnSpark's TFNode.DataFeed; docs/feed.md)::

    feed = drover.DataFeed(train_mode=True, input_mapping=None, schema=None,
                           timeout=None)      # seconds; None: run's --feed-timeout
    feed = ctx.get_data_feed(train_mode=True) # the same; qname_in/qname_out ignored
    while not feed.should_stop():
        batch = feed.next_batch(100)          # list of bytes, one per record
        if not batch:
            break
        feed.batch_results(predict(batch))    # inference (train_mode=False) only

``next_batch`` returns bytes (CSV/JSONL: one line without its newline), or,
with ``schema=[("image", "float32", 784), ("label", "int32")]`` (or a dict
``{name: dtype or (dtype, width)}``), a dict of NumPy arrays of shape (n,) or
(n, width), decoded in C++. ``input_mapping={source: name}`` selects and
renames schema fields, or without a schema reads JSONL keys / CSV column
indices as float64. A batch holds records of one epoch (``feed.epoch``); it is
empty once the feed is over. ``feed.records_read``, ``feed.format`` and
``feed.terminate()`` complete the API. Outside ``drover run --input`` the
constructor raises RuntimeError; TimeoutError when no records came in time;
ValueError for a bad schema or a record that does not match it.

Any node's program tells the run how training goes with ``drover.report``
(docs/status.md, "Metrics"); the status page charts it per node, and a node
far behind the others' step rate is named as a straggler::

    drover.report(step=step, loss=float(loss))  # every step: ~1 us, never blocks
    drover.report(accuracy=acc)                 # no step: charted over time

Outside drover it does nothing, so the same program runs alone.

From a Python driver program, ``drover.Cluster`` is TensorFlowOnSpark's
TFCluster (docs/python_api.md)::

    cluster = drover.Cluster.run(drover.engines.Dask(client), main_fun, args,
                                 num_executors=2, input_mode=drover.InputMode.FEED)
    cluster.train(bag, num_epochs=10)     # records reach main_fun's feed as objects
    results = cluster.inference(bag)      # a dask.bag, one result per record, in order
    cluster.shutdown()                    # a failed node raises drover.NodeError
"""

import abc
import os

from drover import _drover, engines
from drover._drover import (
    ClusterSpec,
    ClusterToken,
    Credential,
    DataFeed,
    KubernetesClusterResolver,
    MPIClusterResolver,
    NodeContext,
    RendezvousClient,
    RendezvousServer,
    ResourceSpecClusterResolver,
    SimpleClusterResolver,
    SlurmClusterResolver,
    TFConfigClusterResolver,
    TorchEnvClusterResolver,
    expand_hostlist,
    expand_tasks_per_node,
    flush_reports,
    framework_environment,
    make_tf_config,
    report,
    reports_enabled,
    resolve,
)

__version__ = "0.1.0"


def context():
    """This node's NodeContext, read from the file named by DROVER_CONTEXT_FILE.

    The agent writes the file and sets the variable just before starting the
    program (docs/run.md). Raises RuntimeError outside such a program, and
    ValueError when the file is missing or is not a context file.

    ``ctx.tmp_socket`` and ``ctx.release_port()`` are TensorFlowOnSpark's: in a
    node of drover.Cluster.run(..., release_port=False), tmp_socket is a socket
    bound to the node's address port (ctx.port), held from before main_fun
    starts until ctx.release_port() closes it. Otherwise (release_port=True,
    or a program started by `drover run`) the agent released the port just
    before the program started: tmp_socket is None and release_port() does
    nothing. Both are per process, whichever context() object is asked.
    """
    path = os.environ.get("DROVER_CONTEXT_FILE")
    if not path:
        raise RuntimeError(
            "drover.context() only works inside a program started by drover run / "
            "drover agent: DROVER_CONTEXT_FILE is not set")
    return NodeContext.load_file(path)


def _get_data_feed(self, train_mode=True, qname_in="input", qname_out="output",
                   input_mapping=None, schema=None, timeout=None):
    """This node's DataFeed (TensorFlowOnSpark's ctx.get_data_feed).

    qname_in and qname_out are accepted for TensorFlowOnSpark code and ignored:
    drover has one input and one output queue per node.
    """
    del qname_in, qname_out
    return DataFeed(train_mode=train_mode, input_mapping=input_mapping, schema=schema,
                    timeout=timeout)


# The socket that holds this node's address port (drover.Cluster.run's
# release_port=False), or None.
_held_port_socket = None


def _hold_port(port):
    """Binds `port` again, right after the agent released it, and keeps it
    bound until NodeContext.release_port(). The agent closes its reservation
    just before starting the program, so another process could take the port
    in between: then OSError says so."""
    global _held_port_socket
    import socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("", port))
    except OSError as error:
        sock.close()
        raise OSError(error.errno, "release_port=False: cannot hold this node's port %d again "
                      "after the agent released it (another process took it): %s"
                      % (port, error.strerror)) from error
    _held_port_socket = sock
    return sock


def _release_port(self):
    """Closes the socket holding this node's port (TensorFlowOnSpark's
    ctx.release_port()); returns None. Without a held port it does nothing:
    the agent already released the reserved ports."""
    del self
    global _held_port_socket
    sock, _held_port_socket = _held_port_socket, None
    if sock is not None:
        sock.close()


NodeContext.get_data_feed = _get_data_feed
NodeContext.release_port = _release_port
# TensorFlowOnSpark's ctx.tmp_socket: the socket holding the port, else None.
NodeContext.tmp_socket = property(lambda self: _held_port_socket)
# TensorFlowOnSpark's ctx.worker_num: the executor's number.
NodeContext.worker_num = property(lambda self: int(self.executor_id))



class _ResolverMeta(type(_drover.ClusterResolver), abc.ABCMeta):
    """Makes drover.ClusterResolver behave as TensorFlow's abstract base.

    pybind11 creates instances without object.__new__'s abstract-class check
    and requires __init__ to reach the C++ base; TensorFlow's base has no
    state to initialize, so subclasses set attributes before (or without)
    super().__init__(). Here the C++ part is made first, then the class's
    own __init__ runs, whatever it does."""

    def __call__(cls, *args, **kwargs):
        abstract = getattr(cls, "__abstractmethods__", None)
        if abstract:
            raise TypeError("Can't instantiate abstract class %s with abstract method%s %s"
                            % (cls.__name__, "s" if len(abstract) > 1 else "",
                               ", ".join(sorted(abstract))))
        self = cls.__new__(cls)
        _drover.ClusterResolver.__init__(self)
        self.__dict__["_drover_initialized"] = True
        if isinstance(self, cls):
            cls.__init__(self, *args, **kwargs)
        return self


class ClusterResolver(_drover.ClusterResolver, metaclass=_ResolverMeta):
    """Abstract base of every resolver (tf.distribute.cluster_resolver.ClusterResolver).

    A subclass implements cluster_spec() and master(), and may keep
    task_type, task_id and rpc_layer as plain attributes or as its own
    properties, set before or after super().__init__() (or without calling
    it), as with TensorFlow's class. UnionClusterResolver and the other C++
    callers read them through the subclass. drover's own resolvers
    (SimpleClusterResolver, TFConfigClusterResolver, ...) count as
    subclasses for isinstance().
    """

    def __init__(self):
        # The metaclass made the C++ part already; nothing else to set.
        pass

    @abc.abstractmethod
    def cluster_spec(self):
        """The cluster as a drover.ClusterSpec."""

    @abc.abstractmethod
    def master(self, task_type=None, task_id=None, rpc_layer=None):
        """The session master's address for the task."""

    @property
    def task_type(self):
        return self.__dict__.get("_task_type")

    @task_type.setter
    def task_type(self, task_type):
        self.__dict__["_task_type"] = task_type

    @property
    def task_id(self):
        return self.__dict__.get("_task_id")

    @task_id.setter
    def task_id(self, task_id):
        self.__dict__["_task_id"] = task_id

    @property
    def rpc_layer(self):
        return self.__dict__.get("_rpc_layer")

    @rpc_layer.setter
    def rpc_layer(self, rpc_layer):
        self.__dict__["_rpc_layer"] = rpc_layer

    @property
    def environment(self):
        """"google" inside Google, else "" (TensorFlow's meaning)."""
        return ""

    # Read by the C++ side (python/resolver_bindings.cc) for C++ callers.
    def _drover_task_type(self):
        return self.task_type

    def _drover_task_id(self):
        return self.task_id

    def _drover_rpc_layer(self):
        return self.rpc_layer

    def _drover_environment(self):
        return self.environment


for _name in dir(_drover):
    _value = getattr(_drover, _name)
    if isinstance(_value, type) and issubclass(_value, _drover.ClusterResolver) and \
            _value is not _drover.ClusterResolver:
        ClusterResolver.register(_value)
del _name, _value

from drover.cluster import Cluster, InputMode, NodeError  # noqa: E402 - needs the above
from drover.resource_spec import ResourceSpec  # noqa: E402 - AutoDist's ResourceSpec
from drover.ssh import SSHCluster  # noqa: E402 - AutoDist's SSHCluster


class UnionClusterResolver(_drover.UnionClusterResolver):
    """Merges the clusters of several resolvers (TensorFlow's UnionClusterResolver).

    Keeps the given resolvers referenced, so resolvers written in Python stay
    alive as long as the union that calls them.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._resolvers = args


__all__ = [
    "Cluster",
    "ClusterResolver",
    "ClusterSpec",
    "ClusterToken",
    "Credential",
    "DataFeed",
    "InputMode",
    "KubernetesClusterResolver",
    "MPIClusterResolver",
    "NodeContext",
    "NodeError",
    "RendezvousClient",
    "RendezvousServer",
    "ResourceSpec",
    "SSHCluster",
    "ResourceSpecClusterResolver",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "TorchEnvClusterResolver",
    "UnionClusterResolver",
    "context",
    "engines",
    "expand_hostlist",
    "expand_tasks_per_node",
    "flush_reports",
    "framework_environment",
    "make_tf_config",
    "report",
    "reports_enabled",
    "resolve",
]

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
"""

import os

from drover import _drover
from drover._drover import (
    ClusterResolver,
    ClusterSpec,
    ClusterToken,
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
    framework_environment,
    make_tf_config,
    resolve,
)

__version__ = "0.1.0"


def context():
    """This node's NodeContext, read from the file named by DROVER_CONTEXT_FILE.

    The agent writes the file and sets the variable just before starting the
    program (docs/run.md). Raises RuntimeError outside such a program, and
    ValueError when the file is missing or is not a context file.

    ``release_port()`` is kept for TensorFlowOnSpark code and returns None: the
    agent has already released the reserved ports when the program starts.
    """
    path = os.environ.get("DROVER_CONTEXT_FILE")
    if not path:
        raise RuntimeError(
            "drover.context() only works inside a program started by drover run / "
            "drover agent: DROVER_CONTEXT_FILE is not set")
    return NodeContext.load_file(path)


class UnionClusterResolver(_drover.UnionClusterResolver):
    """Merges the clusters of several resolvers (TensorFlow's UnionClusterResolver).

    Keeps the given resolvers referenced, so resolvers written in Python stay
    alive as long as the union that calls them.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._resolvers = args


__all__ = [
    "ClusterResolver",
    "ClusterSpec",
    "ClusterToken",
    "KubernetesClusterResolver",
    "MPIClusterResolver",
    "NodeContext",
    "RendezvousClient",
    "RendezvousServer",
    "ResourceSpecClusterResolver",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "TorchEnvClusterResolver",
    "UnionClusterResolver",
    "context",
    "expand_hostlist",
    "expand_tasks_per_node",
    "framework_environment",
    "make_tf_config",
    "resolve",
]

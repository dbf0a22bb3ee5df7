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
"""

from drover import _drover
from drover._drover import (
    ClusterResolver,
    ClusterSpec,
    ClusterToken,
    KubernetesClusterResolver,
    MPIClusterResolver,
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
    "RendezvousClient",
    "RendezvousServer",
    "ResourceSpecClusterResolver",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "TorchEnvClusterResolver",
    "UnionClusterResolver",
    "expand_hostlist",
    "expand_tasks_per_node",
    "framework_environment",
    "make_tf_config",
    "resolve",
]

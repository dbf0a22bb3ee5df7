"""Drop-in modules for programs written against other cluster libraries.

``drover.compat.tensorflowonspark`` is TensorFlowOnSpark's ``TFCluster`` and
``TFNode`` over drover.Cluster: a TensorFlowOnSpark program runs with its
import line changed and a drover engine (or a Dask client) as ``sc``.
AutoDist's ``ResourceSpec`` and ``SSHCluster`` are drover.ResourceSpec and
drover.SSHCluster. docs/porting.md shows both ports line by line.
"""

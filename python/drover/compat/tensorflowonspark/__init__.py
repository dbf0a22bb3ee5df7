"""TensorFlowOnSpark's TFCluster and TFNode on drover.

    # from tensorflowonspark import TFCluster, TFNode
    from drover.compat.tensorflowonspark import TFCluster, TFNode

    cluster = TFCluster.run(sc, main_fun, args, num_executors, num_ps,
                            input_mode=TFCluster.InputMode.SPARK)

``sc`` is where the nodes run: a drover engine (``drover.engines.Local()``,
``drover.engines.Dask(client)``) or a ``distributed.Client``. The signatures,
positional order and defaults are TensorFlowOnSpark's; what differs on purpose
is listed in docs/porting.md.
"""

from drover.compat.tensorflowonspark import TFCluster, TFNode

__all__ = ["TFCluster", "TFNode"]

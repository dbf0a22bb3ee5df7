"""Engines: where drover.Cluster runs its nodes and how it feeds them.

- ``drover.engines.Local(host="127.0.0.1")``: child processes of this host.
- ``drover.engines.Dask(client)``: one node per Dask worker; feeding tasks run
  on the worker that hosts each node.

An engine gives drover.Cluster: ``_driver_engine()`` (None for the C++ local
engine, else an object with ``name``, ``rendezvous_host()``,
``agent_host(i)`` and ``launch(executor_id, argv)``), ``_local_host()``,
``_start(num_nodes, local_executors, payload)``, ``_feed(nodes, data,
num_epochs, feed_timeout, inference, remainder)`` (what each node is fed comes
from ``_feeding.share_units``; a job with ``done()``, ``error()``,
``results()``, ``cancel()``), ``_end_feed(node)``, ``_describe(executor_id)``, ``_explain(executor_id, reason)``
and ``_close()``. docs/spark_engine.md describes how a Spark engine maps onto it.
"""

from drover.engines.local import Local


def __getattr__(name):
    # Dask is imported only when asked for: the local engine does not need it.
    if name == "Dask":
        from drover.engines.dask import Dask
        return Dask
    raise AttributeError("module 'drover.engines' has no attribute %r" % name)


__all__ = ["Dask", "Local"]

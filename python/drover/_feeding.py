"""Feeding one node from outside its agent: the work of the tasks that
drover.Cluster.train and inference run on each node's host.

Records are pickled one by one and pushed through the node's shared-memory
queue by the C++ writer (_drover._PartitionWriter); the program reads them
back with drover.DataFeed, which unpickles them. Every function here runs
where the node runs: in the driver process for the local engine, in a Dask
worker for the Dask engine.
"""

import os
import pickle

from drover import _drover

PICKLE_PROTOCOL = 5
# How long a feeding task waits for the node's feed socket to be served.
CONNECT_TIMEOUT = 60.0


def records_of(partition):
    """The records of one engine partition: a pandas DataFrame's rows as dicts
    (so input_mapping can name columns, as TensorFlowOnSpark's Rows allow),
    anything else iterated as is."""
    to_dict = getattr(partition, "to_dict", None)
    if to_dict is not None and hasattr(partition, "columns"):
        return to_dict("records")
    return partition if isinstance(partition, list) else list(partition)


def count_records(partition):
    """How many records a partition holds (a Dask task beside it)."""
    return len(records_of(partition))


def share_units(counts, shares, num_epochs, inference, remainder="pad"):
    """What each fed node is fed, for partitions of the given record counts:
    per share, a list of (partition, epoch, begin, end) units, epoch by
    epoch. Training: equal shares (docs/feed.md), so every node takes the
    same number of records each epoch, the remainder padded from the first
    records or dropped; inference: partition i to share i mod n, whole
    (every record answered once, results by partition)."""
    if inference:
        slices = [[(p, 0, counts[p]) for p in range(k, len(counts), shares)]
                  for k in range(shares)]
    else:
        slices = _drover._equal_share_slices(list(counts), shares, remainder)
    return [[(p, epoch, begin, end) for epoch in range(num_epochs) for p, begin, end in share]
            for share in slices]


def slice_records(partition, begin, end):
    """Records [begin, end) of a partition, as records_of gives them."""
    records = records_of(partition)
    return records if (begin, end) == (0, len(records)) else records[begin:end]


def encode(records):
    dumps = pickle.dumps
    return [dumps(record, PICKLE_PROTOCOL) for record in records]


def _feed_is_gone(socket_path):
    """The agent makes the socket's directory before the cluster forms and
    removes it when its node ends: no directory, no feed to wait for."""
    return not os.path.isdir(os.path.dirname(socket_path))


def feed_partitions(socket_path, units, feed_timeout, inference=False, wait_consumed=True,
                    cancelled=None):
    """Feeds `units`, a list of (partition index, epoch, records), in order
    through one writer. Returns the results per unit in inference, else None.
    Raises what the writer raises (TimeoutError naming the node, RuntimeError
    when its feed stopped)."""
    if _feed_is_gone(socket_path):
        raise RuntimeError("the feed at %s is gone: its node has ended" % socket_path)
    writer = _drover._PartitionWriter(socket_path, CONNECT_TIMEOUT, feed_timeout)
    try:
        results = []
        for partition, epoch, records in units:
            if cancelled is not None and cancelled():
                return None
            out = writer.feed(partition, epoch, encode(records_of(records)), inference)
            if inference:
                loads = pickle.loads
                results.append([loads(result) for result in out])
            elif writer.terminated:
                break
        if wait_consumed and not inference:
            writer.wait_consumed()
        return results if inference else None
    finally:
        writer.close()


def end_feed(socket_path):
    """Ends the node's feed: its DataFeed returns empty batches once it has
    read what is queued (TensorFlowOnSpark's end-of-feed marker). Nothing to
    do for a node that has already ended."""
    if _feed_is_gone(socket_path):
        return
    writer = _drover._PartitionWriter(socket_path, CONNECT_TIMEOUT, 60.0)
    try:
        writer.end_feed()
    finally:
        writer.close()


def feed_task(records, previous, socket_path, unit, feed_timeout, inference, last):
    """One Dask feeding task: records [begin, end) of one partition into one
    node, `unit` being (partition, epoch, begin, end). `previous` (the node's
    preceding feeding task) only orders the tasks: one writer at a time per
    node."""
    del previous
    partition, epoch, begin, end = unit
    results = feed_partitions(socket_path,
                              [(partition, epoch, slice_records(records, begin, end))],
                              feed_timeout, inference=inference, wait_consumed=last)
    return results[0] if inference else None

"""drover.engines.Local: every node on this host, started by the C++ local
engine of `drover run` (each agent in its own process group, stopped with the
driver). train() and inference() take plain Python partitions."""

import threading
import time

from drover import _feeding


class Local:
    """Runs the cluster's nodes as child processes of this Python process.

    Args:
      host: the address nodes advertise and the rendezvous binds to.

    With this engine, Cluster.train and Cluster.inference take an iterable of
    partitions, each a list (or other iterable, a pandas DataFrame: its rows)
    of records, any picklable objects. A flat list of records is not one
    partition: wrap it, [records]. inference returns a flat list of results.
    """

    name = "local"

    def __init__(self, host="127.0.0.1"):
        self.host = host

    def __repr__(self):
        return "drover.engines.Local(host=%r)" % self.host

    # The interface drover.Cluster uses (see drover/engines/__init__.py).
    def _driver_engine(self):
        return None  # the C++ local engine

    def _local_host(self):
        return self.host

    def _start(self, num_nodes, local_executors, payload):
        del num_nodes, local_executors, payload

    def _partitions(self, data):
        if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
            raise TypeError("the local engine feeds an iterable of partitions (lists of records), "
                            "got %s" % type(data).__name__)
        partitions = list(data)
        for index, partition in enumerate(partitions):
            if isinstance(partition, (str, bytes, dict)) or not hasattr(partition, "__iter__"):
                raise TypeError(
                    "partition %d is a %s, not a list of records: the local engine feeds an "
                    "iterable of partitions (wrap a flat list of records: [records])"
                    % (index, type(partition).__name__))
        return [_feeding.records_of(p) for p in partitions]

    def _feed(self, nodes, data, num_epochs, feed_timeout, inference, remainder):
        partitions = self._partitions(data)
        return _LocalFeed(nodes, partitions, num_epochs, feed_timeout, inference, remainder)

    def _end_feed(self, node):
        # A cancelled feeding thread may still hold the feed for a moment.
        deadline = time.monotonic() + 30.0
        while True:
            try:
                return _feeding.end_feed(node["feed_socket"])
            except KeyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def _describe(self, executor_id):
        return "on this host"

    def _explain(self, executor_id, reason):
        return reason

    def _close(self):
        pass


class _LocalFeed:
    """One thread per fed node pushes its share (_feeding.share_units) in order."""

    def __init__(self, nodes, partitions, num_epochs, feed_timeout, inference, remainder):
        self._results = {}
        self._errors = []
        self._cancelled = threading.Event()
        self._threads = []
        shares = _feeding.share_units([len(p) for p in partitions], len(nodes), num_epochs,
                                      inference, remainder)
        for node, share in zip(nodes, shares):
            units = [(p, epoch, partitions[p][begin:end]) for p, epoch, begin, end in share]
            thread = threading.Thread(target=self._run, name="drover-feed-%s" % node["task"],
                                      args=(node, units, feed_timeout, inference), daemon=True)
            self._threads.append(thread)
        self._count = len(partitions)
        for thread in self._threads:
            thread.start()

    def _run(self, node, units, feed_timeout, inference):
        try:
            results = _feeding.feed_partitions(node["feed_socket"], units, feed_timeout,
                                               inference=inference,
                                               cancelled=self._cancelled.is_set)
            if inference and results is not None:
                for (partition, _, _), out in zip(units, results):
                    self._results[partition] = out
        except BaseException as error:  # reported by the waiting thread
            self._errors.append((node["task"], error))

    def done(self):
        return not any(thread.is_alive() for thread in self._threads)

    def error(self):
        return self._errors[0] if self._errors else None

    def results(self):
        out = []
        for partition in range(self._count):
            out.extend(self._results.get(partition, []))
        return out

    def cancel(self):
        # A thread stops after its current partition (or when the node's feed
        # stops); shutdown's end of feed waits for it (_end_feed).
        self._cancelled.set()
        for thread in self._threads:
            thread.join(5.0)

"""TensorFlowOnSpark's feeding mechanism, re-implemented as the feeding benchmark's baseline.

usage: tfos_feed_baseline.py --file F --record-bytes N --records M [--kind mnist|bytes]
                             [--batch 100] [--out FILE] [--tfos-src DIR]

With --tfos-src DIR (a TensorFlowOnSpark checkout: DIR/tensorflowonspark/),
the three processes run TensorFlowOnSpark's own code instead of the
re-implementation below: TFManager.start and connect, TFSparkNode.train's
mapPartitions function and TFSparkNode.shutdown's, and TFNode.DataFeed. TFoS
imports TensorFlow and asks pkg_resources for its version when it is
imported, and feeding uses neither: both get stand-ins (no TensorFlow here).
Its train() waits for the queue with a thread polled once a second, so the
consumer's clock stops at the last record, not at the end-of-feed None.

Three processes, as in a TFoS worker (InputMode.SPARK), with TFoS's code paths:
 - the manager: TFManager.start(authkey, ['input', 'output', 'error']) (TFoS's
   TFManager.py): a multiprocessing.managers.BaseManager server process holding
   unbounded JoinableQueues, reached over a Unix socket ('local' mode, as TFoS
   starts it for workers), plus a key-value dict holding 'state';
 - the feeder (TFSparkNode.train's _train, run by a Spark executor's Python
   worker): TFManager.connect(), get_queue('input'), get('state'), then one
   queue.put(item, block=True) per record of the partition and queue.join() at
   its end; then, as TFSparkNode.shutdown does, queue.put(None);
 - the consumer (the TF program, a separate process in TFoS's background
   mode): TFNode.DataFeed.next_batch(batch) as TFoS writes it -- get_queue per
   call, then get() + task_done() per record -- until the end of the feed.

Records are the first M records of F (so the same bytes the other paths feed),
in TFoS form: for --kind mnist a tuple (list of 784 Python floats, int label),
as TFoS's MNIST example passes its rows; otherwise one bytes object each. The
feeder decodes them lazily, as Spark's worker unpickles a partition while it
iterates. The consumer prints one JSON line {"records", "bytes", "seconds"}
(bytes: M x N), timed from the first record it receives to the end of the feed
(the None). Differences from TFoS: the feeder waits with a plain
queue.join() (TFoS polls a join thread once a second) and the consumer does
not turn its lists into arrays, both in TFoS's favour; but next_batch asks
the manager for the queue at every call (TFoS 2.2.5 keeps it from DataFeed's
constructor), so this is about 10% slower than TFoS's own code (--tfos-src;
bench/RESULTS.md).
"""
import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from multiprocessing import JoinableQueue
from multiprocessing.managers import BaseManager

import numpy as np


# --- TFoS's TFManager.py ---------------------------------------------------
class TFManager(BaseManager):
    pass


qdict = {}
kdict = {}


def _get(key):
    return kdict[key]


def _set(key, value):
    kdict[key] = value


def _get_queue(qname):
    return qdict[qname]


def tfmanager_start(authkey, queues, mode="local"):
    qdict.clear()
    kdict.clear()
    for q in queues:
        qdict[q] = JoinableQueue()
    TFManager.register("get_queue", callable=_get_queue)
    TFManager.register("get", callable=_get)
    TFManager.register("set", callable=_set)
    if mode == "remote":
        mgr = TFManager(address=("", 0), authkey=authkey)
    else:
        mgr = TFManager(authkey=authkey)
    mgr.start()
    return mgr


def tfmanager_connect(address, authkey):
    TFManager.register("get_queue")
    TFManager.register("get")
    TFManager.register("set")
    m = TFManager(address, authkey=authkey)
    m.connect()
    return m


# --- TFoS's TFNode.DataFeed (train mode, no input_mapping) -------------------
class DataFeed(object):
    def __init__(self, mgr, train_mode=True, qname_in="input", qname_out="output"):
        self.mgr = mgr
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.done_feeding = False
        self.first_record_time = None  # the benchmark's clock; not in TFoS

    def next_batch(self, batch_size):
        queue = self.mgr.get_queue(self.qname_in)
        tensors = []
        count = 0
        while count < batch_size:
            item = queue.get(block=True)
            if item is None:
                # End of Feed
                queue.task_done()
                self.done_feeding = True
                break
            else:
                # Normal item
                if self.first_record_time is None:
                    self.first_record_time = time.perf_counter()
                tensors.append(item)
                count += 1
                queue.task_done()
        return tensors

    def should_stop(self):
        return self.done_feeding


# --- the partition: the first M records of the file, decoded lazily -----------
MNIST_DTYPE = np.dtype([("image", "<f4", (784,)), ("label", "<i4")])


def partition(path, kind, record_bytes, records):
    with open(path, "rb") as f:
        data = f.read(records * record_bytes)
    if len(data) != records * record_bytes:
        raise SystemExit(f"{path}: fewer than {records} records of {record_bytes} bytes")
    if kind == "mnist":
        rows = np.frombuffer(data, dtype=MNIST_DTYPE)
        for row in rows:
            yield (row["image"].tolist(), int(row["label"]))
    else:
        for offset in range(0, len(data), record_bytes):
            yield data[offset:offset + record_bytes]


# --- the processes -----------------------------------------------------------
def feeder(address, authkey, args):
    """TFSparkNode.train's _train for one partition, then TFSparkNode.shutdown's None."""
    mgr = tfmanager_connect(address, authkey)
    queue = mgr.get_queue("input")
    mgr.get_queue("error")
    state = str(mgr.get("state"))
    if state == "'terminating'":
        raise SystemExit("terminating")
    count = 0
    for item in partition(args.file, args.kind, args.record_bytes, args.records):
        count += 1
        queue.put(item, block=True)
    queue.join()  # all records consumed
    queue.put(None, block=True)  # end of feed


# --- TensorFlowOnSpark's own code (--tfos-src) ---------------------------------
def load_tfos(src):
    """TFoS's modules from the checkout at `src`, with stand-ins for what its
    imports ask of TensorFlow."""
    import types

    import pkg_resources

    tensorflow = types.ModuleType("tensorflow")
    tensorflow.__version__ = "2.10.0"
    sys.modules.setdefault("tensorflow", tensorflow)
    real = pkg_resources.get_distribution

    def get_distribution(name):
        if name in ("tensorflow", "tensorflow-cpu"):
            return types.SimpleNamespace(version=tensorflow.__version__)
        return real(name)

    pkg_resources.get_distribution = get_distribution
    sys.path.insert(0, src)
    from tensorflowonspark import TFManager, TFNode, TFSparkNode, util  # noqa: F401
    return types.SimpleNamespace(TFManager=TFManager, TFNode=TFNode, TFSparkNode=TFSparkNode,
                                 util=util)


def tfos_cluster_info(tfos, address, authkey):
    """One executor's reservation, as TFCluster.run hands it to the feeding tasks."""
    return [{"host": tfos.util.get_ip_address(), "executor_id": 0, "addr": address,
             "authkey": authkey, "tb_pid": 0}]


def tfos_feeder(address, authkey, args, tfos, workdir):
    """A Spark task: TFSparkNode.train's function on one partition, then
    TFSparkNode.shutdown's (the None that ends the feed)."""
    os.chdir(workdir)  # TFoS finds its executor id in ./executor_id
    info = tfos_cluster_info(tfos, address, authkey)
    tfos.TFSparkNode.train(info, {"server_addr": None}, feed_timeout=600)(
        partition(args.file, args.kind, args.record_bytes, args.records))
    tfos.TFSparkNode.shutdown(info)(iter([]))


def tfos_consumer(address, authkey, args, results, tfos):
    mgr = tfos.TFManager.connect(address, authkey)
    feed = tfos.TFNode.DataFeed(mgr, train_mode=True)
    records = 0
    first = end = None
    while not feed.should_stop():
        batch = feed.next_batch(args.batch)
        if batch and first is None:
            first = time.perf_counter()
        records += len(batch)
        if records == args.records and end is None:
            end = time.perf_counter()
    results.put({"records": records, "bytes": records * args.record_bytes,
                 "seconds": end - first if first is not None and end is not None else 0.0,
                 "tfos": "own code"})


def consumer(address, authkey, args, results):
    mgr = tfmanager_connect(address, authkey)
    feed = DataFeed(mgr)
    records = 0
    while not feed.should_stop():
        batch = feed.next_batch(args.batch)
        records += len(batch)
    end = time.perf_counter()
    results.put({"records": records, "bytes": records * args.record_bytes,
                 "seconds": end - feed.first_record_time if feed.first_record_time else 0.0})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", required=True)
    parser.add_argument("--record-bytes", type=int, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--kind", choices=("mnist", "bytes"), default="bytes")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--out")
    parser.add_argument("--tfos-src", help="a TensorFlowOnSpark checkout: run its own code")
    args = parser.parse_args()
    if args.kind == "mnist" and args.record_bytes != MNIST_DTYPE.itemsize:
        parser.error(f"MNIST rows are {MNIST_DTYPE.itemsize} bytes")

    multiprocessing.set_start_method("fork")  # as Spark's Python workers fork
    authkey = uuid.uuid4().bytes
    results = multiprocessing.SimpleQueue()
    if args.tfos_src:
        tfos = load_tfos(args.tfos_src)
        workdir = tempfile.mkdtemp(prefix="tfos-executor-")
        with open(os.path.join(workdir, "executor_id"), "w") as f:
            f.write("0")
        mgr = tfos.TFManager.start(authkey, ["input", "output", "error"])
        tf_target, tf_args = tfos_consumer, (mgr.address, authkey, args, results, tfos)
        feed_target, feed_args = tfos_feeder, (mgr.address, authkey, args, tfos, workdir)
    else:
        mgr = tfmanager_start(authkey, ["input", "output", "error"])
        tf_target, tf_args = consumer, (mgr.address, authkey, args, results)
        feed_target, feed_args = feeder, (mgr.address, authkey, args)
    mgr.set("state", "running")
    tf_process = multiprocessing.Process(target=tf_target, args=tf_args)
    tf_process.start()
    feed_process = multiprocessing.Process(target=feed_target, args=feed_args)
    feed_process.start()
    feed_process.join()
    tf_process.join()
    if feed_process.exitcode != 0 or tf_process.exitcode != 0:
        print(f"tfos_feed_baseline: feeder exit {feed_process.exitcode}, "
              f"consumer exit {tf_process.exitcode}", file=sys.stderr)
        return 1
    mgr.set("state", "stopped")
    mgr.shutdown()
    result = results.get()
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

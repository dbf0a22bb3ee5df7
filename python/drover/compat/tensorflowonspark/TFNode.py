"""TensorFlowOnSpark's TFNode on drover: what a node's ``map_fun`` calls.

``ctx`` (a TFNodeContext) carries TensorFlowOnSpark's attributes (an int
``executor_id``, a dict ``cluster_spec``, ``mgr``, ``tmp_socket``, ...) and
methods; ``DataFeed(ctx.mgr, ...)`` reads the records ``TFCluster.train`` and
``TFCluster.inference`` push, through the node's drover feed
(docs/feed.md). The functions that need TensorFlow (``start_cluster_server``,
``export_saved_model``) import it only when called and raise ImportError
naming the function when it is not installed.
"""

import getpass
import importlib.util
import logging
import os
import subprocess

logger = logging.getLogger(__name__)

# Every Hadoop-compatible file system scheme TensorFlowOnSpark treats as
# absolute (those of Hadoop 3.0).
HADOOP_SCHEMES = ("adl://", "file://", "hdfs://", "oss://", "s3://", "s3a://", "s3n://",
                  "swift://", "viewfs://", "wasb://")


def hdfs_path(ctx, path):
    """A TensorFlow-ready absolute path for ``path`` (TensorFlowOnSpark's rules).

    A path with a Hadoop scheme is returned as is; an absolute path gets
    ``ctx.defaultFS`` in front; a relative path goes under ``/user/<user>/`` on
    hdfs:// and viewfs://, under ``ctx.working_dir`` on file://, and right
    after defaultFS (with a warning) on any other file system.
    """
    if any(path.startswith(scheme) for scheme in HADOOP_SCHEMES):
        return path
    if path.startswith("/"):
        return ctx.defaultFS + path
    if ctx.defaultFS.startswith("hdfs://") or ctx.defaultFS.startswith("viewfs://"):
        return "{0}/user/{1}/{2}".format(ctx.defaultFS, getpass.getuser(), path)
    if ctx.defaultFS.startswith("file://"):
        return "{0}/{1}/{2}".format(ctx.defaultFS, ctx.working_dir[1:], path)
    logger.warning("Unknown scheme %s with relative path: %s", ctx.defaultFS, path)
    return "{0}/{1}".format(ctx.defaultFS, path)


def _tensorflow_version(caller):
    """TensorFlow's version string, found without importing it (a GPU choice
    must be made before TensorFlow is imported). ImportError when it is not
    installed."""
    if importlib.util.find_spec("tensorflow") is None:
        raise ImportError(
            "%s needs TensorFlow, which cannot be imported here (no module named "
            "'tensorflow' for %s); install tensorflow on every node, or use "
            "tf.distribute with the TF_CONFIG drover sets on each node" % (caller, os.sys.executable))
    from importlib import metadata
    for distribution in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    import tensorflow as tf  # an unpackaged build: ask the module itself
    return tf.__version__


def _major(version):
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def _gpu_indices():
    """GPU indices nvidia-smi lists that run no compute process; None when
    there is no usable nvidia-smi (TensorFlowOnSpark's is_gpu_available)."""
    try:
        listed = subprocess.check_output(["nvidia-smi", "--list-gpus"], timeout=60).decode()
        busy = subprocess.check_output(
            ["nvidia-smi", "--format=csv,noheader,nounits", "--query-compute-apps=gpu_uuid"],
            timeout=60).decode().split()
    except (OSError, subprocess.SubprocessError):
        return None
    free = []
    for line in listed.splitlines():
        # "GPU 0: NVIDIA H100 (UUID: GPU-...)"
        words = line.split(" ")
        if len(words) < 2 or not line.startswith("GPU "):
            continue
        index = words[1].rstrip(":")
        uuid = line.rsplit("UUID: ", 1)[-1].rstrip(")") if "UUID: " in line else ""
        if uuid not in busy:
            free.append(index)
    return free


def _choose_gpus(free, num_gpus, worker_index):
    """TensorFlowOnSpark's placement: consecutive GPUs by the node's index
    among the nodes on its host, wrapping round when there are too few."""
    if len(free) < num_gpus:
        raise Exception("Unable to find {} free GPU(s) (free: {})".format(num_gpus, free))
    if worker_index * num_gpus + num_gpus > len(free):
        worker_index = worker_index * num_gpus % len(free)
    return free[worker_index * num_gpus:worker_index * num_gpus + num_gpus]


def start_cluster_server(ctx, num_gpus=1, rdma=False):
    """Starts this node's ``tf.train.Server`` (TensorFlow 1.x) and returns
    ``(cluster, server)`` as TensorFlowOnSpark does.

    With GPUs on the host and num_gpus > 0 (a ps node takes none), picks free
    GPUs by the node's index among the nodes on its host and sets
    CUDA_VISIBLE_DEVICES before importing TensorFlow; else hides every GPU.
    rdma=True uses the "grpc+verbs" protocol. Like TensorFlowOnSpark, raises
    for TensorFlow 2.x (use tf.distribute: drover sets TF_CONFIG on each
    node); ImportError when TensorFlow is not installed.
    """
    version = _tensorflow_version("TFNode.start_cluster_server")
    if _major(version) >= 2:
        raise Exception("DEPRECATED: Use higher-level APIs like `tf.keras` or `tf.estimator`")
    cluster_spec = ctx.cluster_spec
    free = _gpu_indices()
    if free is not None and num_gpus > 0:
        my_addr = cluster_spec[ctx.job_name][ctx.task_index]
        my_host = my_addr.split(":")[0]
        local_peers = [a for tasks in cluster_spec.values() for a in tasks
                       if a.startswith(my_host)]
        if ctx.job_name == "ps":
            num_gpus = 0
        gpus = _choose_gpus(free, num_gpus, local_peers.index(my_addr)) if num_gpus else []
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        logger.info("%s: Using GPUs: %s", ctx.worker_num, gpus)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        logger.info("%s: Using CPU", ctx.worker_num)
    import tensorflow as tf

    cluster = tf.train.ClusterSpec(cluster_spec)
    if rdma:
        server = tf.train.Server(cluster, ctx.job_name, ctx.task_index, protocol="grpc+verbs")
    else:
        server = tf.train.Server(cluster, ctx.job_name, ctx.task_index)
    return (cluster, server)


def export_saved_model(sess, export_dir, tag_set, signatures):
    """Exports a saved_model of ``sess``'s graph (TensorFlow 1.x), with
    ``signatures`` in TensorFlowOnSpark's simplified form::

        {key: {"inputs": {alias: tensor}, "outputs": {alias: tensor},
               "method_name": name}}          # method_name defaults to key

    ``tag_set`` is a comma-separated string. Like TensorFlowOnSpark, raises
    for TensorFlow 2.x; ImportError when TensorFlow is not installed.
    """
    _tensorflow_version("TFNode.export_saved_model")
    import tensorflow as tf

    if _major(tf.__version__) >= 2:
        raise Exception("DEPRECATED: Use TF provided APIs instead.")
    graph = sess.graph
    graph._unsafe_unfinalize()  # a finalized graph cannot take the saver's ops
    builder = tf.saved_model.builder.SavedModelBuilder(export_dir)
    signature_def_map = {}
    for key, sig in signatures.items():
        signature_def_map[key] = tf.saved_model.signature_def_utils.build_signature_def(
            inputs={name: tf.saved_model.utils.build_tensor_info(tensor)
                    for name, tensor in sig["inputs"].items()},
            outputs={name: tf.saved_model.utils.build_tensor_info(tensor)
                     for name, tensor in sig["outputs"].items()},
            method_name=sig.get("method_name", key))
    builder.add_meta_graph_and_variables(sess, tag_set.split(","),
                                         signature_def_map=signature_def_map,
                                         clear_devices=True)
    graph.finalize()
    builder.save()


def release_port(ctx):
    """Closes the socket holding this node's port (``ctx.tmp_socket``), as
    TensorFlowOnSpark does before a program starts its own server."""
    if ctx.tmp_socket is not None:
        logger.info("Releasing assigned port: %s", ctx.tmp_socket.getsockname())
        ctx._drover_ctx.release_port()
        ctx.tmp_socket = None
    else:
        logger.warning("release_port() invoked with no bound socket.")


def next_batch(mgr, batch_size, qname="input"):
    """*DEPRECATED* in TensorFlowOnSpark. Use TFNode.DataFeed instead."""
    raise Exception("DEPRECATED: Use TFNode.DataFeed class instead")


def batch_results(mgr, results, qname="output"):
    """*DEPRECATED* in TensorFlowOnSpark. Use TFNode.DataFeed instead."""
    raise Exception("DEPRECATED: Use TFNode.DataFeed class instead")


def terminate(mgr, qname="input"):
    """*DEPRECATED* in TensorFlowOnSpark. Use TFNode.DataFeed instead."""
    raise Exception("DEPRECATED: Use TFNode.DataFeed class instead")


class NodeManager:
    """``ctx.mgr``: what TensorFlowOnSpark's TFManager was to a node, the
    handle a DataFeed is made from. It opens the node's drover feed once per
    process and keeps TFManager's key-value ``get``/``set`` (``state``)."""

    def __init__(self):
        self._values = {"state": "running"}
        self._feeds = {}

    def get(self, key):
        return self._values[key]

    def set(self, key, value):
        self._values[key] = value

    def _data_feed(self, train_mode):
        feed = self._feeds.get(bool(train_mode))
        if feed is None:
            import drover
            feed = drover.DataFeed(train_mode=bool(train_mode))
            self._feeds[bool(train_mode)] = feed
        return feed

    def __repr__(self):
        return "TFNode.NodeManager(state=%r)" % (self._values.get("state"),)


class DataFeed:
    """TensorFlowOnSpark's DataFeed over the node's drover feed.

    Args:
      mgr: ``ctx.mgr``.
      train_mode: False in inference, where each batch is answered with
        batch_results().
      qname_in, qname_out: TensorFlowOnSpark's queue names; kept as
        attributes (drover has one input and one output queue per node).
      input_mapping: ``{column: tensor}``; next_batch then returns
        ``{tensor: [values]}``, taking each record's columns in sorted column
        order (a dict record by key, a tuple or list by position).
    """

    def __init__(self, mgr, train_mode=True, qname_in="input", qname_out="output",
                 input_mapping=None):
        if not isinstance(mgr, NodeManager):
            raise TypeError("TFNode.DataFeed(mgr, ...) takes the node's ctx.mgr, got %r" % (mgr,))
        self.mgr = mgr
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.done_feeding = False
        self.input_mapping = dict(input_mapping) if input_mapping is not None else None
        self.input_tensors = ([tensor for _, tensor in sorted(input_mapping.items())]
                              if input_mapping is not None else None)
        self._feed = mgr._data_feed(train_mode)

    def next_batch(self, batch_size):
        """Up to ``batch_size`` records: fewer at the end of the feed (then
        should_stop() is true) and, in inference, at a partition's end. A
        list of the records as fed, or with input_mapping a dict of lists."""
        records = []
        while not self.done_feeding and len(records) < batch_size:
            more = self._feed.next_batch(batch_size - len(records))
            records.extend(more)
            if self._feed.should_stop():
                self.done_feeding = True
            # drover's batch ends with an epoch (and, in inference, with a
            # partition); TensorFlowOnSpark fills a training batch across
            # them, and ends an inference batch at its partition's end.
            if not more or not self.train_mode:
                break
        if self.input_tensors is None:
            return records
        columns = sorted(self.input_mapping.items())
        tensors = {tensor: [] for tensor in self.input_tensors}
        for record in records:
            for position, (column, tensor) in enumerate(columns):
                tensors[tensor].append(record[column] if isinstance(record, dict)
                                       else record[position])
        return tensors

    def should_stop(self):
        """True once the feed has ended (shutdown) or was terminated."""
        return self.done_feeding

    def batch_results(self, results):
        """One result per record of the last batch, in order (inference)."""
        self._feed.batch_results(list(results))

    def terminate(self):
        """Ends feeding early: records fed to this node later are dropped."""
        logger.info("terminate() invoked")
        self.mgr.set("state", "terminating")
        self._feed.terminate()
        self.done_feeding = True


class TFNodeContext:
    """TensorFlowOnSpark's ctx, made from the node's drover.NodeContext.

    Attributes as TensorFlowOnSpark's: executor_id and worker_num (int),
    job_name, task_index, cluster_spec (a dict of lists of "host:port"),
    num_workers (chief, master and worker tasks), defaultFS, working_dir,
    mgr, tmp_socket (a socket bound to this node's port until
    release_port(); None when the port is released). Any other attribute
    is the drover.NodeContext's (port, log_dir, is_chief, cluster_id...).
    """

    def __init__(self, drover_ctx, mgr=None):
        self._drover_ctx = drover_ctx
        self.executor_id = int(drover_ctx.executor_id)
        self.worker_num = self.executor_id
        self.job_name = drover_ctx.job_name
        self.task_index = drover_ctx.task_index
        spec = drover_ctx.cluster_spec
        self.cluster_spec = {job: list(spec.job_tasks(job)) for job in spec.jobs}
        self.num_workers = sum(len(tasks) for job, tasks in self.cluster_spec.items()
                               if job in ("master", "chief", "worker"))
        self.defaultFS = drover_ctx.default_fs
        self.working_dir = drover_ctx.working_dir
        self.mgr = mgr if mgr is not None else NodeManager()
        self.tmp_socket = drover_ctx.tmp_socket

    def __getattr__(self, name):
        if name.startswith("__") or name == "_drover_ctx":
            raise AttributeError(name)
        return getattr(self._drover_ctx, name)

    def absolute_path(self, path):
        return hdfs_path(self, path)

    def start_cluster_server(self, num_gpus=1, rdma=False):
        return start_cluster_server(self, num_gpus, rdma)

    def export_saved_model(self, sess, export_dir, tag_set, signatures):
        export_saved_model(sess, export_dir, tag_set, signatures)

    def get_data_feed(self, train_mode=True, qname_in="input", qname_out="output",
                      input_mapping=None):
        return DataFeed(self.mgr, train_mode, qname_in, qname_out, input_mapping)

    def release_port(self):
        return release_port(self)

    def __repr__(self):
        return "TFNodeContext(executor_id=%d, job_name=%r, task_index=%d)" % (
            self.executor_id, self.job_name, self.task_index)

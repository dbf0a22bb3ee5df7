"""Starts one TensorFlow server of an AutoDist cluster (what AutoDist's
server_starter does), for drover.SSHCluster.start() without a command.

    python -u tf_server_starter.py --job_name=worker --task_index=1 --cpu_device_num=1

This file is copied alone to each non-chief node (remote_pre_start_tf_server)
and imports nothing from drover. It reads <working dir>/cluster_spec.json
(default /tmp/autodist), starts a tf.distribute.Server for the task with
AutoDist's collective settings, prints READY_LINE, and serves until killed.
Without TensorFlow it prints MISSING_LINE naming the host and Python, and
exits with MISSING_TF_EXIT, so start() can say which host lacks it.
"""

import argparse
import json
import os
import socket
import sys

DEFAULT_WORKING_DIR = "/tmp/autodist"
DEFAULT_GROUP_LEADER = "/job:worker/replica:0/task:0"
READY_LINE = "drover-tf-server: ready"
MISSING_LINE = "drover-tf-server: TensorFlow is missing"
MISSING_TF_EXIT = 3


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--job_name", type=str, required=True)
    parser.add_argument("--task_index", type=int, required=True)
    parser.add_argument("--cluster_spec_filename", type=str, default="cluster_spec.json")
    parser.add_argument("--cpu_device_num", type=int, default=0)
    parser.add_argument("--working_dir", type=str,
                        default=os.environ.get("DROVER_TF_SERVER_DIR", DEFAULT_WORKING_DIR))
    flags, _ = parser.parse_known_args(argv)
    task = "%s:%d" % (flags.job_name, flags.task_index)
    with open(os.path.join(flags.working_dir, flags.cluster_spec_filename)) as spec_file:
        cluster_spec = json.load(spec_file)
    try:
        import tensorflow as tf
    except ImportError as error:
        print("%s on %s (%s: %s): cannot start the TensorFlow server of %s"
              % (MISSING_LINE, socket.gethostname(), sys.executable, error, task), flush=True)
        return MISSING_TF_EXIT
    config = tf.compat.v1.ConfigProto(
        experimental=tf.compat.v1.ConfigProto.Experimental(
            collective_nccl=True, collective_group_leader=DEFAULT_GROUP_LEADER),
        device_count={"CPU": flags.cpu_device_num},
        inter_op_parallelism_threads=0,
        intra_op_parallelism_threads=0)
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster_spec), job_name=flags.job_name,
                                  task_index=flags.task_index, config=config)
    print("%s: %s at %s" % (READY_LINE, task, server.target), flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Resolve the cluster this process runs in, as a TensorFlow user would.

    PYTHONPATH=build/python /usr/bin/python3 examples/resolve_cluster.py

Under srun, mpirun, torchrun or with TF_CONFIG set, drover.resolve() finds the
source; the resolvers take TensorFlow's arguments, so
`tf.distribute.cluster_resolver.SlurmClusterResolver(...)` becomes
`drover.SlurmClusterResolver(...)`.
"""
import json
import os

import drover

if "TF_CONFIG" not in os.environ:
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223", "localhost:2224"]},
        "task": {"type": "worker", "index": 0},
    })

resolver = drover.resolve()
cluster = resolver.cluster_spec()
print("cluster:", cluster)
print("this task:", resolver.task_type, resolver.task_id, "master:", resolver.master())
env = drover.framework_environment(cluster, resolver.task_type, resolver.task_id)
print("torch sees RANK=%s WORLD_SIZE=%s MASTER_ADDR=%s" %
      (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]))

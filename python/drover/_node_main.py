"""The program every node of a drover.Cluster runs:

    /usr/bin/python3 -m drover._node_main <payload file>

The payload is (main_fun, args) serialized with cloudpickle by
drover.Cluster.run. main_fun(args, ctx) runs with ctx = drover.context(), the
node's NodeContext (TensorFlowOnSpark's TFNodeContext). An exception is
printed with its traceback, under a line the driver recognises, and the node
exits 1: the driver turns that into drover.NodeError in the caller.
"""

import pickle
import sys
import traceback


def main(argv):
    if len(argv) != 2:
        print("usage: python3 -m drover._node_main <payload file>", file=sys.stderr)
        return 2
    import drover
    from drover.cluster import FAILURE_MARKER

    with open(argv[1], "rb") as payload:
        main_fun, args = pickle.load(payload)
    ctx = drover.context()
    try:
        main_fun(args, ctx)
    except SystemExit:
        raise
    except BaseException:  # noqa: B902 - every failure must reach the driver
        sys.stdout.flush()
        print(FAILURE_MARKER + "%s:%d" % (ctx.job_name, ctx.task_index), file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

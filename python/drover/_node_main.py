"""The program every node of a drover.Cluster runs:

    /usr/bin/python3 -m drover._node_main <payload file>

The payload is (main_fun, args, options) serialized with cloudpickle by
drover.Cluster.run (a payload of two items has no options). options:
"release_port": False makes the node bind its address port again right after
the agent released it, and hold it as ctx.tmp_socket until main_fun calls
ctx.release_port() (TensorFlowOnSpark's release_port=False). main_fun(args, ctx) runs with ctx = drover.context(), the
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
        loaded = pickle.load(payload)
    main_fun, args = loaded[0], loaded[1]
    options = loaded[2] if len(loaded) > 2 else {}
    ctx = drover.context()
    if not options.get("release_port", True):
        drover._hold_port(ctx.port)
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

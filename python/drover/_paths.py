"""Where drover's own executable is."""

import os
import shutil


def drover_binary():
    """The `drover` executable: $DROVER_BIN, else the one beside this package
    (in a build tree build/python/drover -> build/bin/drover; installed,
    P/lib/python3/dist-packages/drover -> P/bin/drover), else the one on
    PATH."""
    configured = os.environ.get("DROVER_BIN")
    if configured:
        return configured
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (("..", ".."), ("..", "..", "..", "..")):
        beside = os.path.normpath(os.path.join(here, *up, "bin", "drover"))
        if os.access(beside, os.X_OK):
            return beside
    found = shutil.which("drover")
    if found:
        return found
    raise RuntimeError("cannot find the drover executable: set DROVER_BIN, or put drover on PATH")


def guarded(argv, grace=10.0):
    """`argv` under `drover guard --exit-with-stdin`: start it with
    stdin=subprocess.PIPE and keep that pipe open. When this process ends,
    however it ends (SIGKILL included), the pipe ends and the guard stops the
    command and everything it started (docs/run.md, "Nothing left behind")."""
    return [drover_binary(), "guard", "--exit-with-stdin", "--grace", str(grace), "--"] + list(argv)

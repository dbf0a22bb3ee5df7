"""Runs the drover binary as a user would: a clean environment, real processes."""
import os
import subprocess

import pytest

# Variables any resolver might read; stripped so the host's own job does not leak in.
_CLUSTER_VARS_PREFIXES = ("TF_CONFIG", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL",
                          "JOB_COMPLETION_INDEX", "DROVER_", "AUTODIST_")
_TORCH_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "MASTER_ADDR", "MASTER_PORT"}


def drover_bin():
    path = os.environ.get("DROVER_BIN")
    if not path:
        path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "bin", "drover")
    return os.path.abspath(path)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_CLUSTER_VARS_PREFIXES) and k not in _TORCH_VARS}
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def drover():
    """drover(*args, env={...}) -> CompletedProcess with text stdout/stderr."""

    def run(*args, env=None, binary_output=False, timeout=60):
        return subprocess.run([drover_bin(), *args], env=clean_env(**(env or {})),
                              stdin=subprocess.DEVNULL, capture_output=True,
                              text=not binary_output, timeout=timeout)

    return run


def start_server(tmp_path, *args):
    token_file = tmp_path / "token"
    proc = subprocess.Popen([drover_bin(), "rendezvous", "--port", "0", "--bind", "127.0.0.1",
                             "--token-file", str(token_file), *args],
                            env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    # The port is printed on stderr: "listening on 127.0.0.1:PORT, ..."
    line = proc.stderr.readline()
    while "listening on" not in line:
        assert line, "server exited before listening"
        line = proc.stderr.readline()
    port = int(line.split("listening on ")[1].split(",")[0].rsplit(":", 1)[1])
    return proc, token_file, "127.0.0.1:%d" % port

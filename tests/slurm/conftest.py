"""A real Slurm cluster for the slurm engine's tests: slurmctld and three
slurmd daemons (n1..n3, 2 CPUs each) on this machine with their own munge,
brought up by scripts/slurm-local/up.sh (Debian's slurm-wlm; needs root). Every
node's NodeAddr is 127.0.0.1, so all tasks run here and the tests can see
them in /proc."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

SLURM_DIR = Path(os.environ.get("SLURM_CI_DIR", "/tmp/slurm-ci"))


class SlurmCluster:
    nodes = ["n1", "n2", "n3"]
    cpus_per_node = 2

    def __init__(self):
        self.conf = str(SLURM_DIR / "etc" / "slurm.conf")

    def env(self, **extra):
        """The environment for Slurm commands and drover under test, without
        any Slurm job of the caller's."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "TF_CONFIG", "MASTER_", "RANK", "WORLD_SIZE",
                                    "LOCAL_", "GROUP_", "OMPI_"))}
        env["SLURM_CONF"] = self.conf
        env.update(extra)
        return env

    def run(self, *argv, **kwargs):
        kwargs.setdefault("timeout", 120)
        return subprocess.run(list(argv), env=kwargs.pop("env", self.env()), capture_output=True,
                              text=True, **kwargs)

    def slurmd_pid(self, node):
        return int((SLURM_DIR / "run" / ("slurmd-%s.pid" % node)).read_text())

    def restart_slurmd(self, node, timeout=120):
        """Starts a node's slurmd again and waits until Slurm has it back."""
        import time
        # The daemon is the cluster's, not the test's: without its marker.
        env = {k: v for k, v in self.env().items() if k != "DROVER_TEST_MARK"}
        self.run("/usr/sbin/slurmd", "-f", self.conf, "-N", node, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run("sinfo", "-h", "-n", node, "-o", "%t").stdout.strip()
            # Responding ("*" marks a node that is not) and taking jobs.
            if state and "*" not in state and not state.startswith(("down", "drain", "fail")):
                return
            time.sleep(0.5)
        pytest.fail("slurmd of %s did not come back (state %s)" % (node, state))

    def wait_idle(self, timeout=60):
        """Waits until no job is left in the queue (the tests share the nodes)."""
        import time
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queue = self.run("squeue", "-h", "-o", "%i %T").stdout.strip()
            if not queue:
                return
            time.sleep(0.2)
        pytest.fail("jobs still queued: " + queue)


@pytest.fixture(scope="session")
def slurm():
    env = dict(os.environ, NODES="3", CPUS="2")
    subprocess.run(["bash", str(REPO / "scripts" / "slurm-local" / "up.sh")], check=True,
                   env=env, timeout=300)
    cluster = SlurmCluster()
    yield cluster
    if os.environ.get("DROVER_KEEP_SLURM") != "1":
        subprocess.run(["bash", str(REPO / "scripts" / "slurm-local" / "down.sh")], check=False,
                       timeout=120)

"""Equal shares (docs/feed.md): four CSV files of uneven sizes on three
nodes, read by a plain PyTorch DDP program without Join (plain_ddp.py).
With partitions dealt whole, the workers' shares differ and the program
blocks in its first all-reduce after the shortest share ends; with equal
shares every worker takes the same steps and the run ends. Needs Debian's
python3-torch and the Python module."""
import os
import re
import subprocess

import pytest

DROVER = os.path.abspath(os.environ.get("DROVER_BIN", "build/bin/drover"))
PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plain_ddp.py")


def test_plain_ddp_without_join_on_three_nodes_of_uneven_files(tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode:
        pytest.fail("/usr/bin/python3 cannot import torch: scripts/deps.sh installs python3-torch")
    first = 0
    for name, count in (("a", 300), ("b", 250), ("c", 250), ("d", 201)):
        with open(tmp_path / f"{name}.csv", "w") as f:
            f.writelines(f"{i},{i % 7}\n" for i in range(first, first + count))
        first += count
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE",
                                "LOCAL_", "GROUP_", "OMPI_", "SLURM_"))}
    # A hang must fail the test, not stall it: the feed timeout and gloo's
    # own bound the program, the subprocess timeout bounds drover.
    done = subprocess.run(
        [DROVER, "run", "--nodes", "3", "--log-dir", str(tmp_path / "logs"), "--grace", "2",
         "--input", str(tmp_path / "*.csv"), "--epochs", "2", "--feed-timeout", "120", "--",
         "/usr/bin/python3", PROGRAM],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=400)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for worker in range(3):
        counts = re.findall(rf"^\[worker:{worker}\] epoch (\d): (\d+) records$", output,
                            re.MULTILINE)
        assert counts == [("0", "334"), ("1", "334")], (worker, output)

"""The main job: `drover run --nodes 2 --input ...` of examples/digits/train.py,
real PyTorch DDP over gloo on two local nodes fed CSV shards through drover's
data feed, must reach test accuracy >= 0.95 and save the model. Needs Debian's
python3-torch and python3-sklearn (scripts/deps.sh) and the Python module."""
import os
import re
import subprocess

import pytest

DROVER = os.path.abspath(os.environ.get("DROVER_BIN", "build/bin/drover"))
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "examples", "digits")
TRAIN = os.path.join(EXAMPLE, "train.py")


def test_two_nodes_train_digits_to_95_percent(tmp_path):
    for module in ("torch", "sklearn"):
        done = subprocess.run(["/usr/bin/python3", "-c", f"import {module}"], capture_output=True)
        if done.returncode != 0:
            pytest.fail(f"/usr/bin/python3 cannot import {module}: scripts/deps.sh installs "
                        "python3-torch and python3-sklearn")
    log_dir = tmp_path / "logs"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE",
                                "LOCAL_", "GROUP_", "OMPI_", "SLURM_"))}
    data = tmp_path / "digits-data"
    subprocess.run(["/usr/bin/python3", os.path.join(EXAMPLE, "make_csv.py"), str(data)],
                   check=True, capture_output=True)
    done = subprocess.run(
        [DROVER, "run", "--nodes", "2", "--log-dir", str(log_dir), "--grace", "2",
         "--input", str(data / "train-*.csv"), "--epochs", "40", "--",
         "/usr/bin/python3", TRAIN, "--test", str(data / "test.csv")],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=540)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output

    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1, f"the chief (worker:0) prints the accuracy once:\n{output}"
    assert float(accuracies[0]) >= 0.95, output
    assert not re.search(r"^\[worker:1\] test accuracy", output, re.MULTILINE), \
        "only the chief reports"

    model = log_dir / "digits_mlp.pt"
    assert model.is_file() and model.stat().st_size > 1000, (sorted(log_dir.iterdir()), output)
    assert (log_dir / "worker-0.log").is_file() and (log_dir / "worker-1.log").is_file()

    # The script takes its role from drover.context() and its rows from the feed.
    assert "[worker:0] worker:0: rank 0 of 2, chief=True" in output, output
    fed = re.findall(r"^\[worker:0\] epoch 40: .*; ([0-9]+) in all\)$", output, re.MULTILINE)
    assert fed and int(fed[0]) == 40 * 674, output  # its 2 of the 4 shards, 40 times

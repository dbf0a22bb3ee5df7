"""The main job in C++: `drover run --nodes 2 --input ...` of examples/digits_cpp
(libtorch, c10d's ProcessGroupGloo allreduce, rows from drover::DataFeed, the
node's rank and master from drover's node context) must reach test accuracy
>= 0.95 on the chief and save the model. Needs Debian's libtorch-dev (the
binary) and python3-sklearn (make_csv.py writes the data set)."""
import os
import re
import subprocess

import pytest

DROVER = os.path.abspath(os.environ.get("DROVER_BIN", "build/bin/drover"))
DIGITS_CPP = os.path.abspath(os.environ.get("DIGITS_CPP", "build/bin/digits_cpp"))
MAKE_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "examples", "digits", "make_csv.py")


def test_two_nodes_train_digits_in_cpp_to_95_percent(tmp_path):
    done = subprocess.run(["/usr/bin/python3", "-c", "import sklearn"], capture_output=True)
    if done.returncode != 0:
        pytest.fail("/usr/bin/python3 cannot import sklearn: scripts/deps.sh installs "
                    "python3-sklearn")
    log_dir = tmp_path / "logs"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE",
                                "LOCAL_", "GROUP_", "OMPI_", "SLURM_", "GLOO_"))}
    data = tmp_path / "digits-data"
    subprocess.run(["/usr/bin/python3", MAKE_CSV, str(data)], check=True, capture_output=True,
                   timeout=120)
    done = subprocess.run(
        [DROVER, "run", "--nodes", "2", "--log-dir", str(log_dir), "--grace", "2",
         "--input", str(data / "train-*.csv"), "--epochs", "40", "--",
         DIGITS_CPP, "--test", str(data / "test.csv")],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=540)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output

    accuracies = re.findall(r"^\[worker:0\] test accuracy: ([0-9.]+)$", output, re.MULTILINE)
    assert len(accuracies) == 1, f"the chief (worker:0) prints the accuracy once:\n{output}"
    assert float(accuracies[0]) >= 0.95, output
    assert not re.search(r"^\[worker:1\] test accuracy", output, re.MULTILINE), \
        "only the chief reports"
    model = log_dir / "digits_mlp_cpp.pt"
    assert model.is_file() and model.stat().st_size > 1000, (sorted(log_dir.iterdir()), output)

    # Rank and master from the node context; every row trained on, 40 epochs:
    # make_csv.py's 1,347 training rows in equal shares of 674 (one row padded).
    assert re.search(r"^\[worker:0\] worker:0: rank 0 of 2, chief=true, master \S+:\d+$",
                     output, re.MULTILINE), output
    assert re.search(r"^\[worker:1\] worker:1: rank 1 of 2, chief=false, master \S+:\d+$",
                     output, re.MULTILINE), output
    fed = re.findall(r"^\[worker:0\] epoch 40: .*; ([0-9]+) in all\)$", output, re.MULTILINE)
    assert fed and int(fed[0]) == 40 * 674, output
    trained = re.findall(r"^\[worker:0\] trained on ([0-9]+) rows", output, re.MULTILINE)
    assert trained and int(trained[0]) == 40 * 2 * 674, output

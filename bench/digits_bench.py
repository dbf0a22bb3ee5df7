"""The main job in Python (examples/digits/train.py) against the same job in C++
(examples/digits_cpp), both under `drover run --nodes 2 --input ... --epochs 40`
on the same CSV shards, alternating, in one session.

For each run it reads drover's output line by line as it comes and records:
  to accuracy   seconds from launching `drover run` to the chief's
                "test accuracy" line
  training      seconds from the chief's first line ("... rank 0 of 2 ...",
                printed once its process group is up) to that accuracy line:
                loading the test set, every epoch, and scoring the test set
  rows/s        rows trained on by both workers (40 epochs x 1,348) / training
  exit          seconds from launch to `drover run` returning

    /usr/bin/python3 bench/digits_bench.py --build build --reps 3
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_figures import host_line  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
EPOCHS = 40
TRAIN_ROWS = 1348  # make_csv.py's 1,347 training rows in 2 equal shares of 674


def run_once(drover, argv, data, workdir, env):
    command = [drover, "run", "--nodes", "2", "--log-dir", os.path.join(workdir, "logs"),
               "--input", os.path.join(data, "train-*.csv"), "--epochs", str(EPOCHS), "--",
               *argv, "--test", os.path.join(data, "test.csv")]
    started = time.monotonic()
    first = accuracy_at = None
    accuracy = None
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, text=True, cwd=workdir, env=env) as proc:
        for line in proc.stdout:
            now = time.monotonic() - started
            lines.append(line)
            if first is None and re.match(r"\[worker:0\] .*rank 0 of 2", line):
                first = now
            found = re.match(r"\[worker:0\] test accuracy: ([0-9.]+)", line)
            if found:
                accuracy_at, accuracy = now, float(found.group(1))
        proc.wait(timeout=600)
    exited = time.monotonic() - started
    if proc.returncode != 0 or accuracy is None or first is None:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{''.join(lines)}")
    training = accuracy_at - first
    return {"accuracy": accuracy, "to_accuracy": accuracy_at, "training": training,
            "rows_per_s": EPOCHS * TRAIN_ROWS / training, "exit": exited}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    drover = os.path.join(build, "bin", "drover")
    jobs = {
        "Python (train.py, DDP)": ["/usr/bin/python3", os.path.join(EXAMPLES, "digits", "train.py")],
        "C++ (digits_cpp, gloo)": [os.path.join(build, "bin", "digits_cpp")],
    }
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CONFIG", "DROVER_", "MASTER_", "RANK", "WORLD_SIZE",
                                "LOCAL_", "GROUP_", "OMPI_", "SLURM_"))}
    env["PYTHONPATH"] = os.path.join(build, "python")
    print(host_line())
    results = {name: [] for name in jobs}
    with tempfile.TemporaryDirectory() as workdir:
        data = os.path.join(workdir, "digits-data")
        subprocess.run(["/usr/bin/python3", os.path.join(EXAMPLES, "digits", "make_csv.py"), data],
                       check=True, capture_output=True)
        for _ in range(args.reps):
            for name, argv in jobs.items():
                results[name].append(run_once(drover, argv, data, workdir, env))
    print(f"2 nodes, {EPOCHS} epochs of {TRAIN_ROWS:,} rows; median of {args.reps} "
          f"(alternating); seconds")
    print(f"{'job':26} {'accuracy':>9} {'to accuracy':>12} {'training':>9} {'rows/s':>9} "
          f"{'exit':>6}")
    for name, runs in results.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        print(f"{name:26} {med['accuracy']:9.3f} {med['to_accuracy']:12.2f} "
              f"{med['training']:9.2f} {med['rows_per_s']:9,.0f} {med['exit']:6.2f}")
    for name, runs in results.items():
        print(f"{name}: accuracies " + ", ".join(f"{r['accuracy']:.3f}" for r in runs))
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

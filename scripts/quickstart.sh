#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs what is missing,
# builds drover, and trains a real model on a local two-node cluster:
# PyTorch DDP over gloo on scikit-learn's digits (examples/digits), the
# training rows fed to the workers as CSV by `drover run --input`. The chief
# prints the test accuracy and saves the model under ./drover-logs/<cluster-id>/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh default

# drover's Python module: train.py reads its role with drover.context() and
# its batches with the context's data feed.
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
data="${DIGITS_DATA:-build/digits-data}"
/usr/bin/python3 examples/digits/make_csv.py "$data"
echo "\$ build/bin/drover run --nodes 2 --input '$data/train-*.csv' --epochs 40 -- /usr/bin/python3 examples/digits/train.py --test $data/test.csv"
build/bin/drover run --nodes 2 --input "$data/train-*.csv" --epochs 40 -- \
  /usr/bin/python3 examples/digits/train.py --test "$data/test.csv"

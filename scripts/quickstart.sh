#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs what is missing,
# builds drover, and trains a real model on a local two-node cluster:
# PyTorch DDP over gloo on scikit-learn's digits (examples/digits), through
# `drover run`. The chief prints the test accuracy and saves the model under
# ./drover-logs/<cluster-id>/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh default

# drover's Python module, so train.py can read its role with drover.context().
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
echo "\$ build/bin/drover run --nodes 2 -- /usr/bin/python3 examples/digits/train.py"
build/bin/drover run --nodes 2 -- /usr/bin/python3 examples/digits/train.py

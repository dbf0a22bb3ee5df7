#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs what is missing,
# builds drover, and resolves a cluster the way a node of a real job would.
# Until `drover run` lands, the "job" is resolving and printing a cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh default
drover=build/bin/drover

# A two-worker + one-ps cluster, seen from worker 1, as TensorFlow would set it.
export TF_CONFIG='{"cluster": {"worker": ["localhost:2222", "localhost:2223"], "ps": ["localhost:2224"]}, "task": {"type": "worker", "index": 1}}'
echo "\$ drover resolve            # TF_CONFIG found in the environment"
"$drover" resolve
echo
echo "\$ drover resolve --format env   # what PyTorch, JAX and TensorFlow programs read"
"$drover" resolve --format env
unset TF_CONFIG
echo
echo "\$ mpirun -np 3 drover resolve --resolver mpi --format tf-config   # three ranks, one cluster"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun --oversubscribe -np 3 "$drover" resolve --resolver mpi --format tf-config

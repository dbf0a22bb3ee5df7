#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   1. installs missing Debian packages (scripts/deps.sh; needs root)
#   2. builds and runs every test (GoogleTest, pytest for the Python module and
#      the CLI, a real mpirun) with ctest -j2
#   3. rebuilds under AddressSanitizer + UBSan and runs the C++ and CLI tests again
#   4. runs every fuzz target for a bounded time (DROVER_FUZZ_SECONDS, default 20)
# Set DROVER_SKIP_ASAN=1 or DROVER_SKIP_FUZZ=1 to leave a stage out locally.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

echo "== build (default) =="
scripts/build.sh default
echo "== test (default) =="
ctest --preset default

if [ "${DROVER_SKIP_ASAN:-0}" != 1 ]; then
  echo "== build (asan) =="
  scripts/build.sh asan
  echo "== test (asan) =="
  ctest --preset asan
fi

if [ "${DROVER_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz =="
  scripts/fuzz.sh "${DROVER_FUZZ_SECONDS:-20}"
fi
echo "== all tests passed =="

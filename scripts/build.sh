#!/usr/bin/env bash
# Configures and builds one CMake preset (default, asan or fuzz).
# Usage: scripts/build.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
jobs="${DROVER_BUILD_JOBS:-$(nproc)}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"

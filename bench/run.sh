#!/usr/bin/env bash
# Runs the benchmarks and prints each figure as a ratio to the baseline(s)
# measured in the same run. Usage: bench/run.sh   (after scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# First, so runs from different hosts can be read side by side: hosts of
# one kind differ by several times in page-fault and fork cost.
echo "== this host: memcpy, read() of a page-cached file, fork+exec =="
/usr/bin/python3 bench/host_figures.py
echo
echo "== cluster spec encoding (baseline: memcpy of the same bytes) =="
build/bin/cluster_spec_bench --benchmark_format=json --benchmark_min_time=0.2 \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true >"$out/cluster_spec.json"
/usr/bin/python3 bench/ratios.py "$out/cluster_spec.json" BM_MemcpyBaseline
echo
echo "== rendezvous barrier (baseline: naive epoll server sending the full spec to each node) =="
build/bin/rendezvous_bench 8 1000 4000
echo "-- host connections: 8 nodes per connection, up to 100,000 nodes (12,500 connections) --"
build/bin/rendezvous_bench --nodes-per-host 8 8 1000 4000 100000
echo
echo "== start-up: from launch to every program started (ratios to torchrun and mpirun) =="
/usr/bin/python3 bench/startup_bench.py --drover build/bin/drover --nodes 2,8,32 --reps 3
echo
echo "== feeding: records/s from file to consumer (ratios to memcpy and to TensorFlowOnSpark's queues) =="
/usr/bin/python3 bench/feed_bench.py --build build
echo
echo "== feeding a window at a time: JSONL, TFRecord, whole files; mapped, read or measured (ratio to read()) =="
/usr/bin/python3 bench/window_feed_bench.py --build build --mib 1000 --reps 3
echo
echo "== planning equal shares: counting a 1 GB CSV (ratio to read() of the file) =="
/usr/bin/python3 bench/plan_bench.py --drover build/bin/drover --mib 1000 --reps 3
echo
echo "== reporting: drover.report once per step of a 10,000 steps/s loop (ratio to the loop without it) =="
PYTHONPATH="$PWD/build/python" /usr/bin/python3 bench/report_bench.py --drover build/bin/drover --reps 5
echo
echo "== footprint: memory and idle CPU of the agents (ratios to sleep, mpirun and torchrun) =="
/usr/bin/python3 bench/footprint_bench.py --drover build/bin/drover --nodes 2,8 --window 20
echo
echo "== recovery: a program or a node lost, to the group running again (ratios to torchrun) =="
/usr/bin/python3 bench/recovery_bench.py --drover build/bin/drover --nodes 2,4 --reps 3
echo
echo "== start-up over SSH: three sshd hosts (ratio to a plain parallel ssh fan-out) =="
if [ "$(id -u)" -eq 0 ]; then
  /usr/bin/python3 bench/ssh_startup_bench.py --drover build/bin/drover --per-host 1,2 --reps 5
else
  echo "skipped: the SSH hosts are network namespaces, which need root"
fi

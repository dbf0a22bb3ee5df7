#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]   (default 30 s, every target)
# Targets are every build-fuzz/fuzz/*_fuzzer (drover_add_fuzzer), among them
# the inputs from outside the process of issue #15: feed_hello_fuzzer (the
# feed socket's hello and answer lines), shm_attach_fuzzer (attaching to a
# feed channel over arbitrary bytes) and status_request_fuzzer (raw requests
# to the status server).
# Seeds come from testing/fuzz_corpus/<target>/; new inputs go to a scratch
# copy, so the checked-in corpus only changes by hand. A crash leaves its input
# in build-fuzz/artifacts/ and fails the script.
# handshake_fuzzer drives a real rendezvous server over loopback (a fresh one
# per input: a few hundred runs a second); its inputs are operation lists
# (src/rendezvous/handshake_fuzzer.cc), long enough at 2 KiB.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
scripts/build.sh fuzz
mkdir -p build-fuzz/artifacts
status=0
if [ "$#" -gt 0 ]; then
  fuzzers=()
  for name in "$@"; do fuzzers+=("build-fuzz/fuzz/$name"); done
else
  fuzzers=(build-fuzz/fuzz/*_fuzzer)
fi
for fuzzer in "${fuzzers[@]}"; do
  [ -x "$fuzzer" ] || { echo "fuzz: no target $fuzzer" >&2; status=1; continue; }
  name="$(basename "$fuzzer")"
  work="build-fuzz/corpus/$name"
  mkdir -p "$work"
  if [ -d "testing/fuzz_corpus/$name" ]; then cp -n testing/fuzz_corpus/"$name"/* "$work"/ 2>/dev/null || true; fi
  extra=()
  case "$name" in
    handshake_fuzzer) extra=(-max_len=2048) ;;
  esac
  echo "fuzz: $name for ${seconds}s"
  if ! "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
      "${extra[@]}" \
      -artifact_prefix="build-fuzz/artifacts/$name-" "$work" >"build-fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED; see build-fuzz/$name.log and build-fuzz/artifacts/" >&2
    tail -n 30 "build-fuzz/$name.log" >&2
    status=1
  else
    grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "build-fuzz/$name.log" | sed "s/^/fuzz: $name: /" || true
  fi
done
exit $status

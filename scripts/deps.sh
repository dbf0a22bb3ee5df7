#!/usr/bin/env bash
# Installs drover's build and test dependencies from Debian's packages.
# Idempotent: packages already present are not fetched again, and apt-get
# update runs only when something is missing. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git clang clang-format
  clang-tidy libclang-rt-14-dev
  # libraries
  libprotobuf-dev protobuf-compiler nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libfmt-dev libcli11-dev libasio-dev libssl-dev zlib1g-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev openmpi-bin libopenmpi-dev
  # Python module and its tests (Debian's /usr/bin/python3)
  python3 python3-dev pybind11-dev python3-pytest python3-numpy python3-yaml
  # the main job (examples/digits) and its integration test
  python3-torch python3-sklearn
  # the main job in C++ (examples/digits_cpp): libtorch with c10d's gloo backend
  libtorch-dev libgloo-dev
  # the Debian package (scripts/package.sh: CPack runs dpkg-shlibdeps and file)
  dpkg-dev file
  # the Python driver API and its Dask engine
  python3-distributed python3-dask python3-cloudpickle python3-pandas
  # the ssh engine (the system's OpenSSH client) and its tests (sshd hosts in
  # network namespaces: scripts/ssh-hosts/)
  openssh-client openssh-server iproute2 util-linux bc
  # the slurm engine's tests (slurmctld and slurmd on this machine:
  # scripts/slurm-local/)
  slurmctld slurmd slurm-client munge
  # the driver's status server (cpp-httplib) and its tests: the page in
  # headless Chromium, /metrics read by the Prometheus text-format parser
  libcpp-httplib-dev chromium python3-prometheus-client python3-websocket
  # the etcd rendezvous backend's tests (a real etcd, started by the tests;
  # openssl makes the certificates of the TLS test)
  etcd-server etcd-client openssl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Builds the Debian package build/drover_<version>_amd64.deb with CPack from
# the default preset's build tree, configured for /usr (the install paths
# only: nothing is recompiled for it). The package holds what
# `cmake --install` installs (README.md, "Installing"); its Depends are the
# runtime packages dpkg-shlibdeps finds for the binaries, and python3.
#   scripts/package.sh && sudo apt-get install ./build/drover_*.deb
# Needs scripts/deps.sh's packages (dpkg-dev for dpkg-shlibdeps, file).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${DROVER_BUILD_JOBS:-$(nproc)}"
# CMAKE_SKIP_INSTALL_ALL_DEPENDENCY: cpack's install step builds only what
# it installs (drover_installed below), not every test and benchmark.
cmake --preset default -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
# Put the tree back as the build left it, so a later plain `cmake --install
# build` does not install into /usr by surprise.
trap 'cmake --preset default -DCMAKE_INSTALL_PREFIX=/usr/local \
        -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=OFF >/dev/null' EXIT
cmake --build --preset default -j "$jobs" --target drover_installed
rm -f build/drover_*.deb
(cd build && cpack -G DEB)
ls build/drover_*.deb

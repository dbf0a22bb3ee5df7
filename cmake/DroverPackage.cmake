# The Debian package (scripts/package.sh): drover_<version>_amd64.deb, its
# Depends computed by dpkg-shlibdeps from the installed binaries, plus Python.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME drover)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "drover maintainers <drover@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "distributed training clusters from the machines you have, and feeding them data")
set(CPACK_PACKAGE_DESCRIPTION
    "drover turns this host, SSH hosts or a Slurm allocation into a distributed training
cluster in one command (drover run), resolves clusters from TF_CONFIG, Slurm, MPI,
torchrun and Kubernetes, and feeds training and inference programs through
shared-memory queues. This package holds the drover command, the C++ library with
its headers, CMake package and pkg-config file, and the Python module for python3.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# The module is built for Debian 12's Python (3.11): _drover.cpython-311-*.so.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.11), python3 (<< 3.12)")
# NumPy only for DataFeed.next_batch(schema=...); Dask for drover.engines.Dask.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-numpy")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-distributed, python3-cloudpickle")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_LIST_DIR}/deb/postinst ${CMAKE_CURRENT_LIST_DIR}/deb/prerm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

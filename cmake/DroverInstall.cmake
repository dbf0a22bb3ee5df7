# What `cmake --install` and `scripts/package.sh` put on a machine:
#   bin/drover, bin/drover-guard, bin/drover-agent
#   lib/libdrover.so.*             the public API (include/drover) in one shared library
#   include/drover/*.h             the public headers only
#   lib/cmake/drover/              find_package(drover CONFIG): target drover::drover
#   lib/pkgconfig/drover.pc        pkg-config --cflags --libs drover
#   lib/python3/dist-packages/drover   the Python package, for Debian's /usr/bin/python3
#   share/doc/drover/help/         the --help text of drover and of each command
# (lib is lib/<multiarch> when configured with CMAKE_INSTALL_PREFIX=/usr).
# Nothing installed names the build tree: no RPATH (every dependency is in
# the system's library path), relocatable CMake files, and a drover.pc
# written for the prefix actually installed to.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DROVER_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python package goes, relative to the prefix (Debian's module directory for /usr/bin/python3)")
set(DROVER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/drover")

install(TARGETS drover drover-guard drover-agent RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS drover_lib EXPORT droverTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/drover
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

install(EXPORT droverTargets NAMESPACE drover:: DESTINATION ${DROVER_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/droverConfig.cmake.in
  ${CMAKE_BINARY_DIR}/droverConfig.cmake
  INSTALL_DESTINATION ${DROVER_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a minor version may break the API, so only the same minor matches.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/droverConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/droverConfig.cmake ${CMAKE_BINARY_DIR}/droverConfigVersion.cmake
        DESTINATION ${DROVER_INSTALL_CMAKEDIR})

# drover.pc is written when installing, for the prefix installed to
# (`cmake --install build --prefix P` changes it after configure).
install(CODE "
  set(DROVER_PC_TEMPLATE \"${CMAKE_CURRENT_LIST_DIR}/drover.pc.in\")
  set(DROVER_PC_WORK \"${CMAKE_BINARY_DIR}/drover.pc.install\")
  set(DROVER_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(DROVER_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(DROVER_PC_VERSION \"${PROJECT_VERSION}\")
  include(\"${CMAKE_CURRENT_LIST_DIR}/install_pc.cmake\")")

if(TARGET _drover)
  install(TARGETS _drover LIBRARY DESTINATION ${DROVER_INSTALL_PYTHONDIR}/drover)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/drover/
          DESTINATION ${DROVER_INSTALL_PYTHONDIR}/drover
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
endif()

# The --help texts, as drover prints them, generated from the binary just built.
set(DROVER_HELP_DIR ${CMAKE_BINARY_DIR}/help)
add_custom_command(
  OUTPUT ${DROVER_HELP_DIR}/drover.txt
  COMMAND ${CMAKE_COMMAND} -DDROVER=$<TARGET_FILE:drover> -DOUTPUT_DIR=${DROVER_HELP_DIR}
          -P ${CMAKE_CURRENT_LIST_DIR}/help_texts.cmake
  DEPENDS drover ${CMAKE_CURRENT_LIST_DIR}/help_texts.cmake
  COMMENT "Writing drover's --help texts")
add_custom_target(drover_help ALL DEPENDS ${DROVER_HELP_DIR}/drover.txt)
install(DIRECTORY ${DROVER_HELP_DIR}/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/help)

# Everything the rules above install; scripts/package.sh builds just this.
add_custom_target(drover_installed)
add_dependencies(drover_installed drover drover-guard drover-agent drover_lib drover_help)
if(TARGET _drover)
  add_dependencies(drover_installed _drover)
endif()

# The Debian package (scripts/package.sh).
include(${CMAKE_CURRENT_LIST_DIR}/DroverPackage.cmake)

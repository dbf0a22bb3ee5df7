# libdrover (drover::drover), installed by cmake/DroverInstall.cmake and used
# in the tree by the examples that build against the public API only.
include(GNUInstallDirs)
find_package(Threads REQUIRED)

# libdrover: the components behind include/drover linked whole into one
# shared library. It carries its dependencies (protobuf, yaml-cpp, OpenSSL,
# zlib, MPI) as private ones, so a program using it needs only its headers,
# which need only the standard library (C++20). The CLI and the Python module
# keep linking the static components.
set(DROVER_LIB_COMPONENTS
  drover_version drover_common drover_os drover_spec drover_resolver drover_wire
  drover_rendezvous drover_feed_io drover_feed drover_report drover_agent)
add_library(drover_lib SHARED ${PROJECT_SOURCE_DIR}/include/drover/version.h)
add_library(drover::drover ALIAS drover_lib)
# Every object of each component, used here or not, so the library holds
# the whole API: the archives go whole on the link line (CMake's
# $<LINK_LIBRARY:WHOLE_ARCHIVE> cannot be used, as the components also link
# each other without it), then as ordinary libraries for their dependencies.
set(whole "")
foreach(component IN LISTS DROVER_LIB_COMPONENTS)
  string(APPEND whole " $<TARGET_FILE:${component}>")
endforeach()
target_link_options(drover_lib PRIVATE "SHELL:-Wl,--whole-archive${whole} -Wl,--no-whole-archive")
target_link_libraries(drover_lib PRIVATE ${DROVER_LIB_COMPONENTS})
target_link_libraries(drover_lib INTERFACE Threads::Threads)
target_include_directories(drover_lib INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(drover_lib INTERFACE cxx_std_20)
set_target_properties(drover_lib PROPERTIES
  OUTPUT_NAME drover
  EXPORT_NAME drover
  LINKER_LANGUAGE CXX
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}  # 0.x: each minor may break the ABI
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)

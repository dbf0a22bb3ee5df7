# Runs at install time (cmake/DroverInstall.cmake): writes drover.pc for the
# prefix being installed to, then installs it like any other file.
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(libdir "${DROVER_PC_LIBDIR}")
set(includedir "${DROVER_PC_INCLUDEDIR}")
set(version "${DROVER_PC_VERSION}")
configure_file("${DROVER_PC_TEMPLATE}" "${DROVER_PC_WORK}/drover.pc" @ONLY)
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${DROVER_PC_LIBDIR}/pkgconfig" TYPE FILE
     FILES "${DROVER_PC_WORK}/drover.pc")

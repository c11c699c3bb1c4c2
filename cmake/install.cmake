# `cmake --install <build> --prefix <dir>`: the libraries the CLI links (one per layer, and
# the CLI's own), exported as moecomm::<layer>; the headers under include/moecomm with their
# layer folders; the `moecomm` program; the presets under share/moecomm/data; and
# lib/cmake/moecomm/moecommConfig.cmake (+ version file) for find_package(moecomm).
include(CMakePackageConfigHelpers)

set(MOECOMM_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/moecomm")
set_target_properties(lemon_lib PROPERTIES EXPORT_NAME lemon)
get_property(moecomm_libraries GLOBAL PROPERTY moecomm_libraries)

install(TARGETS ${moecomm_libraries} lemon_lib EXPORT moecommTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/moecomm)
install(TARGETS moecomm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY "${CMAKE_SOURCE_DIR}/src/" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/moecomm
        FILES_MATCHING PATTERN "*.h")
install(DIRECTORY "${CMAKE_SOURCE_DIR}/data/" DESTINATION ${CMAKE_INSTALL_DATADIR}/moecomm/data)
install(EXPORT moecommTargets NAMESPACE moecomm:: DESTINATION ${MOECOMM_CMAKE_DIR})

configure_package_config_file("${CMAKE_SOURCE_DIR}/cmake/moecommConfig.cmake.in"
                              "${CMAKE_BINARY_DIR}/moecommConfig.cmake"
                              INSTALL_DESTINATION ${MOECOMM_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/moecommConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/moecommConfig.cmake"
              "${CMAKE_BINARY_DIR}/moecommConfigVersion.cmake"
        DESTINATION ${MOECOMM_CMAKE_DIR})

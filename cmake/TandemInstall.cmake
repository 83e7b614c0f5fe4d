# `cmake --install build [--prefix DIR]`: the CLI, the libraries of the C++ API with their
# headers, the CUDA backend's module (when built) and a CMake package, so that a program of
# one's own builds with find_package(Tandem) and one target_link_libraries(app Tandem::tandem)
# (README: The C++ API; tested by building examples/run_model.cpp out of tree).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The one target a program links: the runtime (Model, Trainer, the devices) and all beneath it.
add_library(tandem_api INTERFACE)
set_target_properties(tandem_api PROPERTIES EXPORT_NAME tandem)
target_link_libraries(tandem_api INTERFACE tandem_runtime)
add_library(Tandem::tandem ALIAS tandem_api)

set(TANDEM_INSTALLED_LIBRARIES tandem_core tandem_graph tandem_backend_shared tandem_backend_sim tandem_backend_cpu
    tandem_cuda_devices tandem_placement tandem_io tandem_optim tandem_data tandem_runtime)
install(TARGETS tandem RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${TANDEM_INSTALLED_LIBRARIES} tandem_api EXPORT TandemTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/tandem
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem)
# Headers keep their paths ("runtime/model.h"); the CUDA backend's own are not part of the API.
install(DIRECTORY core graph backends placement runtime
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem
        FILES_MATCHING PATTERN "*.h"
        PATTERN "backends/cuda" EXCLUDE PATTERN "runtime/cli" EXCLUDE)
if(TANDEM_HAVE_CUDA_BACKEND)
  install(TARGETS tandem_cuda_module LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/TandemConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/TandemConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TandemConfig.cmake ${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)

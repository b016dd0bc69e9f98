# How plrt is used from other projects: the CMake package (find_package(plrt)), the pkg-config files
# (plrt.pc, plrt-plugin.pc) and the Debian packages (cpack -G DEB).  Included last by the top-level
# CMakeLists.txt, once every target exists.
include(CMakePackageConfigHelpers)

# ---- the CMake package --------------------------------------------------------------------------
set(PLRT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/plrt)
set(PLRT_PLUGIN_INSTALL_LIBDIR ${CMAKE_INSTALL_LIBDIR}/plrt/plugins)
set_target_properties(plrt_plugin_api PROPERTIES EXPORT_NAME plugin_api)
set_target_properties(plrt_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(plrt_sdk PROPERTIES EXPORT_NAME sdk)
install(TARGETS plrt_plugin_api plrt_runtime plrt_sdk EXPORT plrtTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT plrtTargets NAMESPACE plrt:: DESTINATION ${PLRT_CMAKE_INSTALL_DIR} COMPONENT dev)
# plrt::torch (libtorch/, built where libtorch is found): its own export set and package
# (plrt-torch), so that plrt-dev does not depend on libtorch; find_package(plrt COMPONENTS torch).
if(TARGET plrt_torch)
  install(TARGETS plrt_torch EXPORT plrtTorchTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT torch
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/libtorch/include/plrt/torch.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/plrt
    COMPONENT torch)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/libtorch/include/plrt/torch DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/plrt
    COMPONENT torch)
  install(EXPORT plrtTorchTargets NAMESPACE plrt:: DESTINATION ${PLRT_CMAKE_INSTALL_DIR} COMPONENT torch)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/plrtConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/plrtConfig.cmake
  INSTALL_DESTINATION ${PLRT_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR PLRT_PLUGIN_INSTALL_LIBDIR)
# 0.x: a minor may change the C++ SDK, so only the same minor is compatible (the C ABI has its own
# version and rules: plrt/pl_abi.h).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/plrtConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/plrtConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/plrtConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/plrtPluginHelpers.cmake ${CMAKE_CURRENT_LIST_DIR}/plrt_exports.map
  DESTINATION ${PLRT_CMAKE_INSTALL_DIR} COMPONENT dev)

# ---- pkg-config -----------------------------------------------------------------------------------
# ${pcfiledir}/<this> is the prefix, so an unpacked or moved tree works as installed.
file(RELATIVE_PATH PLRT_PC_RELATIVE_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
foreach(pc plrt plrt-plugin)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endforeach()

# ---- Debian packages: cpack -G DEB (in the build folder) ----------------------------------------
#   plrt       runtime/: libplrt_runtime.so.0, the cpu accelerator, gloo, every strategy, plrun, plrt-mlp
#   plrt-dev   headers, libplrt_sdk.a, the CMake package and the .pc files (depends on plrt)
#   plrt-torch plrt::torch (libplrt_torch.a, plrt/torch.hpp, its CMake targets; depends on plrt-dev
#              and libtorch-dev), where libtorch was found
#   plrt-cuda  the cuda accelerator and the nccl process group (depends on plrt; needs the CUDA
#              toolkit's NCCL at the path it was built with, and a driver to find a GPU)
set(CPACK_PACKAGE_NAME plrt)
set(CPACK_PACKAGE_VENDOR "plrt")
set(CPACK_PACKAGE_CONTACT "plrt developers <plrt@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "PyTorch Lightning's distributed training for C++ programs")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
if(PLRT_HAVE_CUDA)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
endif()
if(TARGET plrt_torch)
  list(APPEND CPACK_COMPONENTS_ALL torch)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME plrt)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)  # dpkg-shlibdeps: libgloo0, libopenblas0, libspdlog...
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)   # shlibs for libplrt_runtime.so.0, and the ldconfig trigger
set(CPACK_DEBIAN_DEV_PACKAGE_NAME plrt-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "plrt (= ${PROJECT_VERSION}), libdlpack-dev")
set(CPACK_DEBIAN_CUDA_PACKAGE_NAME plrt-cuda)
set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "plrt (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_TORCH_PACKAGE_NAME plrt-torch)
set(CPACK_DEBIAN_TORCH_PACKAGE_DEPENDS "plrt-dev (= ${PROJECT_VERSION}), libtorch-dev")
set(CPACK_COMPONENT_TORCH_DESCRIPTION
  "plrt::torch: DistributedDataParallel and collectives for libtorch programs (find_package(plrt COMPONENTS torch))")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "plrt runtime, launcher (plrun) and the cpu, gloo and strategy plugins")
set(CPACK_COMPONENT_DEV_DESCRIPTION "plrt headers (C ABI, C API, C++ SDK), CMake package and pkg-config files")
set(CPACK_COMPONENT_CUDA_DESCRIPTION "plrt cuda accelerator and nccl process group (CUDA 13 toolkit's NCCL)")
include(CPack)

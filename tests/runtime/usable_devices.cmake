# The usable-device check (runtime/src/usable_devices.*, device_table.*, visible_devices.*,
# device_probe.*, find_usable.*).
#
# test_usable_selection: the pure parts, compiled in (they are hidden inside the runtime library).
add_executable(test_usable_selection test_usable_selection.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/usable_devices.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/device_table.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/visible_devices.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/device_parser.cpp)
target_include_directories(test_usable_selection PRIVATE
  ${PROJECT_SOURCE_DIR}/runtime/src ${PROJECT_SOURCE_DIR}/runtime/include)
target_link_libraries(test_usable_selection PRIVATE
  plrt::plugin_api nlohmann_json::nlohmann_json GTest::gtest_main GTest::gmock)
gtest_discover_tests(test_usable_selection)

# test_usable_devices: through the runtime's C API and the SDK, on simulated tables
# (PL_CUDA_DEVICE_TABLE) and the real probe (no GPU here: zero devices and the reason).
add_executable(test_usable_devices test_usable_devices.cpp)
target_link_libraries(test_usable_devices PRIVATE plrt::sdk GTest::gtest_main GTest::gmock)
target_compile_definitions(test_usable_devices PRIVATE
  PLRT_TEST_PLUGIN_DIR="${PLRT_TEST_PLUGIN_DIR}"
  PLRT_BUILD_PLUGIN_DIR="${PLRT_PLUGIN_BUILD_DIR}"
  $<$<BOOL:${PLRT_HAVE_CUDA}>:PLRT_HAVE_CUDA>)
add_dependencies(test_usable_devices ${PLRT_TEST_PLUGIN_TARGETS} plrt_accelerator_cpu plrt_strategy_single_device)
if(TARGET plrt_accelerator_cuda)
  add_dependencies(test_usable_devices plrt_accelerator_cuda)
endif()
gtest_discover_tests(test_usable_devices DISCOVERY_TIMEOUT 30)

# A scripted stand-in for the cuda plugin (hangs, crashes, refuses on cue) in its own folder, so
# that the probe's deadline and crash handling are tested without a GPU.
add_library(plrt_test_scripted_cuda MODULE scripted_cuda.c)
target_link_libraries(plrt_test_scripted_cuda PRIVATE plrt::plugin_api)
target_compile_options(plrt_test_scripted_cuda PRIVATE -std=c99 -pedantic -Werror)
target_compile_definitions(plrt_test_scripted_cuda PRIVATE _POSIX_C_SOURCE=200809L)
target_link_options(plrt_test_scripted_cuda PRIVATE -Wl,--no-undefined)
set_target_properties(plrt_test_scripted_cuda PROPERTIES PREFIX "" OUTPUT_NAME libplrt_accelerator_cuda
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-plugins/scripted-cuda)
add_dependencies(test_usable_devices plrt_test_scripted_cuda)
target_compile_definitions(test_usable_devices PRIVATE
  PLRT_SCRIPTED_CUDA_DIR="${CMAKE_BINARY_DIR}/test-plugins/scripted-cuda")

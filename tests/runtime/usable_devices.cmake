# The usable-device check: the runtime's generic part (runtime/src/usable_devices.*, find_usable.*)
# and the cuda accelerator's device_status (plugins/accelerators/cuda/usable_rules.*, device_table.*,
# visible_devices.*, device_probe.*, device_status.cpp).
#
# test_usable_selection: the runtime's pure parts, compiled in (they are hidden inside the runtime
# library): Lightning's num_devices rules over device statuses, the usable form, the options.
add_executable(test_usable_selection test_usable_selection.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/usable_devices.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/device_parser.cpp)
target_include_directories(test_usable_selection PRIVATE
  ${PROJECT_SOURCE_DIR}/runtime/src ${PROJECT_SOURCE_DIR}/runtime/include ${PROJECT_BINARY_DIR}/runtime/include)
target_link_libraries(test_usable_selection PRIVATE plrt::plugin_api GTest::gtest_main GTest::gmock)
gtest_discover_tests(test_usable_selection)

# test_cuda_usable_parts: the cuda plugin's host-only parts, compiled in, so that they are tested
# with or without nvcc: the reasons and thresholds, the table's JSON, CUDA_VISIBLE_DEVICES onto
# NVML, and the probe's process handling with bodies that hang, crash or fail on cue.
set(PLRT_CUDA_DIR ${PROJECT_SOURCE_DIR}/plugins/accelerators/cuda)
add_executable(test_cuda_usable_parts test_cuda_usable_rules.cpp test_cuda_probe.cpp
  ${PLRT_CUDA_DIR}/usable_rules.cpp
  ${PLRT_CUDA_DIR}/device_table.cpp
  ${PLRT_CUDA_DIR}/visible_devices.cpp
  ${PLRT_CUDA_DIR}/device_probe.cpp)
target_include_directories(test_cuda_usable_parts PRIVATE ${PLRT_CUDA_DIR} ${PROJECT_SOURCE_DIR}/plugins/common)
target_link_libraries(test_cuda_usable_parts PRIVATE
  plrt::plugin_api nlohmann_json::nlohmann_json GTest::gtest_main GTest::gmock)
gtest_discover_tests(test_cuda_usable_parts DISCOVERY_TIMEOUT 30 PROPERTIES TIMEOUT 60)

# test_usable_devices: through the runtime's C API, job resolution and the SDK: the real cuda
# plugin on simulated machines (PL_CUDA_DEVICE_TABLE) and on this machine (no GPU here: zero
# devices and the reason, no CUDA in this process), and the scripted accelerators below.
add_executable(test_usable_devices test_usable_devices.cpp)
target_link_libraries(test_usable_devices PRIVATE plrt::sdk plrt_test_unit_support GTest::gtest_main GTest::gmock)
target_compile_definitions(test_usable_devices PRIVATE
  PLRT_TEST_PLUGIN_DIR="${PLRT_TEST_PLUGIN_DIR}"
  PLRT_BUILD_PLUGIN_DIR="${PLRT_PLUGIN_BUILD_DIR}"
  $<$<BOOL:${PLRT_HAVE_CUDA}>:PLRT_HAVE_CUDA>)
add_dependencies(test_usable_devices ${PLRT_TEST_PLUGIN_TARGETS} plrt_accelerator_cpu plrt_strategy_single_device)
if(TARGET plrt_accelerator_cuda)
  add_dependencies(test_usable_devices plrt_accelerator_cuda)
endif()
gtest_discover_tests(test_usable_devices DISCOVERY_TIMEOUT 30)

# Scripted accelerators (scripted_cuda.c: statuses on cue; "plain" without device_status) in their
# own folder, so that the runtime's side is tested on answers no real device gives on demand.
foreach(variant cuda plain)
  set(target plrt_test_scripted_${variant})
  add_library(${target} MODULE scripted_cuda.c)
  target_link_libraries(${target} PRIVATE plrt::plugin_api)
  target_compile_options(${target} PRIVATE -std=c99 -pedantic -Werror)
  target_compile_definitions(${target} PRIVATE _POSIX_C_SOURCE=200809L $<$<STREQUAL:${variant},plain>:SCRIPTED_PLAIN>)
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME libplrt_accelerator_${variant}
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-plugins/scripted-cuda)
  add_dependencies(test_usable_devices ${target})
endforeach()
target_compile_definitions(test_usable_devices PRIVATE
  PLRT_SCRIPTED_CUDA_DIR="${CMAKE_BINARY_DIR}/test-plugins/scripted-cuda")

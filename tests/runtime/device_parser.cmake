# plrt::rt::parse_devices and friends (runtime/src/device_parser.cpp), tested on their own.
add_executable(test_device_parser test_device_parser.cpp ${PROJECT_SOURCE_DIR}/runtime/src/device_parser.cpp)
target_include_directories(test_device_parser PRIVATE
  ${PROJECT_SOURCE_DIR}/runtime/src ${PROJECT_SOURCE_DIR}/runtime/include ${PROJECT_BINARY_DIR}/runtime/include)
target_link_libraries(test_device_parser PRIVATE plrt::plugin_api GTest::gtest_main GTest::gmock)
gtest_discover_tests(test_device_parser)

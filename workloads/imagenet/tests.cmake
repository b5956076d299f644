# GoogleTest suites of the imagenet workload; included from tests/, where
# GoogleTest is found and testing is enabled.
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
foreach(_t image_decoder_test transforms_test imagenet_test index_cache_test)
  add_executable(${_t} ${PROJECT_SOURCE_DIR}/workloads/imagenet/${_t}.cc)
  target_link_libraries(${_t} PRIVATE GTest::gtest_main GTest::gmock
    batchd_imagenet batchd_workloads JPEG::JPEG PNG::PNG)
  gtest_discover_tests(${_t} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
endforeach()

# GoogleTest suites of batchctl's logic (argument parsing, output formats,
# rates, plan arithmetic); included from tests/, where GoogleTest is found
# and testing is enabled. The end-to-end tests against a real daemon are
# tests/python/test_batchctl.py.
foreach(_name cli output status plan bench)
  set(_t batchctl_${_name}_test)
  add_executable(${_t} ${PROJECT_SOURCE_DIR}/tools/batchctl/${_name}_test.cc)
  target_link_libraries(${_t} PRIVATE GTest::gtest_main GTest::gmock
    batchctl_lib)
  gtest_discover_tests(${_t} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
endforeach()

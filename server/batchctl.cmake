# batchctl, the operator CLI (status, shutdown, bench); included from
# server/CMakeLists.txt.
add_executable(batchctl ${CMAKE_CURRENT_LIST_DIR}/batchctl.cc)
target_link_libraries(batchctl PRIVATE batchd_client batchd_proto
  absl::strings absl::str_format)

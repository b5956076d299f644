# batchctl, the operator CLI (status, close, drain, shutdown, plan, version,
# bench); included from server/CMakeLists.txt.
add_executable(batchctl ${CMAKE_CURRENT_LIST_DIR}/batchctl.cc)
target_compile_definitions(batchctl PRIVATE
  BATCHD_VERSION="${PROJECT_VERSION}")
target_link_libraries(batchctl PRIVATE batchd_client batchd_proto
  absl::strings absl::str_format)

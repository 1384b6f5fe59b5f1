# kv_instructions: counts a client's instructions per GET and PUT under
# callgrind (bench/kv_instructions.sh). Needs valgrind's client-request
# header (Debian's valgrind package; tools/setup.sh installs it).
include(CheckIncludeFileCXX)
check_include_file_cxx(valgrind/callgrind.h MESHPOOL_HAVE_CALLGRIND_H)
if(MESHPOOL_HAVE_CALLGRIND_H)
  add_executable(kv_instructions kv_instructions.cc)
  target_include_directories(kv_instructions PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(kv_instructions PRIVATE
    meshpool_client absl::strings absl::status)
  # bench/kv_instructions.sh runs ../tools/meshpool for the cluster.
  add_dependencies(kv_instructions meshpool)
else()
  message(WARNING "valgrind/callgrind.h not found: bench/kv_instructions is "
                  "not built (install valgrind: tools/setup.sh)")
endif()

# Multi-process tests: a coordinator and memory nodes as real `meshpool`
# processes on 127.0.0.1, driven through the C++ API and the CLI.
meshpool_test(integration_test
  SOURCES integration_test.cc integration_fault_test.cc integration_cli_test.cc
  LIBS meshpool_tools meshpool_client meshpool_placement
  LABELS integration)
target_compile_definitions(integration_test PRIVATE
  MESHPOOL_BINARY="$<TARGET_FILE:meshpool>")
add_dependencies(integration_test meshpool)

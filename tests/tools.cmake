# tools/: `meshpool doctor` (Diagnose and formatting on fabricated facts, and
# the real binary on this host), plus its `verbs` check on a real device.
meshpool_test(tools_doctor_test
  SOURCES tools_doctor_test.cc
  LIBS meshpool_tools)
target_compile_definitions(tools_doctor_test PRIVATE
  MESHPOOL_BINARY="$<TARGET_FILE:meshpool>")
add_dependencies(tools_doctor_test meshpool)
meshpool_test(tools_doctor_verbs_test
  SOURCES tools_doctor_verbs_test.cc
  LIBS meshpool_tools meshpool_rdma
  LABELS verbs)
target_compile_definitions(tools_doctor_verbs_test PRIVATE
  MESHPOOL_BINARY="$<TARGET_FILE:meshpool>")
add_dependencies(tools_doctor_verbs_test meshpool)
# tools/flags: library messages translated to the command line's flags.
meshpool_test(tools_flags_test
  SOURCES tools_flags_test.cc
  LIBS meshpool_tools)

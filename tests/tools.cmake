# tools/: `meshpool doctor` (Diagnose and formatting on fabricated facts;
# on Linux the kernel's part and the real binary on this host), plus its
# `verbs` check on a real device.
meshpool_test(tools_doctor_test
  SOURCES tools_doctor_test.cc
  LIBS meshpool_tools)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  # ... the Linux kernel's part, and the real binary on this Linux host.
  meshpool_test(tools_doctor_linux_test
    SOURCES tools_doctor_test_linux.cc
    LIBS meshpool_tools)
  target_compile_definitions(tools_doctor_linux_test PRIVATE
    MESHPOOL_BINARY="$<TARGET_FILE:meshpool>")
  add_dependencies(tools_doctor_linux_test meshpool)
endif()
# ... on macOS, without a Mac: recorded outputs of Apple's tools
# (tests/data/macos) through the parsers, Diagnose and the real binary.
meshpool_test(tools_doctor_mac_test
  SOURCES tools_doctor_mac_test.cc
  LIBS meshpool_tools)
target_compile_definitions(tools_doctor_mac_test PRIVATE
  MESHPOOL_BINARY="$<TARGET_FILE:meshpool>"
  MESHPOOL_MAC_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/data/macos")
add_dependencies(tools_doctor_mac_test meshpool)
meshpool_test(tools_doctor_verbs_test
  SOURCES tools_doctor_verbs_test.cc
  LIBS meshpool_tools meshpool_rdma
  LABELS verbs)
target_compile_definitions(tools_doctor_verbs_test PRIVATE
  MESHPOOL_BINARY="$<TARGET_FILE:meshpool>")
add_dependencies(tools_doctor_verbs_test meshpool)
# tools/run_command: external commands with a time limit.
meshpool_test(tools_run_command_test
  SOURCES tools_run_command_test.cc
  LIBS meshpool_tools)
# tools/flags: library messages translated to the command line's flags.
meshpool_test(tools_flags_test
  SOURCES tools_flags_test.cc
  LIBS meshpool_tools)
# `meshpool launch`: the hostfile, device matrix and planned commands.
meshpool_test(tools_launch_test
  SOURCES tools_launch_test.cc
  LIBS meshpool_tools meshpool_rdma)
# `meshpool launch --discover-links`: cables found from the hosts' reports.
meshpool_test(tools_launch_links_test
  SOURCES tools_launch_links_test.cc
  LIBS meshpool_tools meshpool_rdma)
# ... and a real launch across network namespaces standing in for hosts
# (needs root and iproute2; skips loudly, exit 77, without them).
add_test(NAME LaunchAcrossNamespaces
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/launch_netns_test.sh
          $<TARGET_FILE:meshpool>)
set_tests_properties(LaunchAcrossNamespaces PROPERTIES
  LABELS integration SKIP_RETURN_CODE 77 TIMEOUT 180)

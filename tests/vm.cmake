# Tests that boot the Soft-RoCE VM (tools/vm/, DESIGN §5): label "vm". Each
# boots a qemu guest that wants the machine's CPUs, so run them on their own,
# serially, apart from the normal parallel run: `ctest -L vm`.
set(MESHPOOL_VM_TOOLS ${PROJECT_SOURCE_DIR}/tools/vm)

# The guest has Soft-RoCE: rxe0 exists and its port is ACTIVE.
add_test(NAME VmSmokeRxeDeviceIsActive COMMAND ${MESHPOOL_VM_TOOLS}/smoke.sh
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(VmSmokeRxeDeviceIsActive PROPERTIES
                     LABELS vm RUN_SERIAL TRUE TIMEOUT 300)

# Every test labelled "verbs", on a real (soft) RDMA device, where a missing
# device is a failure (MESHPOOL_REQUIRE_VERBS=1), never a skip.
add_test(NAME VerbsSuiteInVm
         COMMAND ${MESHPOOL_VM_TOOLS}/run_verbs_suite.sh ${CMAKE_BINARY_DIR})
set_tests_properties(VerbsSuiteInVm PROPERTIES
                     LABELS vm RUN_SERIAL TRUE TIMEOUT 1500
                     DEPENDS VmSmokeRxeDeviceIsActive)

# The VM benchmarks in their smoke mode (tiny runs), so that a change that
# breaks one breaks CI rather than the next measurement.
add_test(NAME VerbsBenchSmokeInVm
         COMMAND ${CMAKE_COMMAND} -E env SMOKE=1
                 ${PROJECT_SOURCE_DIR}/bench/verbs_bench.sh ${CMAKE_BINARY_DIR})
set_tests_properties(VerbsBenchSmokeInVm PROPERTIES
                     LABELS vm RUN_SERIAL TRUE TIMEOUT 600
                     DEPENDS VmSmokeRxeDeviceIsActive)
add_test(NAME UcBenchSmokeInVm
         COMMAND ${CMAKE_COMMAND} -E env SMOKE=1
                 ${PROJECT_SOURCE_DIR}/bench/uc_bench.sh ${CMAKE_BINARY_DIR})
set_tests_properties(UcBenchSmokeInVm PROPERTIES
                     LABELS vm RUN_SERIAL TRUE TIMEOUT 600
                     DEPENDS VmSmokeRxeDeviceIsActive)

# `meshpool launch --discover-links` finds the cables between three network
# namespaces, each cable a veth pair with an rxe device at both ends.
add_test(NAME LaunchDiscoversCablesInVm
         COMMAND ${PROJECT_SOURCE_DIR}/tests/launch_discover_vm_test.sh
                 $<TARGET_FILE:meshpool>)
set_tests_properties(LaunchDiscoversCablesInVm PROPERTIES
                     LABELS vm RUN_SERIAL TRUE TIMEOUT 600
                     DEPENDS VmSmokeRxeDeviceIsActive)

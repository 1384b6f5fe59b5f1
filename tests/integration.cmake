# Multi-process tests: a coordinator and memory nodes as real `meshpool`
# processes on 127.0.0.1, driven through the C++ API and the CLI. Built
# once per transport: over TCP, shm, uc (UDP), and over verbs and uc on UC
# queue pairs (label `verbs`: run in the Soft-RoCE VM; elsewhere their tests
# skip, or fail under MESHPOOL_REQUIRE_VERBS=1).
set(MESHPOOL_INTEGRATION_SOURCES
  integration_test.cc integration_fault_test.cc integration_cli_test.cc
  integration_region_test.cc integration_weights_test.cc
  integration_kv_test.cc)
meshpool_test(integration_test
  SOURCES ${MESHPOOL_INTEGRATION_SOURCES}
  LIBS meshpool_tools meshpool_weights meshpool_client meshpool_coordinator
  LABELS integration
  DEFINES MESHPOOL_BINARY="$<TARGET_FILE:meshpool>"
          MESHPOOL_TEST_TRANSPORT="tcp")
add_dependencies(integration_test meshpool)
# The control plane over TLS (once, over tcp): certificates, roles, a node's
# id bound to its certificate, region owners, protected mode.
meshpool_test(integration_auth_test
  SOURCES integration_auth_test.cc
  LIBS meshpool_tools meshpool_weights meshpool_client meshpool_coordinator_client
  LABELS integration
  DEFINES MESHPOOL_BINARY="$<TARGET_FILE:meshpool>")
add_dependencies(integration_auth_test meshpool)
# The same tests with the nodes also serving shared memory, so this host's
# clients (the tests and the CLI) move data with memcpy over a memfd.
meshpool_test(integration_shm_test
  SOURCES ${MESHPOOL_INTEGRATION_SOURCES}
  LIBS meshpool_tools meshpool_weights meshpool_client meshpool_coordinator
  LABELS integration
  PREFIX shm.
  DEFINES MESHPOOL_BINARY="$<TARGET_FILE:meshpool>"
          MESHPOOL_TEST_TRANSPORT="shm")
add_dependencies(integration_shm_test meshpool)
# The same tests over the uc backend (UDP messages with software
# reliability: the protocol of Thunderbolt's UC RDMA).
meshpool_test(integration_uc_test
  SOURCES ${MESHPOOL_INTEGRATION_SOURCES}
  LIBS meshpool_tools meshpool_weights meshpool_client meshpool_coordinator
  LABELS integration
  PREFIX uc.
  DEFINES MESHPOOL_BINARY="$<TARGET_FILE:meshpool>"
          MESHPOOL_TEST_TRANSPORT="uc")
add_dependencies(integration_uc_test meshpool)
meshpool_test(integration_verbs_test
  SOURCES ${MESHPOOL_INTEGRATION_SOURCES}
  LIBS meshpool_tools meshpool_weights meshpool_client meshpool_coordinator
  LABELS verbs
  PREFIX verbs.
  DEFINES MESHPOOL_BINARY="$<TARGET_FILE:meshpool>"
          MESHPOOL_TEST_TRANSPORT="verbs")
add_dependencies(integration_verbs_test meshpool)
# The same tests over uc on UC queue pairs under the thunderbolt profile
# (what a Mac offers), label `verbs` as above.
meshpool_test(integration_uc_verbs_test
  SOURCES ${MESHPOOL_INTEGRATION_SOURCES}
  LIBS meshpool_tools meshpool_weights meshpool_client meshpool_coordinator
  LABELS verbs
  PREFIX ucverbs.
  DEFINES MESHPOOL_BINARY="$<TARGET_FILE:meshpool>"
          MESHPOOL_TEST_TRANSPORT="uc_verbs")
add_dependencies(integration_uc_verbs_test meshpool)

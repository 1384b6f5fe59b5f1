# rdma/: the transport contract, run against every backend, plus the tcp
# responder against hostile peers, the tcp endpoint against a scripted
# responder, the sim fabric's faults and the shm
# backend's own cases.
meshpool_test(rdma_conformance_test
  SOURCES rdma_conformance_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_tcp_responder_test
  SOURCES rdma_tcp_responder_test.cc rdma_tcp_admission_test.cc
  LIBS meshpool_rdma)
# The tcp responder's cases again on the poll(2) backend macOS uses, and the
# Poller's own cases on each backend.
gtest_discover_tests(rdma_tcp_responder_test TEST_PREFIX "poll."
                     DISCOVERY_TIMEOUT 60
                     PROPERTIES TIMEOUT 300 ENVIRONMENT MESHPOOL_POLLER=poll)
gtest_discover_tests(rdma_conformance_test TEST_PREFIX "poll."
                     TEST_FILTER "*/tcp" DISCOVERY_TIMEOUT 60
                     PROPERTIES TIMEOUT 300 ENVIRONMENT MESHPOOL_POLLER=poll)
meshpool_test(rdma_poller_test
  SOURCES rdma_poller_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_tcp_endpoint_test
  SOURCES rdma_tcp_endpoint_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_sim_test
  SOURCES rdma_sim_test.cc
  LIBS meshpool_rdma)
# The uc backend: its reliable channel over a simulated lossy link, and the
# backend over UDP on loopback (loss, a silent node, junk datagrams, token
# admission).
meshpool_test(rdma_uc_channel_test
  SOURCES rdma_uc_channel_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_uc_test
  SOURCES rdma_uc_test.cc rdma_uc_admission_test.cc
  LIBS meshpool_rdma)
# The shm backend beyond the contract; the process tests re-execute the
# binary as a second client or a node that gets killed.
meshpool_test(rdma_shm_test
  SOURCES rdma_shm_test.cc rdma_shm_forward_test.cc rdma_shm_process_test.cc
          rdma_shm_socket_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_device_matrix_test
  SOURCES rdma_device_matrix_test.cc
  LIBS meshpool_rdma)
# The verbs backend. The handshake's wire format and option checks need no
# device (rdma_verbs_offline_test); the rest
# needs an RDMA device (label "verbs": run in the Soft-RoCE VM with
# tools/vm/run_verbs_suite.sh; they skip loudly elsewhere). The conformance
# suite is compiled a second time with only the verbs backend so that tcp
# and sim conformance stay unlabelled.
meshpool_test(rdma_verbs_offline_test
  SOURCES rdma_verbs_offline_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_conformance_verbs_test
  SOURCES rdma_conformance_test.cc
  LIBS meshpool_rdma
  LABELS verbs)
target_compile_definitions(rdma_conformance_verbs_test PRIVATE
  MESHPOOL_CONFORMANCE_VERBS=1)
meshpool_test(rdma_verbs_test
  SOURCES rdma_verbs_test.cc
  LIBS meshpool_rdma
  LABELS verbs)
# The uc backend over UC queue pairs under the thunderbolt profile, with
# tc netem on the VM's veth link.
meshpool_test(rdma_uc_verbs_test
  SOURCES rdma_uc_verbs_test.cc
  LIBS meshpool_rdma
  LABELS verbs)

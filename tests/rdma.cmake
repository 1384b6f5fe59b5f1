# rdma/: the transport contract, run against every backend, plus the tcp
# responder against hostile peers and the sim fabric's faults.
meshpool_test(rdma_conformance_test
  SOURCES rdma_conformance_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_tcp_responder_test
  SOURCES rdma_tcp_responder_test.cc
  LIBS meshpool_rdma)
meshpool_test(rdma_sim_test
  SOURCES rdma_sim_test.cc
  LIBS meshpool_rdma)

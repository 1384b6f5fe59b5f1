# The client protocols in one process over the simulated fabric, where a
# test can act exactly between two of a client's one-sided operations.
meshpool_test(client_sim_test
  SOURCES client_sim_test.cc
  LIBS meshpool_client meshpool_store meshpool_placement meshpool_rdma)

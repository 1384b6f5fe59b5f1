# The client protocols in one process over the simulated fabric, where a
# test can act exactly between two of a client's one-sided operations.
meshpool_test(client_sim_test
  SOURCES client_sim_test.cc
  LIBS meshpool_client meshpool_store meshpool_coordinator meshpool_rdma)
# Regions through the client: a coordinator and three nodes in one process,
# the data path on the simulated fabric (and one large-transfer test over
# TCP loopback; MESHPOOL_REGION_BENCH_MIB=256 makes it a throughput check).
meshpool_test(client_region_sim_test
  SOURCES client_region_sim_test.cc
  LIBS meshpool_client meshpool_store meshpool_coordinator meshpool_rdma)
# safetensors headers and index files: strict parsing, every malformed case.
meshpool_test(client_safetensors_test
  SOURCES client_safetensors_test.cc
  LIBS meshpool_weights meshpool_common)
# Model weights: load, list, read, slice, replace and remove models on an
# in-process cluster over the simulated fabric; malformed files rejected.
meshpool_test(client_weights_test
  SOURCES client_weights_test.cc
  LIBS meshpool_weights meshpool_client meshpool_store meshpool_coordinator
       meshpool_rdma)
# The KV-cache API: block keys, batched zero-copy and async batches, prefix
# match, pins and leases under eviction pressure, a fill to 3x the pool,
# engines sharing blocks; in-process nodes over the simulated fabric.
meshpool_test(client_kv_cache_test
  SOURCES client_kv_cache_test.cc
  LIBS meshpool_client meshpool_store meshpool_coordinator meshpool_rdma)
# The client's own check of the pool layouts nodes registered.
meshpool_test(client_node_layout_test
  SOURCES client_node_layout_test.cc
  LIBS meshpool_client meshpool_proto meshpool_format meshpool_rdma)
# The client's internal retry outcomes: typed, never confused with a plain
# Aborted.
meshpool_test(client_kv_retry_test
  SOURCES client_kv_retry_test.cc
  LIBS meshpool_client)
# Re-replication end to end: the coordinator's repairer copying through its
# own client while readers read, nodes killed, on the simulated fabric.
meshpool_test(client_region_repair_sim_test
  SOURCES client_region_repair_sim_test.cc
  LIBS meshpool_tools meshpool_client meshpool_store meshpool_coordinator
       meshpool_rdma)

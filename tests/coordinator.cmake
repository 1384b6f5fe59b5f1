# coordinator/: membership, the map and its watch over real gRPC on
# 127.0.0.1 (through the client stub), the region table over fake nodes, and
# the coordinator's state.
meshpool_test(coordinator_test
  SOURCES coordinator_test.cc coordinator_region_table_test.cc
          coordinator_state_test.cc coordinator_region_repair_test.cc
          coordinator_tenants_test.cc coordinator_map_feed_test.cc
  LIBS meshpool_coordinator)
# The durable state: its files under torn writes and corruption, what
# survives a reopen, compaction.
meshpool_test(coordinator_file_state_test
  SOURCES coordinator_file_state_test.cc
  LIBS meshpool_coordinator)
# The state and the election in a real etcd on loopback (etcd-server;
# tools/setup.sh installs it).
meshpool_test(coordinator_etcd_test
  SOURCES coordinator_etcd_test.cc
  LIBS meshpool_coordinator meshpool_coordinator_client)

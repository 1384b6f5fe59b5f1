# store/: pool, slab manager, pin tables and evictor (no network) and the
# node end to end.
meshpool_test(store_test
  SOURCES store_pool_test.cc store_slab_test.cc
          store_session_test.cc store_pin_area_test.cc
          store_evict_test.cc
  LIBS meshpool_store)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  target_sources(store_test PRIVATE store_pool_test_linux.cc)
endif()
meshpool_test(store_node_test
  SOURCES store_node_test.cc store_digest_test.cc store_node_kv_test.cc
  LIBS meshpool_store meshpool_coordinator meshpool_rdma)

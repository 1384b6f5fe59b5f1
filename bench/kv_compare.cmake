# kv_compare: a plain executable with its own main and flags (not Google
# Benchmark). The same batched PUT/GET workload against redis, memcached and
# a meshpool cluster, next to iperf3 loopback and memcpy ceilings measured
# in the same run. bench/kv_compare.sh starts the servers and runs it.
add_executable(kv_compare
  kv_compare.cc
  kv_compare_ceilings.cc
  kv_compare_report.cc
  kv_compare_systems.cc
  kv_socket.cc
  memcache_client.cc
  resp_client.cc)
target_include_directories(kv_compare PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(kv_compare PRIVATE
  meshpool_client meshpool_tools meshpool_common
  absl::str_format absl::strings absl::synchronization absl::time
  Threads::Threads)
# bench/kv_compare.sh runs ../tools/meshpool for the cluster.
add_dependencies(kv_compare meshpool)

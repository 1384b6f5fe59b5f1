# kv_compare: a plain executable with its own main and flags (not Google
# Benchmark). The same batched PUT/GET workload against redis, memcached and
# a meshpool cluster, next to iperf3 loopback and memcpy ceilings measured
# in the same run. bench/kv_compare.sh starts the servers and runs it.
# It reaches redis and memcached through the client libraries their users
# use, hiredis and libmemcached (Debian's libhiredis-dev and
# libmemcached-dev; tools/setup.sh installs them).
pkg_check_modules(HIREDIS QUIET IMPORTED_TARGET hiredis)
pkg_check_modules(LIBMEMCACHED QUIET IMPORTED_TARGET libmemcached)
set(MESHPOOL_KV_COMPARE_MISSING "")
if(NOT HIREDIS_FOUND)
  list(APPEND MESHPOOL_KV_COMPARE_MISSING "hiredis (libhiredis-dev)")
endif()
if(NOT LIBMEMCACHED_FOUND)
  list(APPEND MESHPOOL_KV_COMPARE_MISSING "libmemcached (libmemcached-dev)")
endif()
if(NOT MESHPOOL_KV_COMPARE_MISSING)
  add_executable(kv_compare
    kv_compare.cc
    kv_compare_ceilings.cc
    kv_compare_report.cc
    kv_compare_systems.cc
    memcache_client.cc
    resp_client.cc)
  target_include_directories(kv_compare PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(kv_compare PRIVATE
    meshpool_client meshpool_tools meshpool_common
    absl::str_format absl::strings absl::synchronization absl::time
    PkgConfig::HIREDIS PkgConfig::LIBMEMCACHED
    Threads::Threads)
  # bench/kv_compare.sh runs ../tools/meshpool for the cluster.
  add_dependencies(kv_compare meshpool)
else()
  list(JOIN MESHPOOL_KV_COMPARE_MISSING " and " MESHPOOL_KV_COMPARE_MISSING)
  message(WARNING "pkg-config finds no ${MESHPOOL_KV_COMPARE_MISSING}: "
                  "bench/kv_compare is not built (install the packages: "
                  "tools/setup.sh)")
endif()

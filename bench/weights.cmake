# weights_bench: a plain executable with its own main and flags (not Google
# Benchmark). In one run it starts a local cluster (the meshpool binary),
# measures raw one-sided bandwidth, LoadSafetensors and ReadTensor of a
# generated model, and prints them side by side. bench/weights_bench.sh
# runs it over TCP, and in the Soft-RoCE VM over verbs (--vm).
add_executable(weights_bench
  weights_bench.cc
  weights_bench_model.cc
  weights_bench_raw.cc
  weights_bench_report.cc
  weights_bench_util.cc)
target_include_directories(weights_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(weights_bench PRIVATE
  meshpool_weights meshpool_client meshpool_tools meshpool_coordinator
  meshpool_rdma meshpool_store meshpool_proto meshpool_common
  PkgConfig::XXHASH absl::flat_hash_map absl::str_format absl::synchronization
  Threads::Threads)
# It runs ../tools/meshpool for the cluster's processes.
add_dependencies(weights_bench meshpool)

meshpool_bench(transport_bench SOURCES transport_bench.cc LIBS meshpool_rdma)

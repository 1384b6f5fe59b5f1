meshpool_bench(store_bench SOURCES store_bench.cc LIBS meshpool_store)

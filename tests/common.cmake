meshpool_test(common_test SOURCES common_test.cc LIBS meshpool_common)

meshpool_test(common_test SOURCES common_test.cc LIBS meshpool_common)
meshpool_test(common_json_test SOURCES common_json_test.cc LIBS meshpool_common)
meshpool_test(common_posix_test SOURCES common_posix_test.cc LIBS meshpool_common)

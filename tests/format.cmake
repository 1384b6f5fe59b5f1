# format/: the on-memory layout and object encoding node and client share.
meshpool_test(format_test
  SOURCES format_layout_test.cc
  LIBS meshpool_format PkgConfig::XXHASH)

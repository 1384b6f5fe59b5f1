# placement/: rendezvous hashing and bucket tables, region names, layouts
# and stripe placement.
meshpool_test(placement_test
  SOURCES placement_rendezvous_test.cc placement_bucket_test.cc
          placement_map_delta_test.cc
          placement_region_test.cc
  LIBS meshpool_placement)

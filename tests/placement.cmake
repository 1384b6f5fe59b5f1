meshpool_test(placement_test
  SOURCES placement_rendezvous_test.cc placement_coordinator_test.cc
          placement_region_test.cc placement_region_table_test.cc
  LIBS meshpool_placement)

# Fuzz targets (tests/fuzz/): one per parser of bytes from outside. With
# MESHPOOL_FUZZ (clang) each is a libFuzzer binary that tools/fuzz.sh runs
# for a bounded time; otherwise it is linked with a driver that replays its
# inputs. Either way CTest replays the seed corpus tests/fuzz/corpus/NAME as
# the test fuzz.NAME. The binary is tests/fuzz_NAME (tools/fuzz.sh finds
# targets by that name).
function(meshpool_fuzzer name)
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  set(target fuzz_${name})
  if(MESHPOOL_FUZZ)
    add_executable(${target} ${F_SOURCES})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${target} ${F_SOURCES} fuzz/replay_main.cc)
  endif()
  target_link_libraries(${target} PRIVATE ${F_LIBS})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  add_test(NAME fuzz.${name}
           COMMAND ${target} -runs=0 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 300)
endfunction()

meshpool_fuzzer(json SOURCES fuzz/json_fuzz.cc LIBS meshpool_common)
meshpool_fuzzer(safetensors SOURCES fuzz/safetensors_fuzz.cc LIBS meshpool_weights)
meshpool_fuzzer(weights_manifest SOURCES fuzz/weights_manifest_fuzz.cc
                LIBS meshpool_weights meshpool_proto PkgConfig::XXHASH)
meshpool_fuzzer(node_info SOURCES fuzz/node_info_fuzz.cc
                LIBS meshpool_coordinator meshpool_placement meshpool_proto)
meshpool_fuzzer(device_matrix SOURCES fuzz/device_matrix_fuzz.cc LIBS meshpool_rdma)
meshpool_fuzzer(verbs_handshake SOURCES fuzz/verbs_handshake_fuzz.cc LIBS meshpool_rdma)
meshpool_fuzzer(shm_hello SOURCES fuzz/shm_hello_fuzz.cc LIBS meshpool_rdma)
meshpool_fuzzer(uc_channel SOURCES fuzz/uc_channel_fuzz.cc LIBS meshpool_rdma PkgConfig::XXHASH)
meshpool_fuzzer(tcp_responder SOURCES fuzz/tcp_responder_fuzz.cc LIBS meshpool_rdma)
meshpool_fuzzer(flags SOURCES fuzz/flags_fuzz.cc LIBS meshpool_tools meshpool_common)
meshpool_fuzzer(mac_tools SOURCES fuzz/mac_tools_fuzz.cc LIBS meshpool_tools meshpool_common)

# Writes the binary seeds with the project's encoders (tests/fuzz/make_seeds.cc).
add_executable(fuzz_make_seeds fuzz/make_seeds.cc)
target_link_libraries(fuzz_make_seeds PRIVATE meshpool_weights meshpool_rdma
                      meshpool_format meshpool_proto PkgConfig::XXHASH)
target_include_directories(fuzz_make_seeds PRIVATE ${PROJECT_SOURCE_DIR})

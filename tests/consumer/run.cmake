# ctest -P script: install the build tree into a scratch prefix, check that
# the installed package carries no server code, configure and build the
# consumer project against it, and run it against a coordinator address
# where nothing listens (it must link, start, and report Unavailable).
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, NM (the nm program).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

# meshpool::client links no server code: no node, evictor or coordinator
# library is installed, and no installed library (nor the consumer, below)
# defines a symbol of the node's (meshpool::store) or the coordinator
# server's (meshpool::coordinator) namespaces.
set(server_symbols "meshpool::(store|coordinator)::")
function(check_no_server_code file)
  execute_process(COMMAND ${NM} -C --defined-only ${file}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE syms ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${file} failed: ${err}")
  endif()
  string(REGEX MATCHALL "[^\n]*${server_symbols}[^\n]*" found "${syms}")
  if(found)
    list(LENGTH found n)
    list(SUBLIST found 0 5 first)
    string(REPLACE ";" "\n  " first "${first}")
    message(FATAL_ERROR "${file} defines ${n} symbols of server code, e.g.\n  ${first}")
  endif()
endfunction()
file(GLOB_RECURSE installed_libs ${WORK_DIR}/prefix/*.a ${WORK_DIR}/prefix/*.so)
foreach(lib ${installed_libs})
  get_filename_component(name ${lib} NAME)
  if(name MATCHES "meshpool_(store|coordinator)\\.")
    message(FATAL_ERROR "server library installed with the client package: ${lib}")
  endif()
  check_no_server_code(${lib})
endforeach()
list(LENGTH installed_libs n_libs)
if(n_libs LESS 6)
  message(FATAL_ERROR "expected the client's libraries in ${WORK_DIR}/prefix, found: ${installed_libs}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed: find_package(meshpool) broken")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer against meshpool::client failed")
endif()
check_no_server_code(${WORK_DIR}/build/consumer)
execute_process(COMMAND ${WORK_DIR}/build/consumer 127.0.0.1:1
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT rc EQUAL 1 OR NOT err MATCHES "UNAVAILABLE")
  message(FATAL_ERROR "consumer ran wrong: rc=${rc} stderr=${err} stdout=${out}")
endif()
message(STATUS "consumer built against the installed package (${n_libs} libraries, "
               "no server code) and ran: ${err}")

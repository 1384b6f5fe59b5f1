# ctest -P script: install the build tree into a scratch prefix, configure and
# build the consumer project against it, and run it against a coordinator
# address where nothing listens (it must link, start, and report Unavailable).
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
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
execute_process(COMMAND ${WORK_DIR}/build/consumer 127.0.0.1:1
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
if(NOT rc EQUAL 1 OR NOT err MATCHES "UNAVAILABLE")
  message(FATAL_ERROR "consumer ran wrong: rc=${rc} stderr=${err} stdout=${out}")
endif()
message(STATUS "consumer built against the installed package and ran: ${err}")

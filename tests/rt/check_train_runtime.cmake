# `moecomm train --runtime schedule` runs the step's schedule op by op: the JSON says which
# runtime ran, and its last loss equals the hand-built runtime's within 2e-5.
# Arguments: MPIEXEC, MOECOMM.
foreach(runtime hand-built schedule)
  execute_process(
    COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} train --steps 3 --json --runtime ${runtime}
            --strategy base=lina,chunks=2,a2a=2dh --ranks-per-node 2 --routing-trace ""
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "train --runtime ${runtime} exited ${status}:\n${out}\n${err}")
  endif()
  string(JSON ran GET "${out}" runtime)
  if(NOT ran STREQUAL runtime)
    message(FATAL_ERROR "asked for the ${runtime} runtime, the JSON says ${ran}")
  endif()
  string(JSON loss GET "${out}" steps 2 lm_loss)
  # The loss in millionths (CMake's math is integer): "1.673512..." -> 1673512.
  if(NOT loss MATCHES "^([0-9]+)\\.([0-9][0-9][0-9][0-9][0-9][0-9])")
    message(FATAL_ERROR "${runtime}: a loss of ${loss}")
  endif()
  math(EXPR micro_${ran} "${CMAKE_MATCH_1} * 1000000 + 1${CMAKE_MATCH_2} - 1000000")
endforeach()
math(EXPR diff "${micro_schedule} - ${micro_hand-built}")
if(diff GREATER 20 OR diff LESS -20)
  message(FATAL_ERROR "losses differ: schedule ${micro_schedule}, hand-built ${micro_hand-built} (1e-6)")
endif()
message(STATUS "last loss: schedule ${micro_schedule}, hand-built ${micro_hand-built} (1e-6)")

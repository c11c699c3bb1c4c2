# `moecomm train` on 4 ranks (issue 5 "Done when"): over 200 steps the loss must fall from
# about ln(64) to well below it, and the routing trace it writes must be read by
# `moecomm place`. Arguments: MPIEXEC, MOECOMM, TRACE, CLUSTER.
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} train --steps 200 --json
          --ranks-per-node 2 --routing-trace ${TRACE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "train exited ${status}:\n${out}\n${err}")
endif()
string(JSON steps LENGTH "${out}" steps)
if(NOT steps EQUAL 200)
  message(FATAL_ERROR "expected 200 steps, got ${steps}")
endif()
string(JSON first GET "${out}" steps 0 lm_loss)
# CMake's math is integer: compare in thousandths.
string(JSON last GET "${out}" steps 199 lm_loss)
string(JSON floor GET "${out}" entropy_floor)
# Thousandths of a non-negative decimal ("4", "4.2" or "4.16598...").
function(milli value out)
  string(REGEX MATCH "^([0-9]+)\\.?([0-9]*)" whole "${value}")
  set(fraction "${CMAKE_MATCH_2}000")
  string(SUBSTRING "${fraction}" 0 3 fraction)
  math(EXPR result "${CMAKE_MATCH_1} * 1000 + 1${fraction} - 1000")
  set(${out} ${result} PARENT_SCOPE)
endfunction()
milli("${first}" first_milli)
milli("${last}" last_milli)
message(STATUS "lm loss ${first} -> ${last} (entropy floor ${floor})")
math(EXPR half "${first_milli} / 2")
if(NOT last_milli LESS half)
  message(FATAL_ERROR "the loss did not fall to half: ${first} -> ${last}")
endif()
execute_process(COMMAND ${MOECOMM} place --trace ${TRACE} --cluster ${CLUSTER} --json
                OUTPUT_VARIABLE placed RESULT_VARIABLE status ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "moecomm place could not read the trace: ${err}")
endif()
string(JSON pairs GET "${placed}" summary pairs)
message(STATUS "moecomm place read the trace: ${pairs} layer pairs")

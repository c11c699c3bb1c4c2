# `moecomm train --parallel pp=2` on 4 ranks: two pipeline stages of one block each train the
# tiny model as one stage of two does on the same data, i.e. with as many data ranks (tp=2),
# every step's loss within 1e-5. Arguments: MPIEXEC, MOECOMM.
# trace: whether to pass --routing-trace "" (else the default).
function(train parallel trace out_var)
  if(trace)
    execute_process(
      COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} train --steps 3 --json --ranks-per-node 2
              --batch 2 --seq-len 16 --parallel ${parallel} --pp-schedule gpipe --routing-trace ""
      OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
  else()
    execute_process(
      COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} train --steps 3 --json --ranks-per-node 2
              --batch 2 --seq-len 16 --parallel ${parallel} --pp-schedule gpipe
      OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
  endif()
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "train --parallel ${parallel} exited ${status}:\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Millionths of a non-negative decimal ("4", "4.2" or "4.16598...").
function(micro value out)
  string(REGEX MATCH "^([0-9]+)\\.?([0-9]*)" whole "${value}")
  set(fraction "${CMAKE_MATCH_2}000000")
  string(SUBSTRING "${fraction}" 0 6 fraction)
  math(EXPR result "${CMAKE_MATCH_1} * 1000000 + 1${fraction} - 1000000")
  set(${out} ${result} PARENT_SCOPE)
endfunction()
train("tp=2" ON one)
train("pp=2" OFF two)  # no routing trace by default: each stage sees its own layers
string(JSON strategy GET "${two}" strategy)
if(NOT strategy MATCHES "pp_schedule=gpipe")
  message(FATAL_ERROR "--pp-schedule gpipe did not set the knob: ${strategy}")
endif()
string(JSON trace GET "${two}" routing_trace)
if(NOT trace STREQUAL "")
  message(FATAL_ERROR "pp=2 wrote a routing trace by default: ${trace}")
endif()
foreach(step RANGE 2)
  string(JSON a GET "${one}" steps ${step} loss)
  string(JSON b GET "${two}" steps ${step} loss)
  micro("${a}" a_micro)
  micro("${b}" b_micro)
  math(EXPR diff "${a_micro} - ${b_micro}")
  if(diff GREATER 10 OR diff LESS -10)
    message(FATAL_ERROR "step ${step}: loss ${b} on two stages, ${a} on one")
  endif()
endforeach()
message(STATUS "pp=2 trains like one stage: last loss ${b}")

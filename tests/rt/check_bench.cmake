# `moecomm bench` on 4 ranks (2 logical nodes), tp=2: the baseline and MoNTA O1 each trained
# for real and simulated on the cluster file (issue 7). The JSON holds both cases with
# measured and simulated phases, MoNTA's drop halves the inter-node token bytes exactly
# (Eq. 8 at t = 2), and the SVG chart and the Chrome trace are written. Arguments: MPIEXEC,
# MOECOMM, CLUSTER, SVG, TRACE.
file(REMOVE ${SVG} ${TRACE})
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} bench --cluster ${CLUSTER} --model tiny
          --ranks-per-node 2 --parallel tp=2 --warmup 0 --steps 2 --strategy baseline
          --strategy monta-o1 --json --svg ${SVG} --trace ${TRACE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "bench exited ${status}:\n${out}\n${err}")
endif()
string(JSON cases LENGTH "${out}" cases)
string(JSON first GET "${out}" cases 0 name)
string(JSON second GET "${out}" cases 1 strategy)
if(NOT cases EQUAL 2 OR NOT first STREQUAL "baseline" OR NOT second MATCHES "drop-allgather")
  message(FATAL_ERROR "expected baseline then MoNTA O1, got ${cases} cases: ${first}, ${second}")
endif()
foreach(i 0 1)
  foreach(side measured simulated)
    foreach(phase token_fwd_ms token_bwd_ms step_ms)
      string(JSON v GET "${out}" cases ${i} ${side} ${phase})
      if(NOT v GREATER 0)
        message(FATAL_ERROR "case ${i} ${side} ${phase} is ${v}, not positive")
      endif()
    endforeach()
  endforeach()
endforeach()
string(JSON base GET "${out}" cases 0 token_bytes inter_node)
string(JSON drop GET "${out}" cases 1 token_bytes inter_node)
math(EXPR twice "2 * ${drop}")
if(NOT twice EQUAL base)
  message(FATAL_ERROR "MoNTA O1 sent ${drop} inter-node token bytes, the baseline ${base}")
endif()
file(READ ${SVG} svg)
if(NOT svg MATCHES "<svg" OR NOT svg MATCHES "monta-o1")
  message(FATAL_ERROR "${SVG} is not the chart")
endif()
file(READ ${TRACE} trace)
foreach(want "baseline measured rank 3" "monta-o1 simulated rank 0" "\"moe[.]dispatch[.]a2a"
        "\"backward\"")
  if(NOT trace MATCHES "${want}")
    message(FATAL_ERROR "${TRACE} has no ${want}")
  endif()
endforeach()
string(JSON err0 GET "${out}" cases 0 error step)
message(STATUS "bench: inter-node token bytes ${base} -> ${drop}; baseline step error ${err0}")

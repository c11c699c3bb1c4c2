# `moecomm bench` on 4 ranks (2 logical nodes): the run executes the schedule
# the simulator prices, so the JSON sets every op label's measured time beside its simulated
# one: the MoE A2As of both phases, the experts, the head and the gradient AllReduces, each
# with both times positive and the op counts per step of the schedule (2 layers, 4 ranks,
# 2 chunks). Arguments: MPIEXEC, MOECOMM, CLUSTER.
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} bench --cluster ${CLUSTER} --model tiny
          --ranks-per-node 2 --warmup 0 --steps 2 --strategy base=lina,chunks=2
          --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "bench exited ${status}:\n${out}\n${err}")
endif()
string(JSON rows LENGTH "${out}" cases 0 ops)
set(seen "")
math(EXPR last "${rows} - 1")
foreach(i RANGE ${last})
  string(JSON label GET "${out}" cases 0 ops ${i} label)
  string(JSON phase GET "${out}" cases 0 ops ${i} phase)
  string(JSON count GET "${out}" cases 0 ops ${i} ops_per_step)
  string(JSON measured GET "${out}" cases 0 ops ${i} measured_ms)
  string(JSON simulated GET "${out}" cases 0 ops ${i} simulated_ms)
  if(NOT measured GREATER 0 OR NOT simulated GREATER 0)
    message(FATAL_ERROR "${label} ${phase}: measured ${measured} ms, simulated ${simulated} ms")
  endif()
  list(APPEND seen "${label}/${phase}=${count}")
endforeach()
foreach(want "moe.dispatch.a2a/forward=16" "moe.combine.a2a/backward=16"
        "moe.expert/forward=16" "head/backward=4" "grad.dense.allreduce/backward=8")
  list(FIND seen "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "no ${want} among the op rows: ${seen}")
  endif()
endforeach()
message(STATUS "bench --runtime schedule: ${seen}")

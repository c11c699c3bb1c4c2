# `moecomm train --strategy` runs a strategy under tensor parallelism with the knobs the
# planner chose for --cluster: the JSON names the strategy the run used and says
# where each planned knob came from. Arguments: MPIEXEC, MOECOMM, CLUSTER.
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} train --steps 3 --json --parallel tp=2
          --strategy fsmoe --cluster ${CLUSTER} --ranks-per-node 2 --routing-trace ""
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "train exited ${status}:\n${out}\n${err}")
endif()
string(JSON strategy GET "${out}" strategy)
if(NOT strategy MATCHES "tp_dispatch=drop-allgather" OR NOT strategy MATCHES "grad_sync=fsmoe")
  message(FATAL_ERROR "the run did not use FSMoE's knobs: ${strategy}")
endif()
string(JSON notes LENGTH "${out}" strategy_notes)
string(JSON note GET "${out}" strategy_notes 0)
if(notes LESS 2 OR NOT note MATCHES "FSMoE")
  message(FATAL_ERROR "expected the planner's notes on FSMoE's degrees, got ${notes}: ${note}")
endif()
string(JSON inter GET "${out}" steps 2 a2a_bytes inter_node)
message(STATUS "${strategy}: ${note}; inter-node token bytes ${inter}")

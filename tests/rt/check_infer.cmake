# `moecomm infer` on 4 ranks (issue 9): on a small synthetic skewed trace it prints the five
# variants and the estimation accuracy, and its JSON has the fields. Timing relations are not
# asserted (machines are noisy): only that every time is positive and Ideal's ratio is 1.
# Arguments: MPIEXEC, MOECOMM.
set(small --synthetic skew=1.5,layers=4,samples=4,tokens=32,iterations=10 --batch-samples 2)
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} infer ${small} --path-length 2
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "infer exited ${status}:\n${out}\n${err}")
endif()
message(STATUS "${out}")
foreach(part "baseline" "Lina w/o estimation" "Lina w/o fine-tuning" "Lina " "ideal"
        "estimation accuracy \\(path length 2\\): [0-9.]+%" "median/ideal" "load mean")
  if(NOT out MATCHES "${part}")
    message(FATAL_ERROR "the table lacks '${part}':\n${out}")
  endif()
endforeach()

execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} infer ${small} --path-length 1 --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "infer --json exited ${status}:\n${out}\n${err}")
endif()
string(JSON ranks GET "${out}" ranks)
string(JSON batches GET "${out}" batches)
string(JSON layers LENGTH "${out}" layers)
string(JSON accuracy GET "${out}" accuracy overall)
string(JSON estimates GET "${out}" accuracy estimates)
if(NOT ranks EQUAL 4 OR NOT layers EQUAL 3)
  message(FATAL_ERROR "expected 4 ranks and 3 scored MoE layers, got ${ranks} and ${layers}")
endif()
math(EXPR want "${batches} * 3")
if(NOT estimates EQUAL want)
  message(FATAL_ERROR "expected ${want} estimates (batches x layers), got ${estimates}")
endif()
foreach(v baseline lina_no_estimation lina_no_fine_tuning lina ideal)
  string(JSON med GET "${out}" overall ${v} median_ms)
  string(JSON p95 GET "${out}" overall ${v} p95_ms)
  string(JSON ratio GET "${out}" overall ${v} median_vs_ideal)
  string(JSON lmed GET "${out}" layers 0 time ${v} median_ms)
  if(med LESS_EQUAL 0 OR p95 LESS_EQUAL 0 OR lmed LESS_EQUAL 0 OR ratio LESS_EQUAL 0)
    message(FATAL_ERROR "${v}: times must be positive: ${med} ${p95} ${lmed} ${ratio}")
  endif()
  message(STATUS "${v}: median ${med} ms, p95 ${p95} ms, ${ratio} x ideal")
endforeach()
# Max/mean token-slots per rank: at least 1 for every variant, Ideal's routing balanced to
# one slot (32 x 2 slots of a batch over 16 experts: 4 per expert, 16 per rank, exactly 1).
foreach(v baseline lina_no_estimation lina_no_fine_tuning lina ideal)
  string(JSON load_mean GET "${out}" max_over_mean ${v} mean)
  string(JSON load_max GET "${out}" max_over_mean ${v} max)
  if(load_mean LESS 1 OR load_max LESS load_mean)
    message(FATAL_ERROR "${v}: max/mean load ${load_mean} (worst ${load_max}) is below 1")
  endif()
  message(STATUS "${v}: max/mean load ${load_mean}, worst ${load_max}")
endforeach()
string(JSON ideal_load GET "${out}" max_over_mean ideal max)
if(NOT ideal_load EQUAL 1)
  message(FATAL_ERROR "ideal's routing is balanced, yet its max/mean load is ${ideal_load}")
endif()
string(JSON ideal GET "${out}" overall ideal median_vs_ideal)
if(NOT ideal EQUAL 1)
  message(FATAL_ERROR "ideal's ratio to itself is ${ideal}")
endif()
string(JSON acc0 GET "${out}" layers 0 accuracy)
message(STATUS "estimation accuracy at l=1: ${accuracy} (layer 1: ${acc0})")

# One rank still works (P = 1: every plan is the one rank).
execute_process(COMMAND ${MPIEXEC} --oversubscribe -n 1 ${MOECOMM} infer ${small} --json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "infer on 1 rank exited ${status}:\n${out}\n${err}")
endif()
string(JSON ranks GET "${out}" ranks)
if(NOT ranks EQUAL 1)
  message(FATAL_ERROR "expected 1 rank, got ${ranks}")
endif()

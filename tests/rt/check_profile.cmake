# `moecomm profile` on 4 ranks, 2 per node (issue 7): the table has every level, collective
# and size; the cluster file it writes is accepted by `moecomm sim` and `moecomm plan`; the
# testbed's environment variables give the layout when the flags do not. Times are not
# asserted (machines are noisy), only that they are positive.
# Arguments: MPIEXEC, MOECOMM, OUT (a cluster file path), TABLE (a JSON path).
# Sizes from 256 KiB: below that, shared-memory times on a loaded 2-core machine are noise
# (the runtime polls every 20-200 us), and a fit of noise finds no bandwidth.
set(small --min-bytes 256KiB --max-bytes 16MiB --iters 8 --warmup 1 --gemm-size 64)
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} profile --ranks-per-node 2 ${small}
          --out ${OUT} --table-out ${TABLE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "profile exited ${status}:\n${out}\n${err}")
endif()
message(STATUS "${out}")
foreach(part "level +collective +ranks +size +time_us +algbw_GBps +busbw_GBps +algorithm"
        "node +alltoall +2 +1048576" "gpu +allreduce +2 +262144 .*ring"
        "bandwidth_GBps +latency_us +overhead_us +r_squared" "wrote ${OUT}")
  if(NOT out MATCHES "${part}")
    message(FATAL_ERROR "the output lacks '${part}':\n${out}")
  endif()
endforeach()
if(NOT err MATCHES "profile: gpu allreduce over 2 ranks done")
  message(FATAL_ERROR "no progress on stderr:\n${err}")
endif()

file(READ ${TABLE} table)
string(JSON levels LENGTH "${table}" levels)
string(JSON rows LENGTH "${table}" rows)
string(JSON level0 GET "${table}" levels 0 name)
if(NOT levels EQUAL 2 OR NOT rows EQUAL 32 OR NOT level0 STREQUAL "node")
  message(FATAL_ERROR "expected levels node and gpu and 2 x 4 x 4 rows, got ${levels} ${level0} ${rows}")
endif()
math(EXPR last "${rows} - 1")
foreach(i RANGE ${last})
  string(JSON t GET "${table}" rows ${i} time_us)
  string(JSON bus GET "${table}" rows ${i} busbw_GBps)
  if(t LESS_EQUAL 0 OR bus LESS_EQUAL 0)
    message(FATAL_ERROR "row ${i}: time ${t} us, busbw ${bus} GB/s must be positive")
  endif()
endforeach()

file(READ ${OUT} cluster)
string(JSON name GET "${cluster}" name)
string(JSON curve LENGTH "${cluster}" efficiency gpu alltoall)
if(NOT name STREQUAL "profiled-2x2" OR NOT curve EQUAL 4)
  message(FATAL_ERROR "expected cluster profiled-2x2 with 4 alltoall points, got ${name} ${curve}")
endif()
foreach(cmd "sim;--cluster;${OUT};--json" "plan;--cluster;${OUT};--json")
  execute_process(COMMAND ${MOECOMM} ${cmd} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "moecomm ${cmd} exited ${status}:\n${out}\n${err}")
  endif()
endforeach()

# The layout from the testbed's variables, and --json.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env MOECOMM_TESTBED_RANKS_PER_NODE=1 MOECOMM_TESTBED_NODES=4
          MOECOMM_TESTBED_DATACENTERS=2
          ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} profile ${small} --out ${OUT} --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "profile under the testbed's variables exited ${status}:\n${out}\n${err}")
endif()
string(JSON level0 GET "${out}" levels 0 name)
string(JSON level1 GET "${out}" levels 1 name)
string(JSON ranks1 GET "${out}" levels 1 ranks)
string(JSON file GET "${out}" cluster_file)
if(NOT level0 STREQUAL "datacenter" OR NOT level1 STREQUAL "node" OR NOT file STREQUAL OUT)
  message(FATAL_ERROR "expected levels datacenter, node and ${OUT}: ${level0} ${level1} ${file}")
endif()
message(STATUS "testbed layout: ${level0}, ${level1} over ranks ${ranks1}")
execute_process(COMMAND ${MOECOMM} sim --cluster ${OUT} --json OUTPUT_VARIABLE out
                ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "moecomm sim on the 2x2x1 file exited ${status}:\n${out}\n${err}")
endif()

# --model rates the device by the model's training step, each phase apart: the file's tflops
# and backward_tflops are those rates.
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -n 4 ${MOECOMM} profile --ranks-per-node 2 ${small}
          --model tiny --batch 2 --seq-len 16 --model-seconds 1 --out ${OUT} --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "profile --model exited ${status}:\n${out}\n${err}")
endif()
string(JSON step GET "${out}" device model_forward_tflops)
string(JSON step_bwd GET "${out}" device model_backward_tflops)
string(JSON tflops GET "${out}" device tflops)
string(JSON tflops_bwd GET "${out}" device backward_tflops)
file(READ ${OUT} cluster)
string(JSON written GET "${cluster}" device tflops)
string(JSON written_bwd GET "${cluster}" device backward_tflops)
# Compared as text: the values may be printed in e-notation, which if() does not read.
foreach(rate IN ITEMS "${step}" "${step_bwd}")
  if(rate MATCHES "^-" OR rate MATCHES "^0(\\.0*)?$")
    message(FATAL_ERROR "expected positive model step rates, got ${step} and ${step_bwd}")
  endif()
endforeach()
if(NOT tflops STREQUAL step OR NOT tflops_bwd STREQUAL step_bwd)
  message(FATAL_ERROR "expected the model step's rates as the device's, got forward ${step} "
                      "and ${tflops}, backward ${step_bwd} and ${tflops_bwd}")
endif()
message(STATUS "model step rates ${step} / ${step_bwd} TFLOP/s per rank (forward / backward), "
               "written ${written} / ${written_bwd}")

# The steps again beside background AllReduces: overlapped_compute_share = min(1, the measured
# ratio), in the cluster file when below 1.
string(JSON calls GET "${out}" device traffic_allreduces)
string(JSON share GET "${out}" device overlapped_compute_share)
string(JSON ratio GET "${out}" device overlapped_step_ratio)
string(JSON written_share ERROR_VARIABLE share_absent GET "${cluster}" device
       overlapped_compute_share)
if(NOT calls GREATER 0)
  message(FATAL_ERROR "expected background AllReduces beside the model steps, got ${calls}")
endif()
if(share STREQUAL "1.0")
  if(NOT share_absent OR ratio MATCHES "^0\\.")
    message(FATAL_ERROR "share 1 (ratio ${ratio}) but the cluster file has ${written_share}")
  endif()
elseif(NOT share MATCHES "^0\\.[0-9]" OR NOT share STREQUAL ratio OR NOT written_share STREQUAL share)
  message(FATAL_ERROR "expected a share in (0, 1) equal to the ratio and written, got ${share}, "
                      "ratio ${ratio}, written '${written_share}'")
endif()
message(STATUS "overlapped_compute_share ${share} (ratio ${ratio}, ${calls} AllReduces)")

# cmake -DMPIEXEC=... -DMOECOMM=... -DKILL_LIB=... -DCALL=<MPI function> -DNTH=<n>
#       -DOP=<regex of the op's label> -DTIMEOUT=<s> -P check_killed_rank.cmake
# `moecomm train` on 4 ranks where rank 3 dies of SIGKILL inside its NTH call to CALL
# (kill_in_call.cpp). Each of ranks 0-2 must exit with a timeout error naming the op OP it
# was waiting in, and mpirun must return non-zero, well within the test's time limit.
# Open MPI's mpirun kills the whole job as soon as a rank dies of a signal, before the other
# ranks can say anything; a launcher that loses a node does not. The test takes the second
# case, which the runtime must handle itself: rank 3 runs under a shell that outlives it (so
# mpirun sees an exit status, not a signal) and orte_abort_on_non_zero_status=0 keeps mpirun
# from ending the job on that status.
set(train train --steps 2000 --timeout ${TIMEOUT} --ranks-per-node 2)
# The preload comes before the ASan runtime of a sanitized build, which ASan refuses unless
# told not to check (the preload replaces no function ASan intercepts).
set(victim "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" LD_PRELOAD=\"$MOECOMM_KILL_LIB\" \"$@\"; exit $?")
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env MOECOMM_KILL_LIB=${KILL_LIB} MOECOMM_KILL_CALL=${CALL}
          MOECOMM_KILL_NTH=${NTH}
          ${MPIEXEC} --oversubscribe --mca orte_abort_on_non_zero_status 0
          -n 3 ${MOECOMM} ${train}
          : -n 1 sh -c "${victim}" rank3 ${MOECOMM} ${train}
  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc TIMEOUT 150)
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")
message("${out}")
if(NOT out MATCHES "kill_in_call: SIGKILL in ${CALL}")
  message(FATAL_ERROR "rank 3 was not killed in ${CALL} (exit status ${rc})")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "mpirun returned 0 after a rank died")
endif()
foreach(rank 0 1 2)
  if(NOT out MATCHES "error: rank ${rank}: timeout: ${OP}[^\n]* on rank ${rank} over group")
    message(FATAL_ERROR "rank ${rank} did not exit with a timeout naming ${OP}")
  endif()
endforeach()
message("exit status ${rc} after ${seconds} s; ranks 0-2 named the op: as required")

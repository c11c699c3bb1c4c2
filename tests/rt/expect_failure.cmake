# cmake -DMPIEXEC=... -DARGS=a;b;c -DREGEX=... [-DONCE=1] -P expect_failure.cmake
# Passes when the command exits non-zero and its output (stdout and stderr) matches REGEX:
# ctest's WILL_FAIL or PASS_REGULAR_EXPRESSION alone checks only one of the two. With ONCE,
# REGEX must match exactly once, the output must not hold MPI_Abort's banner and the exit
# status must be 2 (the CLI's status for bad input).
execute_process(COMMAND ${MPIEXEC} ${ARGS}
                OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc TIMEOUT 50)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit status, got 0")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "exit status ${rc}, but the output does not match: ${REGEX}")
endif()
if(ONCE)
  string(REGEX MATCHALL "${REGEX}" hits "${out}")
  list(LENGTH hits n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected the message once, got it ${n} times")
  endif()
  if(out MATCHES "MPI_ABORT")
    message(FATAL_ERROR "the job ended through MPI_Abort")
  endif()
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "expected exit status 2, got ${rc}")
  endif()
endif()
message("exit status ${rc} and the expected message: as required")

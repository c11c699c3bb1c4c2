# cmake -DMPIEXEC=... -DARGS=a;b;c -DREGEX=... -P expect_failure.cmake
# Passes when the command exits non-zero and its output (stdout and stderr) matches REGEX:
# ctest's WILL_FAIL or PASS_REGULAR_EXPRESSION alone checks only one of the two.
execute_process(COMMAND ${MPIEXEC} ${ARGS}
                OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc TIMEOUT 50)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit status, got 0")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "exit status ${rc}, but the output does not match: ${REGEX}")
endif()
message("exit status ${rc} and the expected message: as required")

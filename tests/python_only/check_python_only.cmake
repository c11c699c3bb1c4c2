# ctest python_only_configure: configures the source tree with -DMOECOMM_PYTHON_ONLY=ON in WORK
# and checks that it looked up none of the packages the Python extension does not link (MPI,
# CLI11, GTest, OpenBLAS, Google Benchmark) and defines the extension's target but neither the
# CLI, the runtime nor the tests. Run as
#   cmake -DSOURCE=<tree> -DWORK=<dir> -DPYTHON=<python3> -P check_python_only.cmake
file(REMOVE_RECURSE "${WORK}")
# Makefiles: their `help` target lists the targets as "... <name>".
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}" -G "Unix Makefiles"
                        -DMOECOMM_PYTHON_ONLY=ON "-DPython3_EXECUTABLE=${PYTHON}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring with -DMOECOMM_PYTHON_ONLY=ON failed:\n${out}")
endif()
file(READ "${WORK}/CMakeCache.txt" cache)
foreach(entry MPI_CXX_ CLI11_DIR GTest_DIR OPENBLAS_ benchmark_DIR)
  if(cache MATCHES "\n${entry}[A-Za-z_]*:")
    message(FATAL_ERROR "-DMOECOMM_PYTHON_ONLY=ON looked up ${entry}* (CMakeCache.txt in ${WORK})")
  endif()
endforeach()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK}" --target help
                RESULT_VARIABLE rc OUTPUT_VARIABLE targets ERROR_VARIABLE targets)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "listing the targets of ${WORK} failed:\n${targets}")
endif()
foreach(want moecomm_python _moecomm moecomm_place moecomm_infer)
  if(NOT targets MATCHES "\\.\\.\\. ${want}\n")
    message(FATAL_ERROR "-DMOECOMM_PYTHON_ONLY=ON has no target ${want}:\n${targets}")
  endif()
endforeach()
foreach(unwanted moecomm moecomm_cli moecomm_rt moecomm_nn test_core)
  if(targets MATCHES "\\.\\.\\. ${unwanted}\n")
    message(FATAL_ERROR "-DMOECOMM_PYTHON_ONLY=ON defines ${unwanted}, which it leaves out")
  endif()
endforeach()
message(STATUS "python-only configure: the extension's targets, no MPI, CLI11, GTest or OpenBLAS")

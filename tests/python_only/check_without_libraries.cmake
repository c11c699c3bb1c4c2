# ctest python_only_without_libraries: builds the Python extension as a GPU image without
# LEMON, CBC, NLopt, MPI and OpenBLAS would (-DMOECOMM_PYTHON_ONLY=ON with
# MOECOMM_WITHOUT=lemon;cbc;nlopt, MPI's lookup disabled) in WORK, checks that the configure
# looked none of them up and that no code of theirs is in the extension, then runs
# python/tests/without_libraries.py on it. WORK is kept between runs (an incremental build);
# LAUNCHER (ccache) and WERROR follow the enclosing build. It compiles at -O0 without debug
# information whatever the enclosing build's type: a cold build of this copy of the layers is
# most of CI's cost for it, and without inlining a type defined twice under one name (an ODR
# violation: plan::SimulatedStep once was) breaks at run time instead of hiding.
# Run as
#   cmake -DSOURCE=<tree> -DWORK=<dir> -DPYTHON=<python3> [-DLAUNCHER=ccache]
#         [-DWERROR=ON] [-DJOBS=2] -P check_without_libraries.cmake
if(NOT JOBS)
  cmake_host_system_information(RESULT JOBS QUERY NUMBER_OF_LOGICAL_CORES)
endif()
set(args -S "${SOURCE}" -B "${WORK}" -G "Unix Makefiles" -DMOECOMM_PYTHON_ONLY=ON
    "-DMOECOMM_WITHOUT=lemon\\;cbc\\;nlopt" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
    "-DPython3_EXECUTABLE=${PYTHON}")
if(LAUNCHER)
  list(APPEND args "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
endif()
list(APPEND args "-DCMAKE_BUILD_TYPE=Debug" "-DCMAKE_CXX_FLAGS_DEBUG=-O0")
if(WERROR)
  list(APPEND args "-DMOECOMM_WERROR=${WERROR}")
endif()
string(TIMESTAMP t0 "%s")
execute_process(COMMAND "${CMAKE_COMMAND}" ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring without LEMON, CBC and NLopt failed:\n${out}")
endif()
foreach(lib LEMON CBC NLOPT)
  if(NOT out MATCHES "moecomm: built without ${lib}: what needs it raises moecomm.Error")
    message(FATAL_ERROR "the configure did not report building without ${lib}:\n${out}")
  endif()
endforeach()
file(READ "${WORK}/CMakeCache.txt" cache)
foreach(entry lemon_DIR NLopt_DIR CBC_ PKG_CONFIG_EXECUTABLE MPI_CXX_ OPENBLAS_)
  if(cache MATCHES "\n${entry}[A-Za-z_]*:")
    message(FATAL_ERROR "the configure looked up ${entry}* (CMakeCache.txt in ${WORK})")
  endif()
endforeach()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK}" --target moecomm_python
                        --parallel ${JOBS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the extension without LEMON, CBC and NLopt failed:\n${out}")
endif()
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
message(STATUS "configured and built in ${seconds} s")

# No symbol of the libraries in the extension: their code was compiled out, not merely
# left unlinked (an extension may keep undefined symbols until it is imported).
file(GLOB ext "${WORK}/python/moecomm/_moecomm*.so")
execute_process(COMMAND nm -C ${ext} RESULT_VARIABLE rc OUTPUT_VARIABLE symbols
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -C ${ext} failed: ${err}")
endif()
foreach(pattern "lemon::" "nlopt" "CbcModel" "OsiClp" "Coin[A-Z]")
  if(symbols MATCHES "[^\n]*${pattern}[^\n]*")
    message(FATAL_ERROR "${ext} holds a symbol of a left-out library: ${CMAKE_MATCH_0}")
  endif()
endforeach()

execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${WORK}/python"
                        "MOECOMM_DATA_DIR=${SOURCE}/data"
                        PYTHONDONTWRITEBYTECODE=1
                        "${PYTHON}" "${SOURCE}/python/tests/without_libraries.py"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "python/tests/without_libraries.py failed (exit ${rc})")
endif()

# The two commands of the README: `make demo` and `make test`; CI adds `make fuzz-smoke`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DMOECOMM_WERROR=ON

# The parsers' libFuzzer harnesses (fuzz/, clang): `make fuzz` runs each FUZZ_SECONDS,
# `make fuzz-smoke` each FUZZ_SMOKE_SECONDS (what CI runs).
FUZZ_BUILD ?= build-fuzz
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 20

.PHONY: all deps configure build demo test test-sanitize test-asan test-tsan bench format clean \
        fuzz-build fuzz fuzz-smoke

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/moecomm plan

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# `make test-sanitize`: the suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan), then the threaded tests under ThreadSanitizer (build-tsan): the runtime's
# executor in one process and under mpirun, the nn and place layers' threads. Left out: the
# Python package (the python_test_* ctests, python_pip_install: a sanitized extension needs the
# sanitizer runtime preloaded into Debian's python3, which is not instrumented itself) and
# the install test (an outside project would have to link the sanitizer runtime too).
# Debian's clang compiles an instrumented file in about 60% of GCC 12's time; the layers at
# -O1 -g1 and the tests' own code at -O0 (CMakeLists.txt) keep both builds and their runs
# short enough for CI; line tables name the lines.
SAN_CXX ?= clang++
SAN_CMAKE_FLAGS = -DCMAKE_CXX_COMPILER=$(SAN_CXX) -DMOECOMM_PYTHON=OFF -DMOECOMM_BENCH=OFF \
                  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
SUPP = $(CURDIR)/scripts/sanitize
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1 \
           LSAN_OPTIONS=suppressions=$(SUPP)/lsan.supp:print_suppressions=0 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$(SUPP)/ubsan.supp
# history_size=7: the most TSan keeps, so that the earlier access of a report still has its
# stack (a report without one cannot match the Open MPI suppressions in tsan.supp).
TSAN_ENV = TSAN_OPTIONS=suppressions=$(SUPP)/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=7
TSAN_TARGETS = test_rt test_nn test_place

test-sanitize: test-asan test-tsan

test-asan: deps
	@cmake -S . -B build-asan $(SAN_CMAKE_FLAGS) -DMOECOMM_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS)

test-tsan: deps
	@cmake -S . -B build-tsan $(SAN_CMAKE_FLAGS) -DMOECOMM_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TARGETS)
	cd build-tsan && $(TSAN_ENV) ctest --output-on-failure -j $(JOBS) -L threaded

bench: build
	@for b in $(BUILD)/bench_*; do [ -x $$b ] && $$b; done

fuzz-build: deps
	@cmake -S . -B $(FUZZ_BUILD) -DMOECOMM_FUZZ=ON -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	@bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	@bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) build-asan build-tsan

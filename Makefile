# Setup, build, tests and demo. `make demo` and `make test` each do the whole setup on a
# fresh machine: .venv, build dependencies, cxlkit with its extras, then run.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-stamp
BUILD_STAMP := $(VENV)/.build-stamp
CBUILD := build/c
# scikit-build-core's tree (pyproject's build-dir, build/{wheel_tag}): `make build` builds the
# Python module, the library and the C tests in it, and `make ctest` runs them there.
PYBUILD := build/$(shell $(PY) -c 'import sys, sysconfig; v = "%d%d" % sys.version_info[:2]; \
  print(f"cp{v}-cp{v}-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
PYTEST_ARGS ?=
# torch==2.13.0: the CPU build this machine keeps on disk (any other version downloads GBs).
BUILD_DEPS := 'scikit-build-core>=0.10' 'nanobind>=2.4' ninja 'cmake>=3.18'
RUN_DEPS := numpy typer rich matplotlib pytest hypothesis torch==2.13.0 transformers accelerate

.PHONY: all venv deps build ctest ctest-asan pytest test demo clean test-vm test-engines bench
all: build

$(VPY):
	$(PY) -m venv $(VENV)

# pip runs one at a time in the venv (flock): `make test` runs its stages two at a time.
PIP := flock $(VENV)/.pip-lock $(VPY) -m pip

$(DEPS_STAMP): pyproject.toml Makefile | $(VPY)
	$(PIP) install --upgrade pip
	$(PIP) install $(BUILD_DEPS) $(RUN_DEPS)
	touch $@

deps: sysdeps $(DEPS_STAMP)

# ---- sysdeps: liburing-dev for native/aio's io_uring backend, tmux for the terminal-width
# tests. Installed only when missing, with apt-get where it exists and we are root; without
# them the build still works (native/aio falls back to its thread pool, those tests skip), so
# a failure here only warns. ----
.PHONY: sysdeps
sysdeps:
	@if ! command -v tmux >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && \
	  [ "$$(id -u)" = 0 ]; then (apt-get update && apt-get install -y tmux) || \
	  echo "warning: tmux not installed: the terminal-width tests skip"; fi
	@if ! dpkg -s liburing-dev >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update && apt-get install -y liburing-dev) || \
	      echo "warning: liburing-dev not installed: native/aio uses its thread pool"; \
	  else echo "warning: liburing-dev missing (apt-get install liburing-dev as root): native/aio uses its thread pool"; fi; \
	fi

# One build of a tree at a time (flock on the tree's lock): several shells may rebuild the
# same tree. The development build is a testing build (CXLKIT_TESTING: protocol mutations
# and crash points, which the suite uses) with the C tests; what users install from the
# package is a release build without either.
build: deps
	@mkdir -p build
	@echo "building cxlkit's C++ core and Python module: about 2 minutes the first time"
	@echo "on 2 cores (pip says 'still running...'); later builds redo only what changed"
	flock build/.lock $(VPY) -m pip install --no-build-isolation --no-deps \
	  --config-settings=cmake.define.CXLKIT_TESTING=ON \
	  --config-settings=cmake.define.CXLKIT_TESTS=ON -e '.[all]'
	touch $(BUILD_STAMP)

# The C tests (exit 77 = skip), built by `make build` against the library the Python module
# uses: one compile of the sources for both.
ctest: build
	ctest --test-dir $(PYBUILD) --output-on-failure

# The C tests again under AddressSanitizer + UBSan (the debug job of STYLE.md), in a tree of
# their own: the library without Python, which the release check builds too. After sysdeps:
# the library finds liburing when it configures.
ctest-asan: sysdeps
	@mkdir -p build
	flock build/.asan-lock sh -c 'cmake -S . -B build/asan -G Ninja -DCXLKIT_PYTHON=OFF \
	  -DCXLKIT_TESTING=ON -DCMAKE_BUILD_TYPE=Debug -DCXLKIT_SANITIZE=address,undefined >/dev/null && \
	  cmake --build build/asan $(SIDE_JOBS)'
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 ctest --test-dir build/asan --output-on-failure

# The release library as users get it: no test machinery in its code, symbols or strings.
# Compiled at -O0 (with Release's NDEBUG): which code, strings and exported symbols it holds
# is settled by the preprocessor and the symbol map, and -O3 only removes, so a clean -O0
# library means a clean -O3 one, for a third of the compile.
.PHONY: release-check
release-check: build
	@mkdir -p build
	flock build/.release-lock sh -c 'cmake -S . -B build/release -G Ninja -DCXLKIT_PYTHON=OFF \
	  -DCXLKIT_TESTS=OFF -DCXLKIT_TESTING=OFF -DCMAKE_BUILD_TYPE=Release \
	  "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG" >/dev/null && \
	  cmake --build build/release --target cxlkit $(SIDE_JOBS)'
	$(VPY) tests/release_check.py build/release/libcxlkit.so

# pytest exit code 5 means "no tests collected": not a failure of the suite. Under `make
# test` (without PYTEST_ARGS) the suite runs in two parts, one per job slot: PYTEST_SIDE (the
# docs, examples, demo and CLI tests, Python start-ups mostly) as pytest-side after the other
# slot's compiles and C tests, the rest here; the two parts are the whole suite, once.
PYTEST_SIDE := tests/meta tests/cli
PYTEST_SPLIT :=
pytest: build
	$(VPY) -m pytest -q $(PYTEST_ARGS) $(PYTEST_SPLIT) || [ $$? -eq 5 ]

.PHONY: pytest-side
pytest-side: build docs-sysdeps docs-deps
	$(VPY) -m pytest -q $(PYTEST_SIDE) || [ $$? -eq 5 ]

# `make test` runs two stages at a time: the build and then pytest, the longest stage, in
# one; the ASan and release compiles (from the start, beside the venv's install), the C
# tests, the simulator's run and pytest's side part in the other. Those two compiles run one compiler at a time there (SIDE_JOBS): on
# two cores the build and pytest, one process most of the time, keep a core, and on a loaded
# machine the compiles still get their share (a lower priority would starve them). Each
# stage's output is printed whole when it ends (--output-sync).
TEST_JOBS ?= 2
SIDE_JOBS :=
ifneq ($(filter test,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(TEST_JOBS) --output-sync=target
SIDE_JOBS := --parallel 1
# the docs build, ready once its packages are, waits for the package build: a job slot taken
# by it while the venv's install ends would hold the build back
docs: | build
ifeq ($(PYTEST_ARGS),)
PYTEST_SPLIT := $(PYTEST_SIDE:%=--ignore=%)
endif
endif
test: ctest-asan pytest release-check ctest

# said first: under -j2 each stage's lines are held until the stage ends
.PHONY: test-banner
test-banner:
	@echo "make test: two stages at a time; each prints its output when it ends (the build"
	@echo "and pytest take most of the time: about 1 and 4 minutes on 2 quiet cores)"
ifneq ($(filter test,$(MAKECMDGOALS)),)
deps: | test-banner
endif

# The benchmark scripts' full runs and every performance claim (ratios, rates, times): the
# bench-marked tests, out of `make test` (whose suite runs each script on tiny inputs). Their
# figures depend on the machine and its load: run it on a quiet machine.
bench: build
	$(VPY) -m pytest -q -m bench $(PYTEST_ARGS) || [ $$? -eq 5 ]

demo: build
	$(VENV)/bin/cxlkit demo

clean:
	rm -rf build $(VENV)/.build-stamp

-include tests/vm/vm.mk

# Heavy engines (vLLM, DeepSpeed, MPI) each live in an environment of their own, built by the
# targets of mk/<engine>.mk; each file appends its test target to ENGINE_TESTS.
ENGINE_TESTS :=
include $(wildcard mk/*.mk)
test-engines: $(ENGINE_TESTS)

# ---- pool, KV, ring, RPC and messaging suites again under the non-coherence simulator
# (docs/pool-format.md): every pool a test opens without naming a coherence is simulated,
# once per seed (more: make test-sim SIM_SEEDS="1 2 3"
# SIM_TESTS="tests/pool/test_pool*.py tests/kv/test_kv_*.py tests/msg/test_msg*.py tests/msg/test_rpc.py").
# tests/pool/test_coherence_sim.py (the mutation tests, seeds 1-3) runs in pytest already; ctest's
# rpc and ring run their cross-host cases under the simulator too.
SIM_SEEDS ?= 2
SIM_TESTS ?= tests/pool/test_pool.py tests/kv/test_kv_store.py tests/msg/test_msg_ring.py tests/msg/test_rpc.py \
  tests/msg/test_msg.py tests/msg/test_msg_rma.py tests/pool/test_pool_claims.py
test-sim: build
	for s in $(SIM_SEEDS); do $(VPY) -m pytest -q --coherence-sim --sim-seed $$s $(SIM_TESTS) \
	  || [ $$? -eq 5 ] || exit 1; done

test: test-sim

# pytest's side part, last in its slot (the stages before it there are shorter than pytest)
ifneq ($(PYTEST_SPLIT),)
test: pytest-side
endif

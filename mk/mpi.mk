# MPICH and Open MPI (Debian packages) for bench/osu: the OSU-style benchmarks built three
# ways (cxlkit's C API, MPICH's mpicc, Open MPI's mpicc) and the RPC benchmark. test-mpi runs
# every benchmark once at small sizes over every transport (cxlkit on a pool file, both MPIs
# over shared memory and over TCP loopback); each program checks the data it received and the
# run fails on any error. bench-osu is the full measurement (REPS rounds, medians, ratios).
# mpi4py-env puts mpi4py (PyPI's wheel runs on MPICH and Open MPI) in a folder of its own,
# build/mpi4py, apart from the core dependencies; test-mpi then runs
# tests/engines/test_msg_mpi4py.py (Comm.from_mpi4py under both launchers) with PYTHONPATH on it. If
# pip cannot install it, build/mpi4py.unavailable says why and that test skips saying so.
OSU_BIN := build/osu
OSU_SRC := bench/osu/osu.c bench/osu/xcore.c
OSU_OUT ?= build/osu/results
OSU_CFLAGS := -O2 -Wall -Wextra

MPI4PY_DIR := build/mpi4py
MPI4PY_VERSION := 4.1.2

.PHONY: mpi-deps osu-build test-mpi bench-osu mpi4py-env
mpi-deps:
	@if ! command -v mpicc.mpich >/dev/null 2>&1 || ! command -v mpicc.openmpi >/dev/null 2>&1; then \
	  apt-get update && apt-get install -y mpich libmpich-dev openmpi-bin libopenmpi-dev; fi
	@# real programs under the shim: Fortran (each MPI's mpif90 needs gfortran), NetPIPE
	@if ! command -v gfortran >/dev/null 2>&1 || ! command -v NPmpich2 >/dev/null 2>&1 || \
	  ! command -v NPopenmpi >/dev/null 2>&1; then \
	  apt-get update && apt-get install -y gfortran netpipe-mpich2 netpipe-openmpi; fi
	@# a real application: Debian's LAMMPS (lmp, built with Open MPI) and its examples, for
	@# bench-lammps (bench/lammps_netns.py) and tests/netns's LAMMPS check
	@if ! command -v lmp >/dev/null 2>&1 || [ ! -d /usr/share/lammps/examples ]; then \
	  apt-get update && apt-get install -y --no-install-recommends lammps lammps-examples; fi

osu-build: mpi-deps
	@mkdir -p build $(OSU_BIN)
	flock build/.lock sh -c 'cmake -S . -B $(CBUILD) -G Ninja -DCXLKIT_PYTHON=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build $(CBUILD) --target cxlkit'
	cc $(OSU_CFLAGS) -Iinclude $(OSU_SRC) bench/osu/be_cxk.c -L$(CBUILD) -lcxlkit \
	  -Wl,-rpath,$(CURDIR)/$(CBUILD) -o $(OSU_BIN)/osu_cxk
	cc $(OSU_CFLAGS) -Iinclude bench/osu/rpc_bench.c -L$(CBUILD) -lcxlkit \
	  -Wl,-rpath,$(CURDIR)/$(CBUILD) -o $(OSU_BIN)/rpc_bench
	cc $(OSU_CFLAGS) -Iinclude bench/osu/copyin.c -L$(CBUILD) -lcxlkit \
	  -Wl,-rpath,$(CURDIR)/$(CBUILD) -o $(OSU_BIN)/copyin
	mpicc.mpich $(OSU_CFLAGS) $(OSU_SRC) bench/osu/be_mpi.c -o $(OSU_BIN)/osu_mpich
	mpicc.openmpi $(OSU_CFLAGS) $(OSU_SRC) bench/osu/be_mpi.c -o $(OSU_BIN)/osu_ompi

# Debian's MPICH library is libmpich.so.12; mpi4py's MPICH flavour loads libmpi.so.12: a link
# in build/mpi4py-lib (the test puts it on LD_LIBRARY_PATH) bridges the two names.
$(MPI4PY_DIR)/.stamp: mk/mpi.mk | mpi-deps
	@mkdir -p build build/mpi4py-lib
	rm -rf $(MPI4PY_DIR) build/mpi4py.unavailable
	$(VPY) -m pip install --target $(MPI4PY_DIR) mpi4py==$(MPI4PY_VERSION) || \
	  echo "pip could not install mpi4py==$(MPI4PY_VERSION) (see the make log)" > build/mpi4py.unavailable
	lib=$$(ldconfig -p | awk '/libmpich\.so\.12 /{print $$NF; exit}'); \
	  if [ -n "$$lib" ]; then ln -sf "$$lib" build/mpi4py-lib/libmpi.so.12; fi
	touch $@

mpi4py-env: $(MPI4PY_DIR)/.stamp

test-mpi: osu-build mpi4py-env build
	rm -rf $(OSU_BIN)/check
	REPS=1 OSU_MAX=65536 OSU_ITERS=20 RPC_CALLS=2000 OSU_TIMEOUT=90 \
	  bench/osu/run.sh $(OSU_BIN)/check
	$(PY) bench/osu/summary.py $(OSU_BIN)/check --sizes 1,8,65536 --check
	CXLKIT_REQUIRE_MPI4PY=1 $(VPY) -m pytest -q -rs tests/engines/test_msg_mpi4py.py

bench-osu: osu-build
	bench/osu/run.sh $(OSU_OUT)
	$(PY) bench/osu/summary.py $(OSU_OUT)

ENGINE_TESTS += test-mpi

# ---- the PMPI shim, one build per MPI (their mpi.h differ: MPICH's handles are
# ints, Open MPI's pointers), next to libcxlkit.so (found through $ORIGIN):
#   LD_PRELOAD=$(CBUILD)/libcxlkit_mpi_mpich.so mpiexec.mpich -n N ./app
# test-mpi-shim runs tests/mpi/p2p_check.c under both MPIs with and without the shim (the
# transcripts must be the same) and every OSU-format benchmark unmodified under the shim,
# checking from the shim's counters that the pool route was taken; then
# tests/engines/test_mpi_shim_programs.py: a Fortran program, Debian's NetPIPE and mpi4py, unmodified,
# with and without the shim; and tests/msg/test_mpi_routes.py: routes per peer (one machine as
# several hosts through CXLKIT_MPI_HOSTS) and the shim of the other MPI refusing to run.
SHIM_SRC := $(wildcard native/mpi/*.c)
SHIM_CFLAGS := -O2 -g -Wall -Wextra -shared -fPIC -Iinclude -Inative
MPI_CHECK_CFLAGS := -O1 -g -Wall -Wextra -Wno-stringop-overflow
# (one-sided windows: tests/mpi/rma_check.c, built beside p2p_check and run the same way by
# tests/mpi/run_shim.sh, with the OSU put/get programs' windows checked on the pool)

.PHONY: mpi-shim test-mpi-shim
mpi-shim: mpi-deps
	@mkdir -p build
	flock build/.lock sh -c 'cmake -S . -B $(CBUILD) -G Ninja -DCXLKIT_PYTHON=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build $(CBUILD) --target cxlkit'
	mpicc.mpich $(SHIM_CFLAGS) $(SHIM_SRC) -L$(CBUILD) -lcxlkit -Wl,-rpath,'$$ORIGIN' \
	  -o $(CBUILD)/libcxlkit_mpi_mpich.so
	mpicc.openmpi $(SHIM_CFLAGS) $(SHIM_SRC) -L$(CBUILD) -lcxlkit -Wl,-rpath,'$$ORIGIN' \
	  -o $(CBUILD)/libcxlkit_mpi_openmpi.so
	mpicc.mpich $(MPI_CHECK_CFLAGS) tests/mpi/p2p_check.c -o $(CBUILD)/p2p_check_mpich
	mpicc.openmpi $(MPI_CHECK_CFLAGS) tests/mpi/p2p_check.c -o $(CBUILD)/p2p_check_openmpi
	mpicc.mpich $(MPI_CHECK_CFLAGS) tests/mpi/rma_check.c -o $(CBUILD)/rma_check_mpich
	mpicc.openmpi $(MPI_CHECK_CFLAGS) tests/mpi/rma_check.c -o $(CBUILD)/rma_check_openmpi
	mpicc.mpich $(MPI_CHECK_CFLAGS) tests/mpi/owed_check.c -o $(CBUILD)/owed_check_mpich
	mpicc.openmpi $(MPI_CHECK_CFLAGS) tests/mpi/owed_check.c -o $(CBUILD)/owed_check_openmpi

# The MPI-5 standard ABI: the mpich 5.x wheel ships libmpi_abi.so and mpi_abi.h (with its own
# mpiexec); the shim built against mpi_abi.h (a folder where mpi.h is mpi_abi.h) serves any
# program built for the ABI. If pip cannot install it, build/mpich-abi.unavailable says why
# and tests/engines/test_mpi_shim_programs.py's ABI test skips saying so.
MPICH_ABI_DIR := build/mpich-abi
MPICH_ABI_VERSION := 5.0.2

$(MPICH_ABI_DIR)/.stamp: mk/mpi.mk
	@mkdir -p build
	rm -rf $(MPICH_ABI_DIR) build/mpich-abi.unavailable
	$(VPY) -m pip install --no-deps --ignore-installed --prefix $(MPICH_ABI_DIR) \
	  mpich==$(MPICH_ABI_VERSION) || \
	  echo "pip could not install mpich==$(MPICH_ABI_VERSION) (see the make log)" > build/mpich-abi.unavailable
	mkdir -p $(MPICH_ABI_DIR)/abi-include
	ln -sf ../include/mpi_abi.h $(MPICH_ABI_DIR)/abi-include/mpi.h
	touch $@

.PHONY: mpi-shim-abi
mpi-shim-abi: $(MPICH_ABI_DIR)/.stamp
	@if [ -e $(MPICH_ABI_DIR)/include/mpi_abi.h ]; then \
	  flock build/.lock sh -c 'cmake -S . -B $(CBUILD) -G Ninja -DCXLKIT_PYTHON=OFF \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build $(CBUILD) --target cxlkit' && \
	  cc $(SHIM_CFLAGS) -I$(MPICH_ABI_DIR)/abi-include $(SHIM_SRC) -L$(CBUILD) -lcxlkit \
	    -Wl,-rpath,'$$ORIGIN' -o $(CBUILD)/libcxlkit_mpi_abi.so; fi

test-mpi-shim: mpi-shim mpi-shim-abi osu-build mpi4py-env build
	CBUILD=$(CBUILD) OSU_BIN=$(OSU_BIN) tests/mpi/run_shim.sh $(OSU_BIN)/shim-check
	CXLKIT_REQUIRE_MPI_PROGRAMS=1 $(VPY) -m pytest -q -rs tests/engines/test_mpi_shim_programs.py
	$(VPY) -m pytest -q -rs tests/msg/test_mpi_routes.py

ENGINE_TESTS += test-mpi-shim

# Hosts on this machine for real (tests/netns/rig.sh, root): network namespaces with their own
# hostnames joined by a veth pair (10.17.0.1, .2), mapping one pool file in /dev/shm; each MPI
# sees two nodes and talks TCP between them (docs/mpi-shim.md, "Two hosts on this machine").
#   make netns-up [NETNS_HOSTS=4]   2 hosts (one pod), or 4 on a bridge: two pods, two pools
#   make netns-down                 removes the rig's namespaces and nothing else
#   make test-netns                 tests/netns under a 2-host rig (brought up and down)
#   make test-netns-pods            the same under a 4-host rig: a job spanning two pods
#   make bench-netns                shim against the MPI's TCP across the two hosts (and the
#                                   oversubscribed one-host latency): build/netns/*.jsonl
#   make bench-lammps               LAMMPS's LJ melt (Debian's lmp, Open MPI; mpi-deps installs
#                                   it) across the two hosts, shim against TCP and against one
#                                   host's shared memory, and one host shim against plain:
#                                   build/netns/lammps/*.json (bench/lammps_netns.py)
# The test and bench targets take the rig down after them, also on Ctrl-C, unless it was up
# before (tests/netns/with_rig.sh).
NETNS_HOSTS ?= 2
NETNS_OUT ?= build/netns
NETNS_ROUNDS ?= 5

LAMMPS_ROUNDS ?= 5
LAMMPS_STEPS ?= 500

.PHONY: netns-up netns-down netns-progs test-netns test-netns-pods bench-netns bench-lammps
netns-up:
	tests/netns/rig.sh up $(NETNS_HOSTS)

netns-down:
	tests/netns/rig.sh down

test-netns: mpi-shim osu-build build
	tests/netns/with_rig.sh 2 env CXLKIT_REQUIRE_NETNS=2 $(VPY) -m pytest -q -rs -rP tests/netns

test-netns-pods: mpi-shim osu-build build
	tests/netns/with_rig.sh 4 env CXLKIT_REQUIRE_NETNS=4 $(VPY) -m pytest -q -rs -rP tests/netns

# the collective and idle-wait program of bench-netns (tests/mpi/netns_coll.c)
netns-progs: mpi-shim
	mpicc.mpich $(MPI_CHECK_CFLAGS) -O2 tests/mpi/netns_coll.c -o $(CBUILD)/netns_coll_mpich

bench-netns: mpi-shim osu-build netns-progs
	@mkdir -p $(NETNS_OUT)
	tests/netns/with_rig.sh 2 $(VPY) bench/netns.py --out $(NETNS_OUT) --rounds $(NETNS_ROUNDS)

bench-lammps: mpi-shim
	@mkdir -p $(NETNS_OUT)/lammps
	tests/netns/with_rig.sh 2 $(VPY) bench/lammps_netns.py --out $(NETNS_OUT)/lammps \
	  --rounds $(LAMMPS_ROUNDS) --steps $(LAMMPS_STEPS)

#!/bin/sh
# spin_ab.sh — the A/B runs behind docs/msg.md "Adaptive spin": ROUNDS
# interleaved rounds: rpc_bench 64 B (QD 1, QD 128, and 200 calls each after 2 ms of silence)
# for this library (new), BEFORE_RPC (rpc_bench on the previous library), this library with
# CXLKIT_MSG_SPIN_US=0, and TCP loopback; osu latency 8 B for new, BEFORE_OSU (osu_cxk on the
# previous library), MPICH and Open MPI over shared memory and over TCP loopback; with
# ONECPU=1 also osu bw 64 B and 1 MiB and latency 8 B, ranks free and both on CPU 0
# (taskset -c 0), new against BEFORE_OSU. Needs `make osu-build`. One line per run.
set -u
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=${OSU_BIN:-build/osu}
NEWR=$BIN/rpc_bench NEWO=$BIN/osu_cxk
OLDR=${BEFORE_RPC:?BEFORE_RPC: an rpc_bench built on the previous library}
OLDO=${BEFORE_OSU:?BEFORE_OSU: an osu_cxk built on the previous library}
OMPI="mpiexec.openmpi --allow-run-as-root --oversubscribe -n 2 --mca pml ob1"
r=1
while [ "$r" -le "${ROUNDS:-5}" ]; do
  echo "== round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
  for v in new before spin0 tcp; do
    case $v in new) c="$NEWR cxk";; before) c="$OLDR cxk";;
      spin0) c="env CXLKIT_MSG_SPIN_US=0 $NEWR cxk";; tcp) c="$NEWR tcp";; esac
    out=$(timeout 40 $c -n 10000 -g 2000 -G 200 2>&1 | awk '/^64 /{printf "qd%s %s us %s Mops/s; ", $2, $3, $4} /silence/{printf "gap median %s p90 %s", $10, $13}')
    echo "rpc $v: $out"
  done
  for v in new before mpich-shm ompi-shm mpich-tcp ompi-tcp; do
    case $v in
      new) c="env CXLKIT_SIZE=2 $NEWO";; before) c="env CXLKIT_SIZE=2 $OLDO";;
      mpich-shm) c="mpiexec.mpich -n 2 $BIN/osu_mpich";;
      ompi-shm) c="$OMPI --mca btl self,vader $BIN/osu_ompi";;
      mpich-tcp) c="env MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo mpiexec.mpich -n 2 $BIN/osu_mpich";;
      ompi-tcp) c="$OMPI --mca btl self,tcp --mca btl_tcp_if_include lo $BIN/osu_ompi";;
    esac
    echo "lat8 $v: $(timeout 40 $c latency -n 8 -m 8 -i 10000 2>&1 | awk '/^8 /{print $2}')"
  done
  [ "${ONECPU:-0}" = 1 ] && for v in new before new-cpu0 before-cpu0; do
    case $v in new) c="env CXLKIT_SIZE=2 $NEWO";; before) c="env CXLKIT_SIZE=2 $OLDO";;
      new-cpu0) c="taskset -c 0 env CXLKIT_SIZE=2 $NEWO";;
      before-cpu0) c="taskset -c 0 env CXLKIT_SIZE=2 $OLDO";; esac
    a=$(timeout 40 $c bw -n 64 -m 64 -i 1000 2>&1 | awk '/^64 /{print $2}')
    b=$(timeout 40 $c bw -n 1048576 -m 1048576 -i 50 2>&1 | awk '/^1048576 /{print $2}')
    l=$(timeout 40 $c latency -n 8 -m 8 -i 2000 2>&1 | awk '/^8 /{print $2}')
    echo "bw $v: 64B $a MB/s; 1MiB $b MB/s; lat8 $l us"
  done
  r=$((r + 1))
done

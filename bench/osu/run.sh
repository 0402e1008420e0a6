#!/bin/sh
# run.sh OUTDIR — every OSU-style benchmark of bench/osu over cxlkit (a pool file on
# /dev/shm), MPICH and Open MPI over their intra-node shared memory, and both over TCP
# loopback; then the RPC over cxlkit and over TCP loopback; REPS rounds, interleaved (each
# round runs every transport once), so the machine's load falls on all alike. 2 ranks
# (RANKS), as on the 2-core machine this was written on; the multi-pair benchmarks
# (multi_lat, mbw_mr) run MULTI_RANKS ranks (default 4: 2 pairs). bench/osu/summary.py
# OUTDIR prints the medians, spreads and the ratios.
set -u
OUT=${1:?usage: run.sh OUTDIR}
BIN=${OSU_BIN:-build/osu}
REPS=${REPS:-3}
RANKS=${RANKS:-2}
MULTI_RANKS=${MULTI_RANKS:-4}
ITERS=${OSU_ITERS:-1000}
MAX=${OSU_MAX:-8388608}
MIN=${OSU_MIN:-1}
BENCHES=${OSU_BENCHES:-"latency bw bibw multi_lat mbw_mr put_lat get_lat put_bw get_bw put_lat:pscw put_bw:pscw"}
RPC_CALLS=${RPC_CALLS:-100000}  # 0: no RPC runs
TRANSPORTS=${TRANSPORTS:-"cxk mpich-shm ompi-shm mpich-tcp ompi-tcp"}
TMO=${OSU_TIMEOUT:-600}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# transport name | command prefix | program
run_one() {  # transport bench rep
    t=$1 prog=${2%%:*} s=fence n=$RANKS
    case $2 in *:pscw) s=pscw ;; esac
    case $prog in multi_lat|mbw_mr) n=$MULTI_RANKS ;; esac
    OMPI="mpiexec.openmpi --allow-run-as-root --oversubscribe -n $n --mca pml ob1"
    f="$OUT/$t.$2.$3.txt"
    case $t in
    cxk) cmd="env CXLKIT_SIZE=$n $BIN/osu_cxk" ;;
    mpich-shm) cmd="mpiexec.mpich -n $n $BIN/osu_mpich" ;;
    mpich-tcp) cmd="env MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo mpiexec.mpich -n $n $BIN/osu_mpich" ;;
    ompi-shm) cmd="$OMPI --mca btl self,vader --mca osc sm,pt2pt $BIN/osu_ompi" ;;
    ompi-tcp) cmd="$OMPI --mca btl self,tcp --mca btl_tcp_if_include lo --mca osc pt2pt $BIN/osu_ompi" ;;
    esac
    echo "# command: $cmd $prog -n $MIN -m $MAX -i $ITERS -s $s" > "$f"
    timeout "$TMO" $cmd "$prog" -n "$MIN" -m "$MAX" -i "$ITERS" -s "$s" >> "$f" 2>&1 || echo "# exit status $?" >> "$f"
}
uptime > "$OUT/load.txt"
for rep in $(seq 1 "$REPS"); do
    "$BIN/osu_cxk" memcpy -n "$MIN" -m "$MAX" > "$OUT/memcpy.memcpy.$rep.txt" 2>&1
    for b in $BENCHES; do
        for t in $TRANSPORTS; do run_one "$t" "$b" "$rep"; done
    done
    [ "$RPC_CALLS" -gt 0 ] || { uptime >> "$OUT/load.txt"; continue; }
    for t in cxk tcp; do
        timeout "$TMO" "$BIN/rpc_bench" "$t" -n "$RPC_CALLS" > "$OUT/rpc-$t.rpc.$rep.txt" 2>&1
    done
    uptime >> "$OUT/load.txt"
done

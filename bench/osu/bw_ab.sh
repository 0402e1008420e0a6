#!/bin/sh
# bw_ab.sh bw|r5|rdv|latpool|none|onecpu|pair OUTDIR — the A/B runs behind docs/msg.md "Bandwidth" (r5: see its case below).
# bw: memcpy (both columns) at the start and the end, ROUNDS interleaved rounds of osu bw 64 KiB..4 MiB
# over cxlkit before (BEFORE=dir of an osu_cxk on the previous library) and now (OSU_BIN) and
# both MPIs' shared memory, then 8 B latency before/now. onecpu: the crossover anomaly, osu bw
# 64 B..4 KiB with both ranks free and both on CPU 0. pair: osu_cxk builds alone (VARIANTS),
# pinned and free, in rotating order. bench/osu/bw_ab_summary.py OUTDIR prints
# medians [min..max] and the ratios.
set -u
MODE=${1:?usage: bw_ab.sh bw|r5|rdv|latpool|none|onecpu|pair OUTDIR}; OUT=${2:?usage: bw_ab.sh bw|r5|rdv|latpool|none|onecpu|pair OUTDIR}
B=${BEFORE:-build/osu-before}; N=${OSU_BIN:-build/osu}; R=${ROUNDS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"; uptime > "$OUT/load.txt"
case $MODE in
bw)
    $N/osu_cxk memcpy -n 65536 -m 4194304 > $OUT/memcpy.txt
    for r in $(seq 1 $R); do
      CXLKIT_SIZE=2 timeout 60 $B/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/cxk-before.$r.txt 2>&1
      CXLKIT_SIZE=2 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/cxk-new.$r.txt 2>&1
      timeout 60 mpiexec.mpich -n 2 $N/osu_mpich bw -n 65536 -m 4194304 -i 1000 > $OUT/mpich-shm.$r.txt 2>&1
      timeout 60 mpiexec.openmpi --allow-run-as-root --oversubscribe -n 2 --mca pml ob1 --mca btl self,vader $N/osu_ompi bw -n 65536 -m 4194304 -i 1000 > $OUT/ompi-shm.$r.txt 2>&1
      uptime >> $OUT/load.txt
    done
    for r in $(seq 1 $R); do
      CXLKIT_SIZE=2 timeout 30 $B/osu_cxk latency -n 8 -m 8 -i 20000 > $OUT/lat-before.$r.txt 2>&1
      CXLKIT_SIZE=2 timeout 30 $N/osu_cxk latency -n 8 -m 8 -i 20000 > $OUT/lat-new.$r.txt 2>&1
    done
    $N/osu_cxk memcpy -n 65536 -m 4194304 > $OUT/memcpy2.txt
    uptime >> $OUT/load.txt
    ;;
r5)
    # ROUNDS interleaved rounds of memcpy's four columns (one thread out of / in
    # cache, two cores held / written; CXLKIT_SIZE=1: nothing else copies meanwhile) and osu
    # bw 64 KiB..4 MiB: cxlkit before (main's library), now from the
    # heap, now from pool memory (-b pool: one copy), now with non-temporal stores into the
    # rendezvous buffer (CXLKIT_MSG_RDV_NT=1) and with 64 KiB ready chunks
    # (CXLKIT_MSG_RDV_CHUNK), both MPIs' shared memory, and MPICH under the cxlkit shim with
    # MPI_Alloc_mem buffers; then 8 B latency and the RPC at QD 1, before and now; then
    # bench/osu/copyin three times (where a two-copy transport's time goes)
    SHIM=${SHIM:-build/c/libcxlkit_mpi_mpich.so}
    for r in $(seq 1 $R); do
      CXLKIT_SIZE=1 $N/osu_cxk memcpy -n 65536 -m 4194304 > $OUT/memcpy.$r.txt
      CXLKIT_SIZE=2 timeout 60 $B/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/cxk-before.$r.txt 2>&1
      CXLKIT_SIZE=2 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/cxk-new.$r.txt 2>&1
      CXLKIT_SIZE=2 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 -b pool > $OUT/cxk-pool.$r.txt 2>&1
      CXLKIT_SIZE=2 CXLKIT_MSG_RDV_NT=1 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/cxk-nt.$r.txt 2>&1
      CXLKIT_SIZE=2 CXLKIT_MSG_RDV_CHUNK=65536 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/cxk-c64k.$r.txt 2>&1
      timeout 60 mpiexec.mpich -n 2 $N/osu_mpich bw -n 65536 -m 4194304 -i 1000 > $OUT/mpich-shm.$r.txt 2>&1
      timeout 60 mpiexec.openmpi --allow-run-as-root --oversubscribe -n 2 --mca pml ob1 --mca btl self,vader $N/osu_ompi bw -n 65536 -m 4194304 -i 1000 > $OUT/ompi-shm.$r.txt 2>&1
      LD_PRELOAD=$PWD/$SHIM timeout 60 mpiexec.mpich -n 2 $N/osu_mpich bw -n 65536 -m 4194304 -i 1000 -b pool > $OUT/shim-pool.$r.txt 2>&1
      uptime >> $OUT/load.txt
    done
    for r in $(seq 1 $R); do
      CXLKIT_SIZE=2 timeout 30 $B/osu_cxk latency -n 8 -m 8 -i 20000 > $OUT/lat-before.$r.txt 2>&1
      CXLKIT_SIZE=2 timeout 30 $N/osu_cxk latency -n 8 -m 8 -i 20000 > $OUT/lat-new.$r.txt 2>&1
      timeout 60 $B/rpc_bench cxk -n 20000 -q 1 > $OUT/rpc-before.$r.txt 2>&1
      timeout 60 $N/rpc_bench cxk -n 20000 -q 1 > $OUT/rpc-new.$r.txt 2>&1
    done
    if [ -x $N/copyin ]; then for r in 1 2 3; do $N/copyin -r 128 > $OUT/copyin.$r.txt; done; fi
    uptime >> $OUT/load.txt
    ;;
rdv)
    # the rendezvous copy's switches alone, ROUNDS interleaved rounds (order rotating): now,
    # non-temporal stores into the pool buffer, 64 KiB ready chunks, both, pool memory (one
    # copy); osu bw 64 KiB..4 MiB, ranks free (BIND=core pins them), memcpy's columns each round
    V="new: nt:CXLKIT_MSG_RDV_NT=1 c64k:CXLKIT_MSG_RDV_CHUNK=65536 ntc64k:CXLKIT_MSG_RDV_NT=1,CXLKIT_MSG_RDV_CHUNK=65536 pool:"
    for r in $(seq 1 $R); do
      CXLKIT_SIZE=1 $N/osu_cxk memcpy -n 65536 -m 4194304 > $OUT/memcpy.$r.txt
      for v in $V; do
        name=${v%%:*}; envs=$(echo "${v#*:}" | tr , ' '); opt=""; [ $name = pool ] && opt="-b pool"
        env $envs CXLKIT_OSU_BIND=${BIND:-none} CXLKIT_SIZE=2 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 $opt > $OUT/cxk-$name.$r.txt 2>&1
      done
      V="${V#* } ${V%% *}"
      uptime >> $OUT/load.txt
    done
    ;;
latpool)
    # osu latency 8 KiB..4 MiB from the heap and from pool memory, ROUNDS alternating rounds
    for r in $(seq 1 $R); do
      CXLKIT_SIZE=2 timeout 60 $N/osu_cxk latency -n 8192 -m 4194304 -i 1000 > $OUT/lat-heap.$r.txt 2>&1
      CXLKIT_SIZE=2 timeout 60 $N/osu_cxk latency -n 8192 -m 4194304 -i 1000 -b pool > $OUT/lat-pool.$r.txt 2>&1
      uptime >> $OUT/load.txt
    done
    ;;
none)
    # pool coherence "none" (flush before publish, invalidate before read): cxlkit from the
    # heap and from pool memory, ROUNDS alternating rounds
    for r in $(seq 1 $R); do
      CXLKIT_COHERENCE=none CXLKIT_SIZE=2 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/none-heap.$r.txt 2>&1
      CXLKIT_COHERENCE=none CXLKIT_SIZE=2 timeout 60 $N/osu_cxk bw -n 65536 -m 4194304 -i 1000 -b pool > $OUT/none-pool.$r.txt 2>&1
      uptime >> $OUT/load.txt
    done
    ;;
onecpu)
    for r in $(seq 1 $R); do
      for pin in free onecpu; do
        T=""; [ $pin = onecpu ] && T="taskset -c 0"
        $T env CXLKIT_SIZE=2 CXLKIT_MSG_CELL_BYTES=65536 timeout 60 $N/osu_cxk bw -n 64 -m 4096 -i 2000 > $OUT/e64k-$pin.$r.txt 2>&1
        $T env CXLKIT_SIZE=2 CXLKIT_MSG_EAGER=1 timeout 60 $N/osu_cxk bw -n 64 -m 4096 -i 2000 > $OUT/r4k-$pin.$r.txt 2>&1
        $T timeout 60 mpiexec.mpich -n 2 -bind-to none $N/osu_mpich bw -n 64 -m 4096 -i 2000 > $OUT/mpich-$pin.$r.txt 2>&1
      done
      uptime >> $OUT/load.txt
    done
    ;;
pair)
    # osu_cxk builds alone (VARIANTS="name=bindir ...", default before and now), each pinned
    # (a core per rank) and free; the variants' order rotates from round to round
    V=${VARIANTS:-"before=$B new=$N"}
    for r in $(seq 1 $R); do
      for pin in core none; do
        for v in $V; do
          X=${v#*=}
          CXLKIT_OSU_BIND=$pin CXLKIT_SIZE=2 timeout 60 $X/osu_cxk bw -n 65536 -m 4194304 -i 1000 > $OUT/${v%%=*}-$pin.$r.txt 2>&1
        done
      done
      V="${V#* } ${V%% *}"
      uptime >> $OUT/load.txt
    done
    ;;
*) echo "usage: bw_ab.sh bw|r5|rdv|latpool|none|onecpu|pair OUTDIR" >&2; exit 2 ;;
esac

#!/bin/sh
# run_shim.sh OUTDIR — the PMPI shim against both MPIs (make test-mpi-shim builds what it runs):
#  1. tests/mpi/p2p_check.c with 3 and 4 ranks: native, under the shim, under the shim
#     switched off (CXLKIT_MPI=0) and with the world on MPI but its dup and split through the
#     pool (CXLKIT_MPI_COMMS=derived); the transcripts must be the same, and the shim's counters
#     (CXLKIT_MPI_STATS) must show every rank sending through the pool when it is on;
#  2. tests/mpi/rma_check.c (one-sided) the same way: native, under the shim, CXLKIT_MPI=0 and
#     CXLKIT_MPI_RMA=0 give one transcript; the RMA counters must show every rank's windows and
#     operations on the pool under the shim and none with the switches off; and under the shim
#     with RMA_CHECK_BEYOND=1 an access past a window's end must give MPI_ERR_RMA_RANGE (not run
#     natively: neither MPI checks the end of a window);
#  3. tests/mpi/owed_check.c (2 ranks): a rank entering a collective while it owes its peer a
#     FIN / ACK queued behind a full ring must still deliver it (the bibw hang), natively and
#     under the shim;
#  4. the OSU-format programs of bench/osu, unmodified, under the shim (each checks the data
#     it received; exit 3 on a wrong byte), point-to-point ones routed through the pool, the
#     put/get ones' windows too; bw and latency again with MPI_Alloc_mem buffers (-b pool):
#     the blocks on the pool and the large sends from them in one copy.
# The shim is preloaded on the launcher (LD_PRELOAD=... mpiexec ...), as a user would.
set -u
OUT=${1:?usage: run_shim.sh OUTDIR}
CB=${CBUILD:-build/c}
BIN=${OSU_BIN:-build/osu}
TMO=${SHIM_TIMEOUT:-120}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# every rank a host of its own, so each peer goes through the pool (on one real host every
# peer stays on the MPI's own path and the shim routes nothing; tests/msg/test_mpi_routes.py
# checks that and the mixed routes)
export CXLKIT_MPI_HOSTS=${CXLKIT_MPI_HOSTS:-rank}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

launch() {  # mpi nranks -> the launcher command
    case $1 in
    mpich) echo "mpiexec.mpich -n $2" ;;
    openmpi) echo "mpiexec.openmpi --oversubscribe -n $2 --mca pml ob1 --mca btl self,vader" ;;
    esac
}

# Open MPI 4.1's default one-sided component (osc rdma over vader) crashes natively in
# MPI_Compare_and_swap (mca_btl_vader_emu_acswap); bench/osu/run.sh picks sm,pt2pt too
launch_rma() {
    case $1 in
    mpich) launch mpich "$2" ;;
    openmpi) echo "$(launch openmpi "$2") --mca osc sm,pt2pt" ;;
    esac
}

# pool windows and operations of every rank from the RMA counters' lines
rma_routed() {  # file nranks
    k=$(grep -c "cxlkit-mpi: rank [0-9]*: rma: pool [1-9][0-9]* windows, [1-9][0-9]* puts" "$1")
    [ "$k" -eq "$2" ]
}

# pool sends of every rank from the counters' lines: fails unless all are > 0
routed() {  # file nranks
    k=$(grep -c "cxlkit-mpi: rank [0-9]*: on: pool [1-9][0-9]* sends" "$1")
    [ "$k" -eq "$2" ]  # k, not n: the callers loop over n
}

for mpi in mpich openmpi; do
    shim=$(pwd)/$CB/libcxlkit_mpi_$mpi.so
    prog=$CB/p2p_check_$mpi
    osu=$BIN/osu_$( [ $mpi = mpich ] && echo mpich || echo ompi )
    for n in 3 4; do
        base="$OUT/$mpi.n$n"
        timeout "$TMO" $(launch $mpi $n) "$prog" > "$base.native.txt" 2> "$base.native.err" ||
            fail "$mpi n=$n native p2p_check (see $base.native.err)"
        env LD_PRELOAD="$shim" CXLKIT_MPI_STATS=1 CXLKIT_MPI_VERBOSE=1 timeout "$TMO" \
            $(launch $mpi $n) "$prog" > "$base.shim.txt" 2> "$base.shim.err" ||
            fail "$mpi n=$n p2p_check under the shim (see $base.shim.err)"
        cmp -s "$base.native.txt" "$base.shim.txt" ||
            fail "$mpi n=$n: transcripts differ: diff $base.native.txt $base.shim.txt"
        routed "$base.shim.err" "$n" || fail "$mpi n=$n: not every rank sent through the pool"
        grep -q "cxlkit-mpi: on: " "$base.shim.err" || fail "$mpi n=$n: no banner on rank 0"
        env LD_PRELOAD="$shim" CXLKIT_MPI=0 CXLKIT_MPI_STATS=1 timeout "$TMO" \
            $(launch $mpi $n) "$prog" > "$base.off.txt" 2> "$base.off.err" ||
            fail "$mpi n=$n p2p_check with CXLKIT_MPI=0 (see $base.off.err)"
        cmp -s "$base.native.txt" "$base.off.txt" || fail "$mpi n=$n: CXLKIT_MPI=0 transcript differs"
        [ "$(grep -c ': off: pool 0 sends' "$base.off.err")" -eq "$n" ] ||
            fail "$mpi n=$n: CXLKIT_MPI=0 still routed through the pool"
        # world on MPI, its dup and split through the pool: both routes in one program
        env LD_PRELOAD="$shim" CXLKIT_MPI_COMMS=derived CXLKIT_MPI_STATS=1 timeout "$TMO" \
            $(launch $mpi $n) "$prog" > "$base.derived.txt" 2> "$base.derived.err" ||
            fail "$mpi n=$n p2p_check with CXLKIT_MPI_COMMS=derived (see $base.derived.err)"
        cmp -s "$base.native.txt" "$base.derived.txt" ||
            fail "$mpi n=$n: CXLKIT_MPI_COMMS=derived transcript differs"
        routed "$base.derived.err" "$n" || fail "$mpi n=$n: derived comms not through the pool"
    done
    rprog=$CB/rma_check_$mpi
    for n in 2 4; do
        base="$OUT/$mpi.rma.n$n"
        timeout "$TMO" $(launch_rma $mpi $n) "$rprog" > "$base.native.txt" 2> "$base.native.err" ||
            fail "$mpi n=$n native rma_check (see $base.native.err)"
        env LD_PRELOAD="$shim" CXLKIT_MPI_STATS=1 timeout "$TMO" \
            $(launch_rma $mpi $n) "$rprog" > "$base.shim.txt" 2> "$base.shim.err" ||
            fail "$mpi n=$n rma_check under the shim (see $base.shim.err)"
        cmp -s "$base.native.txt" "$base.shim.txt" ||
            fail "$mpi n=$n: rma transcripts differ: diff $base.native.txt $base.shim.txt"
        rma_routed "$base.shim.err" "$n" || fail "$mpi n=$n: not every rank's windows on the pool"
        for sw in CXLKIT_MPI=0 CXLKIT_MPI_RMA=0; do
            env LD_PRELOAD="$shim" "$sw" CXLKIT_MPI_STATS=1 timeout "$TMO" \
                $(launch_rma $mpi $n) "$rprog" > "$base.$sw.txt" 2> "$base.$sw.err" ||
                fail "$mpi n=$n rma_check with $sw (see $base.$sw.err)"
            cmp -s "$base.native.txt" "$base.$sw.txt" || fail "$mpi n=$n: $sw rma transcript differs"
            [ "$(grep -c ': rma: pool 0 windows, 0 puts' "$base.$sw.err")" -eq "$n" ] ||
                fail "$mpi n=$n: $sw still put windows on the pool"
        done
        env LD_PRELOAD="$shim" RMA_CHECK_BEYOND=1 timeout "$TMO" \
            $(launch_rma $mpi $n) "$rprog" > "$base.beyond.txt" 2> "$base.beyond.err" ||
            fail "$mpi n=$n rma_check RMA_CHECK_BEYOND=1 under the shim (see $base.beyond.err)"
        grep -q "^out of range: put of 4 ints at 62 of 64: MPI_ERR_RMA_RANGE; get at 64: MPI_ERR_RMA_RANGE$" \
            "$base.beyond.txt" || fail "$mpi n=$n: no MPI_ERR_RMA_RANGE past a window's end"
    done
    # a rank that owes its peer a FIN / ACK (ring full) when it enters a collective (the
    # bibw hang): natively and under the shim; the program exits 2 when a rank is stuck
    f="$OUT/$mpi.owed"
    timeout "$TMO" $(launch $mpi 2) "$CB/owed_check_$mpi" > "$f.native.txt" 2>&1 ||
        fail "$mpi: native owed_check (see $f.native.txt)"
    env LD_PRELOAD="$shim" CXLKIT_MPI_STATS=1 timeout "$TMO" $(launch $mpi 2) \
        "$CB/owed_check_$mpi" > "$f.shim.txt" 2>&1 || fail "$mpi: owed_check under the shim (see $f.shim.txt)"
    # not anchored: mpiexec merges rank 0's stdout with rank 1's stderr as they come, and a
    # make test-mpi-shim run got "owed: ok" with rank 1's counters line glued to its end
    grep -q "owed: ok" "$f.shim.txt" && routed "$f.shim.txt" 2 ||
        fail "$mpi: owed_check under the shim did not finish through the pool (see $f.shim.txt)"
    for b in latency bw bibw multi_lat put_lat get_lat put_bw get_bw; do
        f="$OUT/$mpi.osu.$b.txt"
        env LD_PRELOAD="$shim" CXLKIT_MPI_STATS=1 timeout "$TMO" $(launch $mpi 2) \
            "$osu" "$b" -m "${OSU_MAX:-65536}" -i "${OSU_ITERS:-20}" > "$f" 2>&1 ||
            fail "$mpi: $b under the shim (see $f)"
        grep -q "^# OSU MPI" "$f" || fail "$mpi: $b printed no OSU table (see $f)"
        case $b in
        put_*|get_*)  # rank 0 is the origin, rank 1 the target
            [ "$(grep -c ': rma: pool 1 windows, ' "$f")" -eq 2 ] &&
                grep -q "rank 0: rma: pool 1 windows, .*[1-9][0-9]* ${b%_*}s [1-9]" "$f" ||
                fail "$mpi: $b's window not on the pool" ;;
        *) routed "$f" 2 || fail "$mpi: $b did not use the pool" ;;
        esac
    done
    # MPI_Alloc_mem under the shim: osu bw and latency with their
    # buffers from MPI_Alloc_mem (-b pool), unmodified: the blocks come from the pool and the
    # sends above the eager limit from them travel in one copy (the data is checked)
    for b in bw latency; do
        f="$OUT/$mpi.osu.$b.allocmem.txt"
        env LD_PRELOAD="$shim" CXLKIT_MPI_STATS=1 timeout "$TMO" $(launch $mpi 2) \
            "$osu" "$b" -n 65536 -m 262144 -i "${OSU_ITERS:-20}" -b pool > "$f" 2>&1 ||
            fail "$mpi: $b -b pool under the shim (see $f)"
        [ "$(grep -c ': pool memory: 2 MPI_Alloc_mem blocks (0 from the MPI' "$f")" -eq 2 ] &&
            grep -q "rank 0: pool memory: .* [1-9][0-9]* one-copy sends" "$f" ||
            fail "$mpi: $b -b pool: MPI_Alloc_mem not from the pool or no one-copy send (see $f)"
    done
done
[ "$fails" -eq 0 ] && echo "run_shim: all passed ($OUT)"
exit "$fails"

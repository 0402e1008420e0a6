#!/bin/sh
# ab_runs.sh wait|policy|rpc|crossover|eager|eager-lat — the A/B runs behind docs/msg.md "Waiting" and "Eager or
# rendezvous", each through bench/osu/ab.py (interleaved rounds, one JSON line per run and
# per size). CXK is the osu_cxk to measure, BEFORE one built on the previous library (wait
# only); BIND=core pins every rank to a core of its own (osu_cxk: CXLKIT_OSU_BIND, the MPIs:
# their launchers' binding), BIND=none leaves it to the scheduler. COH=host|none picks the
# pool's coherence mode (eager).
set -eu
CXK=${CXK:-build/osu/osu_cxk}
BIN=${OSU_BIN:-build/osu}
ROUNDS=${ROUNDS:-5}
# LOAD=N: N busy loops at nice 0, each in a session of its own (so in its own autogroup, as
# another user's job would be), running for the whole A/B and ended by their pids at exit.
LOAD=${LOAD:-0}
LOADPIDS=""
i=0
while [ "$i" -lt "$LOAD" ]; do
    python3 -c 'import os
os.setsid()
while True: pass' &
    LOADPIDS="$LOADPIDS $!"
    i=$((i + 1))
done
trap '[ -z "$LOADPIDS" ] || kill $LOADPIDS 2>/dev/null' EXIT INT TERM
[ "$LOAD" -eq 0 ] || echo "{\"background_busy_loops\": $LOAD}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case ${1:?usage: ab_runs.sh wait|policy|rpc|crossover|eager|eager-lat} in
wait)
    B=${BIND:-none}
    if [ "$B" = core ]; then MB="-bind-to core"; OB="--bind-to core"; else MB=""; OB="--bind-to none"; fi
    O="mpiexec.openmpi --allow-run-as-root -n 2 --mca pml ob1 --mca btl self,vader $OB"
    E="env CXLKIT_OSU_BIND=$B"
    python3 bench/osu/ab.py --rounds "$ROUNDS" -m 64 -i 20000 \
      --variant "before=$E ${BEFORE:?BEFORE: an osu_cxk on the previous library}" \
      --variant "spin0=$E CXLKIT_MSG_SPIN_US=0 $CXK" \
      --variant "spin5=$E CXLKIT_MSG_SPIN_US=5 $CXK" \
      --variant "spin50=$E CXLKIT_MSG_SPIN_US=50 $CXK" \
      --variant "spin1000=$E CXLKIT_MSG_SPIN_US=1000 $CXK" \
      --variant "forever=$E CXLKIT_MSG_SPIN_US=forever $CXK" \
      --variant "mpich-shm=mpiexec.mpich -n 2 $MB $BIN/osu_mpich" \
      --variant "ompi-shm=$O $BIN/osu_ompi" ;;
policy)
    # the wait policies side by side with both MPIs' shared memory (as shipped: they poll
    # without end), under LOAD busy loops: before = an osu_cxk on the library before issue
    # 14's third round (spin 50 us, yield 2 ms, sleep 50 us), default = the library's policy
    # now, spinN = it with CXLKIT_MSG_SPIN_US=N, spin-forever never leaves the spin.
    O="mpiexec.openmpi --allow-run-as-root -n 2 --mca pml ob1 --mca btl self,vader --bind-to none"
    python3 bench/osu/ab.py --bench "${BENCH:-latency}" --rounds "$ROUNDS" -m "${MAX:-8}" -i "${ITERS:-20000}" \
      --variant "default=$CXK" \
      ${BEFORE:+--variant "before=$BEFORE"} \
      --variant "spin50=env CXLKIT_MSG_SPIN_US=50 $CXK" \
      --variant "spin1000=env CXLKIT_MSG_SPIN_US=1000 $CXK" \
      --variant "spin-forever=env CXLKIT_MSG_SPIN_US=forever $CXK" \
      --variant "mpich-shm=mpiexec.mpich -n 2 $BIN/osu_mpich" \
      --variant "ompi-shm=$O $BIN/osu_ompi" ;;
rpc)
    # rpc_bench (64 B, QD 1 and 128) in interleaved rounds: default = the library's wait
    # policy now, before = rpc_bench on the previous library (BEFORE_RPC), nowake = the
    # library now with its same-host wake-up off (CXLKIT_MSG_WAKE_US=0: timed sleeps),
    # spinN = the library now with CXLKIT_MSG_SPIN_US=N for each N in SPINS, tcp = TCP
    # loopback; one line per run: round, variant, then the table's QD rows.
    RB=${BIN}/rpc_bench
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        echo "{\"round\": $r, \"loadavg\": \"$(cut -d' ' -f1 /proc/loadavg)\"}"
        for v in default ${BEFORE_RPC:+before} nowake $(for s in ${SPINS:-}; do echo "spin$s"; done) tcp; do
            case $v in
            default) c="$RB cxk" ;;
            before) c="$BEFORE_RPC cxk" ;;
            nowake) c="env CXLKIT_MSG_WAKE_US=0 $RB cxk" ;;
            spin*) c="env CXLKIT_MSG_SPIN_US=${v#spin} $RB cxk" ;;
            tcp) c="$RB tcp" ;;
            esac
            out=$(timeout 120 $c -n "${CALLS:-20000}" 2>&1 | awk '/^64 /{printf "%s qd%s %s us %s Mops/s; ", "", $2, $3, $4}')
            echo "round $r $v: $out"
        done
        r=$((r + 1))
    done ;;
crossover)
    # eager against rendezvous for ring cells of 1, 4, 16 and 64 KiB (64 cells each):
    # eC sends every size that fits (31 cells' payload) eagerly, rC everything by
    # rendezvous; where rC overtakes eC is the crossover for cells of C bytes (COH: the
    # pool's coherence mode).
    E="env CXLKIT_COHERENCE=${COH:-host} CXLKIT_POOL_MB=384 CXLKIT_MSG_CELLS=64"
    set --
    for c in 1024 4096 16384 65536; do
        set -- "$@" --variant "e$((c / 1024))k=$E CXLKIT_MSG_CELL_BYTES=$c CXLKIT_MSG_EAGER=$((31 * (c - 64))) $CXK" \
                    --variant "r$((c / 1024))k=$E CXLKIT_MSG_CELL_BYTES=$c CXLKIT_MSG_EAGER=1 $CXK"
    done
    python3 bench/osu/ab.py --bench "${BENCH:-bw}" --rounds "$ROUNDS" -m "${MAX:-131072}" -i "${ITERS:-200}" "$@" ;;
eager)
    E="env CXLKIT_COHERENCE=${COH:-host} CXLKIT_POOL_MB=384"
    BIG="CXLKIT_MSG_CELL_BYTES=65536 CXLKIT_MSG_CELLS=512"
    python3 bench/osu/ab.py --bench bw --rounds "$ROUNDS" -m 8388608 -i 200 \
      --variant "auto=$E CXLKIT_MSG_EAGER=65536 $CXK" \
      --variant "rdv=$E CXLKIT_MSG_EAGER=1 $CXK" \
      --variant "eager-big=$E $BIG CXLKIT_MSG_EAGER=8388608 $CXK" \
      --variant "rdv-big=$E $BIG CXLKIT_MSG_EAGER=1 $CXK" ;;
eager-lat)
    python3 bench/osu/ab.py --bench latency --rounds "$ROUNDS" -m 131072 -i 2000 \
      --variant "auto=env CXLKIT_MSG_EAGER=65536 $CXK" \
      --variant "rdv=env CXLKIT_MSG_EAGER=1 $CXK" \
      --variant "eager-max=env CXLKIT_MSG_EAGER=130512 $CXK" ;;
*) echo "usage: ab_runs.sh wait|policy|rpc|crossover|eager|eager-lat" >&2; exit 2 ;;
esac

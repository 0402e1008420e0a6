#!/bin/sh
# rig.sh — hosts on this machine for real: network namespaces with their own hostnames (a UTS
# namespace each), talking TCP to each other, the hosts of one pod mapping one pool file in
# their /dev/shm (docs/mpi-shim.md, "Two hosts on this machine"). Pod 0's hosts see the
# machine's /dev/shm; pod 1's hosts have a mount namespace each whose /dev/shm is pod 1's own
# folder, so one pool path names a different pool in each pod. Pod 0 keeps the machine's
# mounts because a launcher on host 0 starts that host's ranks itself (Hydra and Open MPI
# fork local ranks), and the namespace files of later hosts are visible only there. Root only.
#   rig.sh up [2|4]     2: hosts h0 h1 (one pod) joined by a veth pair;
#                       4: hosts h0..h3 on a bridge, pods {h0,h1} and {h2,h3} (two pools)
#   rig.sh down         removes this rig's namespaces, links and pod folders, nothing else
#   rig.sh exec I CMD   runs CMD on host I (0..3)
#   rig.sh status       the hosts that are up, one line each: index name address pod
# NETNS_PREFIX (default cxk) names everything: ${P}-h0.. (ip netns), hostnames ${P}h0..,
# /run/${P}-netns (the namespace files), /dev/shm/${P}-netns/pod1 (pod 1's /dev/shm).
# Addresses are the project's test hosts' (tests/vm/rig.py: 10.17.0.1, .2, then .3, .4); the
# links live inside the namespaces only, so the machine's own network is never touched.
# Idempotent: `up` over a rig that is up checks it and returns; a namespace of the rig's names
# that the rig did not make (no marker file) is refused, never reused or removed.
set -eu
P=${NETNS_PREFIX:-cxk}
case $P in *[!a-z0-9]*|'') echo "rig.sh: NETNS_PREFIX=$P: expected lowercase letters and digits" >&2; exit 2;; esac
RUN=/run/$P-netns
SHM=/dev/shm/$P-netns
NETNS=/run/netns
IFACE=$P"0"          # each host's interface to the others

addr() { echo "10.17.0.$(($1 + 1))"; }
pod_of() { echo $(($1 / 2)); }

die() { echo "rig.sh: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (network and mount namespaces); run it as root"; }

nhosts_up() {  # how many hosts the marker says were made (0: none)
    [ -f "$RUN/hosts" ] && cat "$RUN/hosts" || echo 0
}

# A namespace of our name that has no marker of ours is someone else's: refuse.
check_free() {
    for i in 0 1 2 3; do
        if [ -e "$NETNS/$P-h$i" ] && [ ! -f "$RUN/h$i.made" ]; then
            die "network namespace $P-h$i exists but this rig did not make it; pick another NETNS_PREFIX or remove it yourself (ip netns del $P-h$i)"
        fi
    done
    if [ -e "$NETNS/$P-sw" ] && [ ! -f "$RUN/sw.made" ]; then
        die "network namespace $P-sw exists but this rig did not make it; pick another NETNS_PREFIX"
    fi
}

in_host() {  # index, command...: run in host index's namespaces
    i=$1; shift
    [ -f "$RUN/h$i.made" ] || die "host $i is not up; run: make netns-up"
    if [ -f "$RUN/h$i.mnt" ]; then
        exec nsenter --net="$NETNS/$P-h$i" --uts="$RUN/h$i.uts" --mount="$RUN/h$i.mnt" \
            --wd="$(pwd)" -- "$@"
    fi
    exec nsenter --net="$NETNS/$P-h$i" --uts="$RUN/h$i.uts" -- "$@"
}

make_host() {  # index: namespaces, hostname, /dev/shm of its pod, lo up
    i=$1
    pod=$(pod_of "$i")
    ip netns add "$P-h$i"
    touch "$RUN/h$i.made" "$RUN/h$i.uts"
    if [ "$pod" = 0 ]; then
        unshare --uts="$RUN/h$i.uts" hostname "$P""h$i"
    else
        mkdir -p "$SHM/pod$pod"
        chmod 1777 "$SHM/pod$pod"
        touch "$RUN/h$i.mnt"
        unshare --uts="$RUN/h$i.uts" --mount="$RUN/h$i.mnt" --propagation private \
            sh -c "hostname $P""h$i && mount --bind '$SHM/pod$pod' /dev/shm"
    fi
    ip -n "$P-h$i" link set lo up
}

link_two() {  # a veth pair between h0 and h1
    ip link add "$P-a" type veth peer name "$P-b"
    ip link set "$P-a" netns "$P-h0"
    ip link set "$P-b" netns "$P-h1"
    for i in 0 1; do
        end=$( [ "$i" = 0 ] && echo "$P-a" || echo "$P-b" )
        ip -n "$P-h$i" link set "$end" name "$IFACE"
    done
}

link_bridge() {  # h0..h3 on a bridge in namespace ${P}-sw
    ip netns add "$P-sw"
    touch "$RUN/sw.made"
    ip -n "$P-sw" link add br0 type bridge
    ip -n "$P-sw" link set br0 up
    for i in 0 1 2 3; do
        ip link add "$P-p$i" type veth peer name "$P-q$i"
        ip link set "$P-p$i" netns "$P-sw"
        ip link set "$P-q$i" netns "$P-h$i"
        ip -n "$P-sw" link set "$P-p$i" master br0 up
        ip -n "$P-h$i" link set "$P-q$i" name "$IFACE"
    done
}

up() {
    n=${1:-2}
    case $n in 2|4) ;; *) die "up $n: expected 2 or 4 hosts";; esac
    need_root
    have=$(nhosts_up)
    if [ "$have" = "$n" ]; then status; return 0; fi
    [ "$have" = 0 ] || die "a rig of $have hosts is up; run: make netns-down first"
    check_free
    mkdir -p "$RUN" "$SHM"
    # the namespace files must sit on a private mount (a namespace cannot be pinned on a
    # mount that propagates into itself)
    mountpoint -q "$RUN" || mount --bind "$RUN" "$RUN"
    mount --make-private "$RUN"
    trap 'down >/dev/null 2>&1; exit 130' INT TERM
    trap 'down >/dev/null 2>&1' EXIT  # a failed step leaves nothing half made
    i=0
    while [ "$i" -lt "$n" ]; do make_host "$i"; i=$((i + 1)); done
    if [ "$n" = 2 ]; then link_two; else link_bridge; fi
    i=0
    while [ "$i" -lt "$n" ]; do
        ip -n "$P-h$i" addr add "$(addr "$i")/24" dev "$IFACE"
        ip -n "$P-h$i" link set "$IFACE" up
        i=$((i + 1))
    done
    echo "$n" > "$RUN/hosts"
    trap - INT TERM EXIT
    status
}

down() {
    [ -d "$RUN" ] || return 0
    need_root
    for i in 0 1 2 3; do
        [ -f "$RUN/h$i.made" ] || continue
        ip netns del "$P-h$i" 2>/dev/null || true   # its links go with it
        for f in uts mnt; do [ -f "$RUN/h$i.$f" ] && umount "$RUN/h$i.$f" 2>/dev/null; done
        rm -f "$RUN/h$i.made" "$RUN/h$i.uts" "$RUN/h$i.mnt"
    done
    if [ -f "$RUN/sw.made" ]; then ip netns del "$P-sw" 2>/dev/null || true; rm -f "$RUN/sw.made"; fi
    rm -f "$RUN/hosts"
    umount "$RUN" 2>/dev/null || true
    rmdir "$RUN" 2>/dev/null || true
    rm -rf "$SHM"
}

status() {
    n=$(nhosts_up)
    i=0
    while [ "$i" -lt "$n" ]; do
        echo "$i $P""h$i $(addr "$i") pod$(pod_of "$i")"
        i=$((i + 1))
    done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    up) up "$@" ;;
    down) down ;;
    status) status ;;
    exec) [ $# -ge 2 ] || die "exec I CMD...: a host index and a command"; in_host "$@" ;;
    *) echo "usage: rig.sh up [2|4] | down | status | exec I CMD..." >&2; exit 2 ;;
esac

#!/bin/sh
# rig.sh — hosts on this machine for real: network namespaces with their own hostnames (a UTS
# namespace each) and their own /sys (a mount namespace each, so UCX and the MPIs see the
# host's own network devices), each joined to one bridge by a veth pair, the hosts of one pod
# mapping one pool file in their /dev/shm (docs/mpi-shim.md, "Two hosts on this machine").
# Pod 0's hosts see the machine's /dev/shm; pod 1's a folder of their own there, so one pool
# path names a different pool in each pod. Launchers run on the bridge's side (`rig.sh ctl`),
# where every host is remote: they start each host's processes through tests/netns/launch.sh
# (a launcher inside a host would fork that host's ranks itself, outside its namespaces, and
# a mount namespace does not see the namespace files pinned after it). Root only.
#   rig.sh up [2|4]     2: hosts h0 h1 (one pod); 4: hosts h0..h3, pods {h0,h1} and {h2,h3}
#   rig.sh down         removes this rig's namespaces, links and pod folders, nothing else
#   rig.sh exec I CMD   runs CMD on host I (0..3)
#   rig.sh ctl CMD      runs CMD on the bridge's side (10.17.0.254, interface br0)
#   rig.sh status       the hosts that are up, one line each: index name address pod
# NETNS_PREFIX (default cxk) names everything: ${P}-h0.. and ${P}-sw (ip netns), hostnames
# ${P}h0.., each host's interface ${P}0, /run/${P}-netns (the namespace files),
# /dev/shm/${P}-netns/pod1 (pod 1's /dev/shm). Addresses are the project's test hosts'
# (tests/vm/rig.py: 10.17.0.1, .2, then .3, .4); the links live inside the namespaces only,
# so the machine's own network is never touched. Idempotent: `up` over a rig that is up
# checks it and returns; a namespace of the rig's names that the rig did not make (no marker
# file) is refused, never reused or removed.
set -eu
P=${NETNS_PREFIX:-cxk}
case $P in *[!a-z0-9]*|'') echo "rig.sh: NETNS_PREFIX=$P: expected lowercase letters and digits" >&2; exit 2;; esac
RUN=/run/$P-netns
SHM=/dev/shm/$P-netns
NETNS=/run/netns
IFACE=$P"0"

addr() { echo "10.17.0.$(($1 + 1))"; }
pod_of() { echo $(($1 / 2)); }

die() { echo "rig.sh: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (network and mount namespaces); run it as root"; }

nhosts_up() {  # how many hosts the marker says were made (0: none)
    if [ -f "$RUN/hosts" ]; then cat "$RUN/hosts"; else echo 0; fi
}

# A namespace of our names that has no marker of ours is someone else's: refuse.
check_free() {
    for ns in h0 h1 h2 h3 sw; do
        if [ -e "$NETNS/$P-$ns" ] && [ ! -f "$RUN/$ns.made" ]; then
            die "network namespace $P-$ns exists but this rig did not make it; pick another NETNS_PREFIX or remove it yourself (ip netns del $P-$ns)"
        fi
    done
}

in_host() {  # index, command...: run in host index's namespaces
    i=$1; shift
    [ -f "$RUN/h$i.made" ] || die "host $i is not up; run: make netns-up"
    exec nsenter --net="$NETNS/$P-h$i" --uts="$RUN/h$i.uts" --mount="$RUN/h$i.mnt" \
        --wd="$(pwd)" -- "$@"
}

in_ctl() {  # command...: run on the bridge's side, in the machine's mounts
    [ -f "$RUN/sw.made" ] || die "the rig is not up; run: make netns-up"
    exec nsenter --net="$NETNS/$P-sw" -- "$@"
}

make_host() {  # index: namespaces, hostname, its own /sys, /dev/shm of its pod, lo up
    i=$1
    pod=$(pod_of "$i")
    shm=true
    if [ "$pod" != 0 ]; then
        mkdir -p "$SHM/pod$pod"
        chmod 1777 "$SHM/pod$pod"
        shm="mount --bind '$SHM/pod$pod' /dev/shm"
    fi
    ip netns add "$P-h$i"
    touch "$RUN/h$i.made" "$RUN/h$i.uts" "$RUN/h$i.mnt"
    # sysfs shows the network namespace of whoever mounts it: mounted from inside the host
    nsenter --net="$NETNS/$P-h$i" unshare --uts="$RUN/h$i.uts" --mount="$RUN/h$i.mnt" \
        --propagation private sh -c "hostname $P""h$i && mount -t sysfs sysfs /sys && $shm"
    ip -n "$P-h$i" link set lo up
}

link_bridge() {  # n hosts, each by a veth pair, on a bridge in ${P}-sw, which holds .254
    n=$1
    ip netns add "$P-sw"
    touch "$RUN/sw.made"
    ip -n "$P-sw" link set lo up
    ip -n "$P-sw" link add br0 type bridge
    ip -n "$P-sw" addr add 10.17.0.254/24 dev br0
    ip -n "$P-sw" link set br0 up
    i=0
    while [ "$i" -lt "$n" ]; do
        ip link add "$P-p$i" type veth peer name "$P-q$i"
        ip link set "$P-p$i" netns "$P-sw"
        ip link set "$P-q$i" netns "$P-h$i"
        ip -n "$P-sw" link set "$P-p$i" master br0 up
        ip -n "$P-h$i" link set "$P-q$i" name "$IFACE"
        ip -n "$P-h$i" addr add "$(addr "$i")/24" dev "$IFACE"
        ip -n "$P-h$i" link set "$IFACE" up
        i=$((i + 1))
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
    link_bridge "$n"
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
        for f in uts mnt; do umount "$RUN/h$i.$f" 2>/dev/null || true; done
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
    ctl) [ $# -ge 1 ] || die "ctl CMD...: a command"; in_ctl "$@" ;;
    *) echo "usage: rig.sh up [2|4] | down | status | exec I CMD... | ctl CMD..." >&2; exit 2 ;;
esac

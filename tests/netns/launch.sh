#!/bin/sh
# launch.sh [-FLAGS...] HOST CMD... — the remote shell of MPI launchers on the namespace rig
# (tests/netns/rig.sh): what MPICH's Hydra calls with `-launcher rsh -launcher-exec` and Open
# MPI with `--mca plm_rsh_agent`, as they would call rsh or ssh. HOST is a rig host's address
# (10.17.0.N) or hostname (${NETNS_PREFIX}hI); CMD runs there through sh, as a remote shell
# would run it. Leading flags (ssh's -x and the like) are ignored.
set -eu
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
[ $# -ge 2 ] || { echo "launch.sh: usage: launch.sh HOST CMD..." >&2; exit 2; }
host=$1; shift
P=${NETNS_PREFIX:-cxk}
case $host in
    10.17.0.[1-4]) i=$((${host##*.} - 1)) ;;
    "$P"h[0-3]) i=${host#"$P"h} ;;
    *) echo "launch.sh: host $host: not a rig host (10.17.0.1-4 or ${P}h0-3); see make netns-up" >&2; exit 2 ;;
esac
exec "$(dirname "$0")/rig.sh" exec "$i" sh -c "cd '$(pwd)' && $*"

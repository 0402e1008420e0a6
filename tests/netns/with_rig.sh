#!/bin/sh
# with_rig.sh N CMD... — runs CMD with a namespace rig of N hosts (tests/netns/rig.sh) up:
# brings it up unless one of N hosts already is, and takes down only a rig it brought up,
# whether CMD ends, fails or is interrupted (Ctrl-C). Exits with CMD's code.
set -u
n=${1:?usage: with_rig.sh 2|4 CMD...}; shift
rig="$(dirname "$0")/rig.sh"
mine=0
if [ "$("$rig" status | wc -l)" != "$n" ]; then
    "$rig" up "$n" || exit 1
    mine=1
fi
cleanup() { [ "$mine" = 1 ] && "$rig" down; mine=0; }
trap 'cleanup; exit 130' INT TERM
"$@"
rc=$?
cleanup
exit "$rc"

# Guest prep for the `cxl` topology (busybox sh, before the command): create and commit a
# volatile region over mem0 through sysfs (ndctl 76.1's `cxl create-region` cannot do ram),
# then wait until dax_cxl + kmem have onlined it as a new NUMA node. Writes the facts the
# tests compare against to /xfer/cxl.facts (region=, node=, size=).
set -eu
C=/sys/bus/cxl/devices

wait_for() {  # wait_for '<shell condition>': re-evaluated every 0.1 s, for up to 10 s
    i=0
    while ! eval "$1" > /dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 100 ]; then echo "cxl-ram-region: timed out waiting for: $1"; exit 1; fi
        sleep 0.1
    done
}

wait_for '[ -e $C/mem0 ]'
# mem0's endpoint port (endpointN) appears once cxl_mem has probed; its first decoder is N.0.
ep=""
i=0
while [ -z "$ep" ]; do
    for e in $C/endpoint*; do
        [ -e "$e/uport" ] && [ "$(basename "$(readlink -f "$e/uport")")" = mem0 ] \
            && ep=$(basename "$e")
    done
    i=$((i + 1))
    if [ -z "$ep" ] && [ $i -gt 100 ]; then echo "cxl-ram-region: no endpoint for mem0"; exit 1; fi
    [ -n "$ep" ] || sleep 0.1
done
ed=decoder${ep#endpoint}.0
size=$(cat $C/mem0/ram/size)
echo ram > $C/$ed/mode
echo "$size" > $C/$ed/dpa_size

rd=$C/decoder0.0    # the root decoder: QEMU's one CFMWS window
region=$(cat $rd/create_ram_region)
echo "$region" > $rd/create_ram_region
cat $rd/interleave_granularity > $C/$region/interleave_granularity
echo 1 > $C/$region/interleave_ways
echo "$size" > $C/$region/size
echo "$ed" > $C/$region/target0
echo 1 > $C/$region/commit
[ -e /sys/bus/cxl/drivers/cxl_region/$region ] \
    || echo "$region" > /sys/bus/cxl/drivers/cxl_region/bind

# dax_cxl gives the region a dax device; kmem onlines it into the node the platform assigned.
wait_for '[ -d $C/$region/dax_$region ]'
dax=""
wait_for '[ -n "$(ls /sys/bus/dax/devices/)" ]'
for d in /sys/bus/dax/devices/*; do
    [ "$(basename "$(readlink -f "$d/..")")" = "dax_$region" ] && dax=$(basename "$d")
done
if [ -z "$dax" ]; then
    echo "cxl-ram-region: no dax device under dax_$region"
    ls -l /sys/bus/dax/devices/
    exit 1
fi
node=$(cat /sys/bus/dax/devices/$dax/target_node)
wait_for "ls -d /sys/devices/system/node/node$node/memory*"
printf 'region=%s\nnode=%s\nsize=%s\ndax=%s\n' "$region" "$node" "$size" "$dax" > /xfer/cxl.facts
cat /xfer/cxl.facts

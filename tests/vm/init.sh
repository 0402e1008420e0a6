#!/bin/busybox sh
# The guest's /init (busybox): load the CXL/DAX/NVDIMM/9p modules, mount the `xfer` 9p share,
# run the topology's prep.sh, then cmd.sh (chrooted into the host root exported as `hostroot`
# when xfer/chroot exists), write its output and exit code back into the share, power off.
# Exit codes written to xfer/rc: the command's own; xfer/prep-rc: prep.sh's.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /etc/modules); do
    modprobe "$m" || echo "init: modprobe $m failed" > /dev/console
done
# loopback up (MPI launchers and TCP between local processes need it); two-hosts guests also
# have eth0, a link to the other guest that the command configures
ip link set lo up 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 xfer /xfer || {
    echo "init: cannot mount the xfer share" > /dev/console
    poweroff -f
}

finish() {
    sync
    poweroff -f
}

if [ -e /xfer/prep.sh ]; then
    sh /xfer/prep.sh > /xfer/prep.log 2>&1
    prc=$?
    echo "$prc" > /xfer/prep-rc
    [ "$prc" = 0 ] || finish
fi

if [ -e /xfer/chroot ]; then
    # The host root, read-only; a cache makes python's many stat/open calls bearable under TCG.
    if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose \
            hostroot /host; then
        echo "init: cannot mount the hostroot share" > /xfer/out
        echo 125 > /xfer/rc
        finish
    fi
    # xfer/chroot names the project's directory. It may lie under a path covered below by a
    # tmpfs (a clone in /tmp, say): hold it on /keep first and bind it back afterwards.
    proj=$(cat /xfer/chroot)
    if [ -n "$proj" ] && [ -d "/host$proj" ]; then
        mkdir -p /keep && mount --bind "/host$proj" /keep
    fi
    mount -t proc proc /host/proc
    mount -t sysfs sysfs /host/sys
    mount -t devtmpfs devtmpfs /host/dev
    mkdir -p /host/dev/shm
    mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
    mount -t tmpfs -o mode=1777 tmpfs /host/tmp
    mount -t tmpfs tmpfs /host/run
    if [ -n "$proj" ] && [ ! -d "/host$proj" ]; then
        mkdir -p "/host$proj" && mount --bind /keep "/host$proj"
    fi
    mkdir /host/tmp/xfer
    mount --bind /xfer /host/tmp/xfer
    chroot /host /bin/sh /tmp/xfer/cmd.sh > /xfer/out 2>&1
    echo $? > /xfer/rc
else
    sh /xfer/cmd.sh > /xfer/out 2>&1
    echo $? > /xfer/rc
fi
finish

#!/bin/bash
# Builds everything the QEMU test rig needs into tests/vm/.work (never committed), all from apt:
# host packages, Debian's 6.12 guest kernel (unpacked, not installed), QEMU 10 from
# bookworm-backports unpacked side by side, and the busybox initramfs. Idempotent: each step
# leaves a stamp and is skipped when its stamp exists (delete .work/<step>.done to redo one).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${CXLKIT_VM_WORK:-$HERE/.work}
mkdir -p "$WORK"
# One setup at a time: several shells may run `make test-vm` in the same checkout.
exec 9> "$WORK/.setup.lock"
flock 9
log() { printf 'vm-setup: %s\n' "$*" >&2; }
done_() { [ -e "$WORK/$1.done" ]; }
mark() { touch "$WORK/$1.done"; }

[ "$(id -u)" = 0 ] || { log "must run as root (apt-get, dpkg, depmod)"; exit 1; }

# apt-get download writes into .work as root: apt's _apt sandbox user cannot write there.
NOSANDBOX=(-o APT::Sandbox::User=root)
HOST_PKGS="qemu-system-x86 busybox-static ndctl daxctl numactl kmod xz-utils zstd cpio bc"

step_packages() {
    local missing=()
    for p in $HOST_PKGS; do
        dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then return; fi
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Debian's newest 6.12 kernel for amd64, unpacked into .work/kernel; modules indexed there.
step_kernel() {
    done_ kernel && return
    local name deb
    newest() {
        apt-cache search --names-only '^linux-image-6\.12\.[0-9.]+\+deb[0-9]+-amd64-unsigned$' \
            | awk '{print $1}' | sort -V | tail -n1
    }
    name=$(newest)
    # Images ship with empty apt lists; the security archive keeps only the newest 6.12.
    [ -n "$name" ] || { apt-get update -qq; name=$(newest); }
    [ -n "$name" ] || { log "no linux-image-6.12*-amd64-unsigned in the apt lists"; exit 1; }
    log "guest kernel: $name"
    rm -rf "$WORK/kernel" "$WORK/debs/kernel"
    mkdir -p "$WORK/debs/kernel" "$WORK/kernel"
    (cd "$WORK/debs/kernel" && apt-get download -qq "${NOSANDBOX[@]}" "$name")
    deb=$(ls "$WORK"/debs/kernel/*.deb)
    dpkg -x "$deb" "$WORK/kernel"
    local kver
    kver=$(ls "$WORK/kernel/lib/modules" | head -n1)
    depmod -b "$WORK/kernel" "$kver"
    cp "$WORK/kernel/boot/vmlinuz-$kver" "$WORK/vmlinuz"
    echo "$kver" > "$WORK/kernel.version"
    rm -rf "$WORK/debs/kernel"
    mark kernel
}

# QEMU 10 (volatile CXL Type-3, generic ports) from bookworm-backports, unpacked side by side.
# A private apt configuration points at the same mirror the host uses for bookworm, so the
# host's own sources and lists stay untouched.
step_qemu10() {
    done_ qemu10 && return
    local apt="$WORK/apt" uri
    bookworm_uri() {  # indextargets lists only sources whose lists were fetched
        apt-get indextargets --format '$(REPO_URI) $(RELEASE)' \
            | awk '$2 == "bookworm" {print $1; exit}'
    }
    uri=$(bookworm_uri)
    [ -n "$uri" ] || { apt-get update -qq; uri=$(bookworm_uri); }
    [ -n "$uri" ] || { log "no bookworm source configured on this host"; exit 1; }
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/parts"
    local key=/usr/share/keyrings/debian-archive-keyring.gpg
    echo "deb [signed-by=$key] $uri bookworm-backports main" > "$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/parts"
                -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
    log "QEMU 10 from bookworm-backports ($uri)"
    apt-get "${opts[@]}" update -qq
    rm -rf "$WORK/qemu10" "$WORK/debs/qemu10"
    mkdir -p "$WORK/debs/qemu10" "$WORK/qemu10"
    (cd "$WORK/debs/qemu10" && apt-get "${opts[@]}" download -qq "${NOSANDBOX[@]}" \
        qemu-system-x86/bookworm-backports qemu-system-common/bookworm-backports \
        qemu-system-data/bookworm-backports seabios/bookworm-backports)
    for d in "$WORK"/debs/qemu10/*.deb; do dpkg -x "$d" "$WORK/qemu10"; done
    local q="$WORK/qemu10/usr/bin/qemu-system-x86_64"
    "$q" --version | head -n1 | grep -q 'version 10\.' \
        || { log "$q is not QEMU 10: $("$q" --version | head -n1)"; exit 1; }
    rm -rf "$WORK/debs/qemu10"
    mark qemu10
}

# Copy a host binary and every library ldd names into the initramfs tree.
copy_with_libs() {
    local root=$1 bin=$2 lib
    install -D -m 0755 "$bin" "$root$bin"
    for lib in $(ldd "$bin" | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'); do
        [ -e "$root$lib" ] || install -D -m 0755 "$lib" "$root$lib"
    done
}

# busybox + modules (CXL, DAX, NVDIMM, 9p, decompressed, with their dependencies) + host tools
# + /init. Rebuilt whenever init.sh or this script is newer than the image.
step_initramfs() {
    local img="$WORK/initramfs.cpio.gz"
    if [ -e "$img" ] && [ "$img" -nt "$HERE/init.sh" ] && [ "$img" -nt "$HERE/setup.sh" ] \
        && [ "$img" -nt "$WORK/kernel.done" ]; then return; fi
    local kver root="$WORK/initramfs" kroot="$WORK/kernel"
    kver=$(cat "$WORK/kernel.version")
    log "initramfs for $kver"
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,xfer,host,etc,run,mnt,lib/modules/"$kver"}
    cp /bin/busybox "$root/bin/busybox"
    local mods="netfs 9pnet 9pnet_virtio 9p virtio_pci cxl_acpi cxl_pci cxl_mem cxl_pmem
                cxl_port dax_cxl device_dax kmem dax_pmem dax_hmem libnvdimm nd_pmem nd_btt
                nfit nd_e820 virtio_net"
    local m path
    for m in $mods; do
        # --show-depends prints "insmod PATH" per module in load order, "builtin X" otherwise;
        # -C /dev/null: the host's modprobe.d (ndctl's "install libnvdimm" rule) must not apply.
        modprobe -C /dev/null -d "$kroot" -S "$kver" --show-depends "$m" \
        | awk '$1 == "insmod" {print $2}' | while read -r path; do
            local rel=${path#"$kroot"/}
            rel=${rel%.xz}
            rel=${rel%.zst}
            [ -e "$root/$rel" ] && continue
            mkdir -p "$(dirname "$root/$rel")"
            case $path in
                *.xz) xz -dc "$path" > "$root/$rel" ;;
                *.zst) zstd -qdc "$path" > "$root/$rel" ;;
                *) cp "$path" "$root/$rel" ;;
            esac
        done
    done
    cp "$kroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/"
    depmod -b "$root" "$kver"
    echo "$mods" | tr -s ' \n' ' ' > "$root/etc/modules"
    local t
    for t in cxl ndctl daxctl numactl; do copy_with_libs "$root" "$(command -v "$t")"; done
    install -m 0755 "$HERE/init.sh" "$root/init"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 > "$img.tmp")
    mv "$img.tmp" "$img"
    rm -rf "$root"
}

step_packages
step_kernel
step_qemu10
step_initramfs
log "ready: $WORK/vmlinuz $WORK/initramfs.cpio.gz $WORK/qemu10/usr/bin/qemu-system-x86_64"

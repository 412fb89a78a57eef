#!/usr/bin/env bash
# rxe-run.sh — run one command inside a disposable QEMU guest that has a soft-RoCE
# (rdma_rxe) device, so the verbs fabric can be exercised on a machine whose kernel
# has no RDMA. See deploy/rxe/README.md.
#
#   deploy/rxe/rxe-run.sh [-v] WORKDIR 'shell command line'
#
# WORKDIR is shared read-write at the same path inside the guest and is the command's
# working directory; the rest of the host file system is visible read-only (writes
# elsewhere land in a throw-away tmpfs), so host binaries, libraries and cargo target
# directories work unchanged. Output is the command's (stdout+stderr); the exit status
# is the command's, 124 if the guest timed out or died, 125 if setup failed.
#
# Inside the guest: device rxe0 on dummy0 (MTU 9000) with COHORT_RXE_ADDRS addresses
# 192.168.78.1..N (guest-internal: the guest has no NIC, nothing leaves it); GID index
# i is ::ffff:192.168.78.i (RoCE v2). root, `ulimit -l unlimited`.
#
# Knobs (environment):
#   COHORT_RXE_TIMEOUT  seconds before the guest is killed (default 900)
#   COHORT_RXE_ADDRS    number of addresses / GIDs on dummy0 (default 4)
#   COHORT_RXE_CPUS     guest vCPUs (default 2)      COHORT_RXE_MEM  guest memory (default 2G)
#   COHORT_RXE_CACHE    where the kernel and initramfs are kept (default /var/tmp/cohort-rxe)
#   COHORT_RXE_KERNEL   Debian kernel package (default: what linux-image-amd64 depends on)
#   COHORT_RXE_PASS     extra variable names to pass into the guest (RUST_*, COHORT_*
#                       and CARGO_TERM_* always are)
#   COHORT_RXE_VERBOSE=1 (or -v) also shows the boot console
set -uo pipefail

verbose=${COHORT_RXE_VERBOSE:-0}
if [[ ${1:-} == -v ]]; then verbose=1; shift; fi
if (($# != 2)); then
    sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 125
fi
workdir=$(realpath "$1") || exit 125
job=$2
[[ -d $workdir ]] || { echo "rxe-run: $workdir is not a directory" >&2; exit 125; }

cache=${COHORT_RXE_CACHE:-/var/tmp/cohort-rxe}
say() { if [[ $verbose == 1 ]]; then echo "rxe-run: $*" >&2; fi; }
fail() { echo "rxe-run: $*" >&2; exit 125; }
mkdir -p "$cache" || fail "cannot create $cache"

# Host packages: the emulator, rdma-core userspace with the rxe provider (the guest
# runs the host's binaries and libraries), perftest for reference numbers, and the
# static busybox the initramfs is made of.
install_host_packages() {
    local want=() p
    for p in qemu-system-x86 qemu-system-data ibverbs-providers ibverbs-utils rdma-core perftest \
        busybox-static xz-utils zstd cpio iproute2; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || want+=("$p")
    done
    ((${#want[@]})) || return 0
    echo "rxe-run: installing ${want[*]}" >&2
    local sudo=
    [[ $(id -u) == 0 ]] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${want[@]}" >&2 ||
        { $sudo apt-get update -qq >&2 &&
            $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${want[@]}" >&2; } ||
        fail "could not install ${want[*]}"
}

# The guest's PID 1 (busybox sh in the initramfs): stack an overlay on the host's
# root, bring up rxe0, run the job under chroot, report its status through /ctl.
guest_init() {
    cat <<'EOF'
#!/bin/sh
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/console 2>&1
dmesg -n 1
abort() { echo "rxe-guest: $*"; echo 125 > /ctl/status; echo "@@COHORT-RXE-DONE@@"; poweroff -f; }
for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe $m 2>/dev/null; done
mkdir -p /ctl /host /rw /root
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none ctl /ctl || abort "no control share"
. /ctl/settings
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostfs /host || abort "no host share"
mount -t tmpfs -o size=50% tmpfs /rw && mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /root || abort "overlay"
R=/root
mount -t proc proc $R/proc; mount -t sysfs sysfs $R/sys; mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm; mount -t tmpfs tmpfs $R/tmp; mount -t tmpfs tmpfs $R/run
mkdir -p "$R$WORKDIR" "$R/run/cohort-rxe" "$R/lib/modules/$(uname -r)"
mount --bind /ctl "$R/run/cohort-rxe"
mount --bind "/lib/modules/$(uname -r)" "$R/lib/modules/$(uname -r)"
mount -t 9p -o trans=virtio,version=9p2000.L,cache=mmap,msize=262144 work "$R$WORKDIR" || abort "no work share"
hostname cohort-rxe
for m in crc32_generic ib_uverbs rdma_rxe dummy; do modprobe $m 2>/dev/null; done
[ -d /sys/module/rdma_rxe ] || abort "rdma_rxe did not load"
ip link set lo up
# the dummy module makes dummy0 itself unless told numdummies=0
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy || abort "dummy0"
ip link set dummy0 mtu 9000 up || abort "dummy0 up"
i=1
while [ $i -le "$ADDRS" ]; do ip addr add 192.168.78.$i/24 dev dummy0; i=$((i + 1)); done
chroot $R rdma link add rxe0 type rxe netdev dummy0 || abort "rdma link add rxe0"
n=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
    n=$((n + 1)); [ $n -gt 100 ] && abort "rxe0 port never became ACTIVE"; sleep 0.1
done
ulimit -l unlimited
echo "@@COHORT-RXE-START@@"
chroot $R /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb USER=root \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c 'cd "$(cat /run/cohort-rxe/cwd)" && . /run/cohort-rxe/env && exec /bin/bash /run/cohort-rxe/job'
status=$?
echo "@@COHORT-RXE-DONE@@"
echo $status > /ctl/status
sync
poweroff -f
EOF
}

# One-time preparation of kernel + initramfs, kept in $cache/$kpkg.
prepare_guest() {
    install_host_packages
    # The kernel: what Debian's linux-image-amd64 or Ubuntu's linux-image-generic stands
    # for. Ubuntu ships most modules (rdma_rxe among them) in linux-modules(-extra)-VER.
    local kpkg=${COHORT_RXE_KERNEL:-}
    kernel_of() {
        local meta
        for meta in linux-image-amd64 linux-image-generic; do
            apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
        done | head -1
    }
    if [[ -z $kpkg ]]; then
        kpkg=$(kernel_of)
        if [[ -z $kpkg ]]; then
            apt-get update -qq >&2 || sudo apt-get update -qq >&2
            kpkg=$(kernel_of)
        fi
        [[ -n $kpkg ]] || fail "cannot tell which kernel package linux-image-amd64 (Debian) or linux-image-generic (Ubuntu) stands for; set COHORT_RXE_KERNEL"
    fi
    local dir=$cache/$kpkg
    if [[ ! -e $dir/ready ]]; then
        echo "rxe-run: first use: fetching $kpkg and building the guest initramfs" >&2
        rm -rf "$dir" && mkdir -p "$dir/deb" "$dir/tree" "$dir/initrd" || fail "cannot write $dir"
        local debs=("$kpkg") extra
        for extra in "${kpkg/linux-image-/linux-modules-}" "${kpkg/linux-image-/linux-modules-extra-}"; do
            apt-cache show "$extra" >/dev/null 2>&1 && debs+=("$extra")
        done
        (cd "$dir/deb" && apt-get download "${debs[@]}" 2>&1 | grep -v unsandboxed >&2) ||
            { apt-get update -qq >&2 && (cd "$dir/deb" && apt-get download "${debs[@]}" >&2); } ||
            fail "apt-get download ${debs[*]} failed"
        ls "$dir"/deb/*.deb >/dev/null 2>&1 || fail "apt-get download ${debs[*]} fetched nothing"
        local deb
        for deb in "$dir"/deb/*.deb; do
            dpkg-deb -x "$deb" "$dir/tree" || fail "cannot unpack $deb"
        done
        local kver
        kver=$(ls "$dir/tree/lib/modules")
        cp "$dir/tree/boot/vmlinuz-$kver" "$dir/vmlinuz"
        # The kernel modules the guest needs, with what they depend on, decompressed.
        local mods=$dir/tree/lib/modules/$kver m dep f
        /bin/busybox depmod -b "$dir/tree" "$kver" || fail "depmod $kver"
        local st=$dir/initrd
        mkdir -p "$st"/{bin,dev,proc,sys,ctl,host,rw,root,lib/modules/$kver}
        cp /bin/busybox "$st/bin/busybox" || fail "busybox-static is missing"
        ln -s busybox "$st/bin/sh"
        local files=()
        for m in virtio_pci 9pnet_virtio 9p overlay crc32_generic ib_uverbs rdma_rxe dummy; do
            dep=$(grep -E "/$m\.ko(\.[a-z]+)?:" "$mods/modules.dep" | head -1)
            if [[ -z $dep ]]; then
                grep -qE "/$m\.ko" "$mods/modules.builtin" || fail "module $m is not in $kpkg"
                continue
            fi
            files+=("${dep%%:*}")
            for f in ${dep#*:}; do files+=("$f"); done
        done
        for f in $(printf '%s\n' "${files[@]}" | sort -u); do
            mkdir -p "$st/lib/modules/$kver/$(dirname "$f")"
            case $f in
            *.xz) xz -dc "$mods/$f" >"$st/lib/modules/$kver/${f%.xz}" ;;
            *.zst) zstd -qdc "$mods/$f" >"$st/lib/modules/$kver/${f%.zst}" ;;
            *) cp "$mods/$f" "$st/lib/modules/$kver/$f" ;;
            esac || fail "cannot copy module $f"
        done
        cp "$mods"/modules.builtin* "$st/lib/modules/$kver/" 2>/dev/null
        /bin/busybox depmod -b "$st" "$kver" || fail "depmod"
        guest_init >"$st/init" && chmod 755 "$st/init"
        (cd "$st" && find . | cpio -o -H newc --quiet) >"$dir/initrd.cpio" || fail "cpio"
        rm -rf "$dir/deb" "$dir/tree" "$st"
        touch "$dir/ready"
    fi
    echo "$dir"
}

kdir=$(
    exec 9>"$cache/.lock"
    flock 9
    prepare_guest
) || exit 125

ctl=$(mktemp -d /tmp/cohort-rxe.XXXXXX) || exit 125
qemu_pid=
cleanup() {
    [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null
    rm -rf "$ctl"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{
    echo "WORKDIR='$workdir'"
    echo "ADDRS=${COHORT_RXE_ADDRS:-4}"
} >"$ctl/settings"
cwd=$workdir
[[ $PWD/ == "$workdir"/* ]] && cwd=$PWD
echo "$cwd" >"$ctl/cwd"
for v in $(compgen -e | grep -E '^(RUST_|COHORT_|CARGO_TERM_)') ${COHORT_RXE_PASS:-}; do
    [[ -n ${!v+set} ]] && printf 'export %s=%q\n' "$v" "${!v}"
done >"$ctl/env"
printf '%s\n' "$job" >"$ctl/job"

# KVM only with a real (intel/amd) module; otherwise TCG emulation, which is slow.
# Under TCG the guest kernel finds the vCPUs' TSCs "unsynchronized" and falls back to the
# emulated HPET, so every clock read leaves the vDSO for a system call and a trapped MMIO
# read (a runtime reads the clock several times per message). QEMU's TCG TSC is one
# monotonic counter for all vCPUs, so the guest is told to trust it, as the kernel of a
# real host does: clock reads stay in the vDSO. COHORT_RXE_CLOCK=hpet keeps the default.
accel=(-accel tcg -cpu max)
clock_args=" clocksource=tsc tsc=reliable"
[[ ${COHORT_RXE_CLOCK:-tsc} == hpet ]] && clock_args=""
if [[ -w /dev/kvm ]] && [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]]; then
    accel=(-enable-kvm -cpu host)
    clock_args=""
fi
say "booting $(basename "$kdir") with ${accel[1]}, sharing $workdir"

mkfifo "$ctl/console"
timeout -k 10 "${COHORT_RXE_TIMEOUT:-900}" qemu-system-x86_64 "${accel[@]}" \
    -smp "${COHORT_RXE_CPUS:-2}" -m "${COHORT_RXE_MEM:-2G}" -M pc -nodefaults -no-user-config \
    -display none -serial stdio -no-reboot \
    -kernel "$kdir/vmlinuz" -initrd "$kdir/initrd.cpio" \
    -append "console=ttyS0 quiet loglevel=1 panic=-1 i8042.noaux i8042.nokbd$clock_args" \
    -virtfs local,path=/,mount_tag=hostfs,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none" \
    -virtfs "local,path=$workdir,mount_tag=work,security_model=none" \
    </dev/null >"$ctl/console" 2>&1 &
qemu_pid=$!

# Show the job's part of the console (everything with -v), keep all of it for errors.
awk -v verbose="$verbose" -v logfile="$ctl/console.log" '
    { sub(/\r$/, ""); print > logfile }
    /@@COHORT-RXE-DONE@@/ { sub(/@@COHORT-RXE-DONE@@.*/, ""); if ($0 != "") print; job = 0; fflush(); next }
    /@@COHORT-RXE-START@@/ { job = 1; next }
    job || verbose { print; fflush() }
' <"$ctl/console"
wait "$qemu_pid"
qemu_rc=$?
qemu_pid=
if [[ -s $ctl/status ]]; then
    exit "$(cat "$ctl/status")"
fi
echo "rxe-run: the guest ended without a result (qemu status $qemu_rc; 124 = killed after ${COHORT_RXE_TIMEOUT:-900} s). Console tail:" >&2
tail -n 30 "$ctl/console.log" >&2
exit 124

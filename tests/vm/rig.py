#!/usr/bin/env python3
"""The QEMU test rig: boots a TCG guest (Debian 6.12 kernel + busybox initramfs, both built by
setup.sh) with a chosen memory topology, runs one command in it, chrooted into the host root by
default, and returns (exit code, output). Also the CLI behind `make test-vm`.
Standard library only, so any python3 on the host can drive it."""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
GIB = 1 << 30
MIB = 1 << 20

# Exit code written when the guest never reported one (crash, panic, no share).
RC_NO_REPORT = 125

# What every topology tells QEMU about memory speed (HMAT, initiator = node 0's CPUs).
# ns, MB/s as the kernel reports them in access0 (QEMU takes bandwidth in bytes/s).
HMAT = {
    0: (80, 40 * 1024),    # local DRAM
    1: (250, 10 * 1024),   # CPU-less far node
    2: (300, 8 * 1024),    # NVDIMM node / the CXL generic port
}
NVDIMM_BYTES = 512 * MIB   # the NVDIMM of devdax, devdax-kmem and two-hosts
CXL_BYTES = 256 * MIB      # the volatile CXL Type-3 device of cxl: the smallest region
TOPOLOGIES = ("numa", "devdax", "devdax-kmem", "cxl", "two-hosts")
DEFAULT_TIMEOUT_S = 600.0
# `make test-vm`'s pytest in a guest loads no plugin of other packages (hypothesis, anyio,
# ...): each one's import costs seconds under TCG over 9p, in every guest
GUEST_PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


class VMError(RuntimeError):
    """The guest could not be run or its topology could not be set up."""


class VMTimeout(VMError, TimeoutError):
    """The guest did not power off in time; QEMU was killed."""


def work_dir() -> Path:
    return Path(os.environ.get("CXLKIT_VM_WORK", HERE / ".work"))


@dataclass
class GuestSpec:
    """One QEMU invocation: which binary, the machine/memory arguments, a prep script run
    in the initramfs before the command, and extra kernel parameters."""

    qemu10: bool
    args: list[str]
    prep: str = ""
    cmdline: str = ""
    env: dict[str, str] = field(default_factory=dict)


def _numa_args(machine: str, mem: str, *, node2: bool) -> list[str]:
    # node0: CPUs + 1 GiB; node1: CPU-less 1 GiB; node2 (optional): CPU-less and empty at
    # boot (the NVDIMM or the CXL generic port lands there). Distances 10/20/30.
    a = ["-M", machine, "-m", mem, "-smp", "2",
         "-object", "memory-backend-ram,id=m0,size=1G",
         "-object", "memory-backend-ram,id=m1,size=1G",
         "-numa", "node,nodeid=0,cpus=0-1,memdev=m0,initiator=0",
         "-numa", "node,nodeid=1,memdev=m1,initiator=0"]
    nodes = [0, 1]
    if node2:
        a += ["-numa", "node,nodeid=2,initiator=0"]
        nodes.append(2)
    for s in nodes:
        for d in nodes:
            if s != d:
                a += ["-numa", f"dist,src={s},dst={d},val={10 + 10 * max(s, d)}"]
    for t in nodes:
        lat, bw = HMAT[t]
        a += ["-numa", f"hmat-lb,initiator=0,target={t},hierarchy=memory,"
                       f"data-type=access-latency,latency={lat}",
              "-numa", f"hmat-lb,initiator=0,target={t},hierarchy=memory,"
                       f"data-type=access-bandwidth,bandwidth={bw}M"]
    return a


def _nvdimm_args(backing: Path) -> list[str]:
    return ["-object",
            f"memory-backend-file,id=nv0,share=on,mem-path={backing},size={NVDIMM_BYTES}",
            "-device", "nvdimm,id=nvdimm0,memdev=nv0,node=2"]


# Label-less NVDIMM: its raw namespace0.0 becomes devdax. --map=mem keeps the struct-page
# array in guest RAM, not on the media: on a shared backing file two kernels would otherwise
# overwrite each other's page metadata.
_PREP_DEVDAX = """set -e
ndctl create-namespace -f -e namespace0.0 -m devdax --map=mem
test -c /dev/dax0.0
"""
# daxctl refuses system-ram while the kernel would auto-online the blocks itself; with
# auto-online off it onlines them as ZONE_MOVABLE.
_PREP_KMEM = _PREP_DEVDAX + """echo offline > /sys/devices/system/memory/auto_online_blocks
daxctl reconfigure-device --mode=system-ram dax0.0
"""
# Host b boots after host a formatted the shared namespace: its kernel finds the dax info
# block on the media and creates dax0.0 by itself. Formatting again would race with a.
_PREP_SECOND_HOST = """i=0
while [ ! -c /dev/dax0.0 ]; do
    i=$((i + 1))
    if [ $i -gt 100 ]; then echo "no /dev/dax0.0 on host b"; ndctl list -N; exit 1; fi
    sleep 0.1
done
"""


def topology_spec(topology: str, rundir: Path, *, host: str = "") -> GuestSpec:
    """The QEMU arguments and guest preparation for one topology (one host of two-hosts)."""
    if topology == "numa":
        return GuestSpec(False, _numa_args("q35,hmat=on", "2G", node2=False))
    if topology in ("devdax", "devdax-kmem"):
        backing = rundir / "nvdimm.img"
        _sparse(backing, NVDIMM_BYTES)
        return GuestSpec(False, _numa_args("q35,nvdimm=on,hmat=on", "2G,slots=2,maxmem=3G",
                                           node2=True) + _nvdimm_args(backing),
                         prep=_PREP_KMEM if topology == "devdax-kmem" else _PREP_DEVDAX)
    if topology == "two-hosts":
        if host not in ("a", "b"):
            raise ValueError(f"two-hosts host {host!r}: expected 'a' or 'b'")
        backing = rundir.parent / "shared-pool.img"
        return GuestSpec(False, _numa_args("q35,nvdimm=on,hmat=on", "2G,slots=2,maxmem=3G",
                                           node2=True) + _nvdimm_args(backing)
                         + _link_args(rundir.parent / "link-port", host),
                         prep=_PREP_DEVDAX if host == "a" else _PREP_SECOND_HOST,
                         env={"CXLKIT_VM_HOST": host})
    if topology == "cxl":
        # Volatile Type-3 behind one host bridge and root port; the generic port in node 2
        # carries the HMAT figures the kernel combines with the device's CDAT. The region's
        # memory is MMIO to QEMU (slow under TCG): 256 MiB, onlined movable so the kernel
        # keeps its own data off it.
        a = _numa_args("q35,cxl=on,hmat=on", "2G", node2=True) + [
            "-object", f"memory-backend-ram,id=cxlmem0,size={CXL_BYTES}",
            "-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
            "-device", "cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2",
            "-device", "cxl-type3,bus=rp0,volatile-memdev=cxlmem0,id=cxl-vmem0,sn=1",
            "-M", "cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G",
            "-object", "acpi-generic-port,id=gp0,pci-bus=cxl.1,node=2",
        ]
        return GuestSpec(True, a, prep=(HERE / "guest" / "cxl-ram-region.sh").read_text(),
                         cmdline="memhp_default_state=online_movable")
    raise KeyError(f"topology {topology!r}: expected one of {', '.join(TOPOLOGIES)}")


# two-hosts: a network link between the two guests only (an MPI launcher and MPI's own
# collectives need one): a QEMU socket netdev, host a listening on a free loopback port and
# host b (started after a) connecting to it. The guest command addresses it: eth0,
# LINK_ADDR[host] / 24.
LINK_ADDR = {"a": "10.17.0.1", "b": "10.17.0.2"}


def _link_args(port_file: Path, host: str) -> list[str]:
    if host == "a":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        port_file.write_text(str(port))
        how = f"listen=127.0.0.1:{port}"
    else:
        how = f"connect=127.0.0.1:{port_file.read_text().strip()}"
    mac = "52:54:00:17:00:0" + ("1" if host == "a" else "2")
    return ["-netdev", f"socket,id=link,{how}",
            "-device", f"virtio-net-pci,netdev=link,mac={mac},bus=pcie.0"]


def _sparse(path: Path, nbytes: int) -> None:
    with open(path, "wb") as f:
        f.truncate(nbytes)


def _artifacts() -> dict[str, Path]:
    w = work_dir()
    need = {"kernel": w / "vmlinuz", "initrd": w / "initramfs.cpio.gz",
            "qemu": Path(shutil.which("qemu-system-x86_64") or "/usr/bin/qemu-system-x86_64"),
            "qemu10": w / "qemu10/usr/bin/qemu-system-x86_64"}
    for name, p in need.items():
        if not p.exists():
            raise VMError(f"{name} missing at {p}: run `make vm-setup` (tests/vm/setup.sh) first")
    return need


def _qemu_command(spec: GuestSpec, xfer: Path, console: Path,
                  chroot: bool) -> tuple[list[str], dict[str, str]]:
    art = _artifacts()
    env = dict(os.environ)
    if spec.qemu10:
        root = work_dir() / "qemu10"
        qemu = [str(art["qemu10"]), "-L", str(root / "usr/share/qemu"),
                "-L", str(root / "usr/share/seabios")]
        env["QEMU_MODULE_DIR"] = str(root / "usr/lib/x86_64-linux-gnu/qemu")
    else:
        qemu = [str(art["qemu"])]
    cmdline = "console=ttyS0 loglevel=4 panic=-1 " + spec.cmdline
    argv = qemu + [
        "-nodefaults", "-display", "none", "-no-reboot", "-monitor", "none",
        "-serial", f"file:{console}",
        "-accel", "tcg,thread=multi", "-cpu", "max,-hypervisor",
        "-kernel", str(art["kernel"]), "-initrd", str(art["initrd"]),
        "-append", cmdline.strip(),
        # bus=pcie.0 explicitly: otherwise QEMU may put the 9p device behind pxb-cxl.
        "-fsdev", f"local,id=xfer,path={xfer},security_model=none",
        "-device", "virtio-9p-pci,fsdev=xfer,mount_tag=xfer,bus=pcie.0",
    ]
    if chroot:
        argv += ["-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,"
                           "multidevs=remap",
                 "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0"]
    return argv + spec.args, env


def _cmd_script(cmd: str | Sequence[str], topology: str, chroot: bool,
                env: dict[str, str]) -> str:
    shell_cmd = cmd if isinstance(cmd, str) else shlex.join(cmd)
    lines = ["export HOME=/tmp PYTHONDONTWRITEBYTECODE=1",
             f"export CXLKIT_VM_TOPOLOGY={shlex.quote(topology)}"]
    if chroot:
        lines += [f"export PATH={shlex.quote(str(PROJECT / '.venv/bin'))}:/usr/local/sbin:"
                  "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "export CXLKIT_VM_XFER=/tmp/xfer", f"cd {shlex.quote(str(PROJECT))}"]
    else:
        lines += ["export PATH=/bin:/sbin:/usr/bin:/usr/sbin", "export CXLKIT_VM_XFER=/xfer"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(shell_cmd)
    return "\n".join(lines) + "\n"


@dataclass
class _Guest:
    name: str
    rundir: Path
    proc: subprocess.Popen

    @property
    def xfer(self) -> Path:
        return self.rundir / "xfer"

    def died_before_init(self) -> bool:
        """QEMU exited and /init never wrote to the share (kernel crash during boot)."""
        return self.proc.poll() is not None and not any(
            (self.xfer / f).exists() for f in ("prep.log", "out", "rc"))

    def oops_line(self) -> str:
        lines = _read(self.rundir / "console.log").splitlines()
        hit = [ln for ln in lines if "Oops" in ln or "Kernel panic" in ln or "BUG" in ln]
        return (hit or lines[-1:] or ["no console output"])[0].strip()

    def result(self) -> tuple[int, str]:
        prep_rc = self.xfer / "prep-rc"
        if prep_rc.exists() and prep_rc.read_text().strip() != "0":
            raise VMError(f"{self.name}: topology setup failed (rc "
                          f"{prep_rc.read_text().strip()}):\n{_read(self.xfer / 'prep.log')}\n"
                          f"{_tail(self.rundir / 'console.log')}")
        rc_file = self.xfer / "rc"
        out = _read(self.xfer / "out")
        if not rc_file.exists():
            return RC_NO_REPORT, (out + f"\n[rig] {self.name}: the guest reported no exit code"
                                  f" (qemu exited {self.proc.returncode}); console:\n"
                                  + _tail(self.rundir / "console.log"))
        return int(rc_file.read_text().strip() or RC_NO_REPORT), out


def _read(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _tail(p: Path, n: int = 40) -> str:
    return "\n".join(_read(p).splitlines()[-n:])


def _start(name: str, rundir: Path, spec: GuestSpec, cmd: str | Sequence[str], topology: str,
           chroot: bool, env: dict[str, str]) -> _Guest:
    xfer = rundir / "xfer"
    xfer.mkdir(parents=True)
    if spec.prep:
        (xfer / "prep.sh").write_text(spec.prep)
    (xfer / "cmd.sh").write_text(_cmd_script(cmd, topology, chroot, {**spec.env, **env}))
    if chroot:  # the guest's /init binds the project back if a tmpfs covers it
        (xfer / "chroot").write_text(str(PROJECT))
    argv, qenv = _qemu_command(spec, xfer, rundir / "console.log", chroot)
    (rundir / "qemu.argv").write_text(shlex.join(argv) + "\n")
    log = open(rundir / "qemu.log", "wb")
    # Own process group: a timeout kills QEMU and anything it spawned, nothing else.
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=qenv, start_new_session=True)
    log.close()
    return _Guest(name, rundir, proc)


def _kill(guests: Sequence[_Guest]) -> None:
    for g in guests:
        if g.proc.poll() is None:
            os.killpg(g.proc.pid, signal.SIGKILL)
            g.proc.wait()


def _wait(guests: Sequence[_Guest], deadline: float, what: str) -> None:
    for g in guests:
        try:
            g.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(guests)
            raise VMTimeout(f"{what}: {g.name} did not finish in time; QEMU killed. Output so "
                            f"far:\n{_read(g.xfer / 'out')}\nconsole:\n"
                            f"{_tail(g.rundir / 'console.log')}") from None


def _new_rundir(topology: str) -> Path:
    base = work_dir() / "runs"
    base.mkdir(parents=True, exist_ok=True)
    d = base / f"{topology}-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir()
    return d


def run(cmd: str | Sequence[str], topology: str = "numa", chroot: bool = True,
        timeout: float = DEFAULT_TIMEOUT_S, *, env: dict[str, str] | None = None,
        keep: bool = False) -> tuple[int, str]:
    """Boot a fresh guest of `topology`, run `cmd` (a shell string or an argv) in it, return
    (exit code, combined stdout+stderr). chroot=True runs it in the host root (read-only, /tmp
    and /dev/shm are tmpfs, cwd is the project); chroot=False in the busybox initramfs.
    two-hosts runs `cmd` in both guests (CXLKIT_VM_HOST=a, then b once a has formatted the
    shared device) and returns the first non-zero code and both outputs.
    `env` adds variables to the command's environment.
    Raises VMTimeout after `timeout` seconds (QEMU killed), VMError when setup is missing or
    the topology could not be prepared, KeyError for an unknown topology, ValueError /
    TypeError for bad arguments."""
    if not isinstance(cmd, str) and (not isinstance(cmd, Sequence) or
                                     not all(isinstance(c, str) for c in cmd)):
        raise TypeError(f"cmd {cmd!r}: expected a shell string or a sequence of str")
    if topology not in TOPOLOGIES:
        raise KeyError(f"topology {topology!r}: expected one of {', '.join(TOPOLOGIES)}")
    if not timeout > 0:
        raise ValueError(f"timeout {timeout!r}: expected seconds > 0")
    env = dict(env or {})
    for k, v in env.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ValueError(f"env name {k!r}: expected a shell variable name")
        if not isinstance(v, str):
            raise TypeError(f"env {k}={v!r}: expected a str value")
    _artifacts()
    deadline = time.monotonic() + timeout
    rundir = _new_rundir(topology)
    ok = False
    try:
        if topology != "two-hosts":
            def start(d: Path) -> _Guest:
                return _start(topology, d, topology_spec(topology, d), cmd, topology, chroot,
                              env)

            g = start(rundir)
            _wait([g], deadline, f"topology {topology}")
            note = ""
            if g.died_before_init():
                # Nothing of the command ran: one fresh guest is safe. The crashed run
                # directory stays for diagnosis.
                note = _crash_note(g, topology)
                rundir = _new_rundir(topology)
                g = start(rundir)
                _wait([g], deadline, f"topology {topology}")
            rc, out = g.result()
            ok = rc == 0
            return rc, note + out
        rc, out, note = _run_two_hosts(rundir, cmd, chroot, env, deadline)
        ok = rc == 0 and not note  # keep the consoles of a crashed boot
        return rc, note + out
    finally:
        if ok and not keep:
            shutil.rmtree(rundir, ignore_errors=True)


def _crash_note(g: _Guest, name: str) -> str:
    """Rarely (about 1 boot in 50 here) the 6.12 kernel oopses on a stray int3 while patching
    its own text under multi-threaded TCG, before /init runs."""
    note = (f"[rig] {name}: the guest died before /init ({g.oops_line()}); console in "
            f"{g.rundir}; booted a fresh guest\n")
    print(note, end="", file=sys.stderr)
    return note


def _run_two_hosts(rundir: Path, cmd: str | Sequence[str], chroot: bool, env: dict[str, str],
                   deadline: float) -> tuple[int, str, str]:
    _sparse(rundir / "shared-pool.img", NVDIMM_BYTES)

    def start(host: str, d: Path) -> _Guest:
        return _start(f"host {host}", d, topology_spec("two-hosts", d, host=host), cmd,
                      "two-hosts", chroot, env)

    note = ""
    a = start("a", rundir / "a")
    guests = [a]
    try:
        # b may only boot once a has written the devdax info block on the shared media.
        while not (a.xfer / "prep-rc").exists():
            if a.proc.poll() is not None:
                if a.died_before_init() and not note:  # the device is untouched: boot again
                    note = _crash_note(a, "two-hosts host a")
                    a = start("a", rundir / "a-again")
                    guests = [a]
                    continue
                a.result()
                raise VMError(f"host a exited before preparing the shared device:\n"
                              f"{_tail(a.rundir / 'console.log')}")
            if time.monotonic() > deadline:
                raise VMTimeout("two-hosts: host a did not prepare the shared device in time")
            time.sleep(0.2)
        if (a.xfer / "prep-rc").read_text().strip() != "0":
            _wait(guests, deadline, "two-hosts")
            a.result()
        b = start("b", rundir / "b")
        guests.append(b)
        _wait([b], deadline, "two-hosts")
        if b.died_before_init():  # b never touched the device; a is still waiting for it
            note += _crash_note(b, "two-hosts host b")
            b = start("b", rundir / "b-again")
            guests = [a, b]
            _wait([b], deadline, "two-hosts")
        _wait([a], deadline, "two-hosts")
    except BaseException:
        _kill(guests)
        raise
    (rca, outa), (rcb, outb) = a.result(), b.result()
    return ((rca or rcb), f"=== host a (rc {rca}) ===\n{outa}\n=== host b (rc {rcb}) ===\n{outb}",
            note)


_SUMMARY = re.compile(r"^=* ?\d+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected)"
                      r"\b.* in [\d.]+s\b")


_REPORTS = threading.Lock()


def _run_topology(topo: str, pytest_args: Sequence[str], timeout: float) -> dict:
    """One guest (two for two-hosts) running the vm-marked tests for `topo`; prints its report."""
    # no vm test uses a plugin of another package (GUEST_PYTEST_ENV)
    cmd = [str(PROJECT / ".venv/bin/python"), "-m", "pytest", "-m", "vm", "-q",
           "-p", "no:cacheprovider", str(HERE), *pytest_args]
    t0 = time.monotonic()
    try:
        rc, out = run(cmd, topo, timeout=timeout, env=GUEST_PYTEST_ENV)
    except VMError as e:
        rc, out = RC_NO_REPORT, f"[rig] {type(e).__name__}: {e}"
    wall = time.monotonic() - t0
    with _REPORTS:  # guests run side by side: one report at a time, whole
        sys.stdout.write(f"\n##### topology {topo}: rc {rc}, {wall:.1f} s\n{out}\n")
        sys.stdout.flush()
    # pytest's last line per guest ("3 passed, 29 deselected in 18.66s"); two per two-hosts
    summary = [ln.strip("= ") for ln in out.splitlines() if _SUMMARY.match(ln)]
    return {"topology": topo, "rc": rc, "wall_s": round(wall, 1), "summary": " | ".join(summary)}


def run_tests(topologies: Sequence[str], pytest_args: Sequence[str], timeout: float,
              jobs: int = 1) -> list[dict]:
    """`make test-vm`: per topology, one guest running the vm-marked tests for it, up to
    `jobs` guests at a time. A TCG guest's tests keep about one host CPU busy (one process
    at a time on one vCPU): two at once use a 2-core machine's second core. two-hosts boots
    two guests itself, so it runs after the others, alone. Results in the order given."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs {jobs!r}: expected a number of guests >= 1")
    def one(t: str) -> dict:
        return _run_topology(t, pytest_args, timeout)

    single = [i for i, t in enumerate(topologies) if t != "two-hosts"]
    results: dict[int, dict] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results.update(zip(single, pool.map(one, [topologies[i] for i in single])))
    for i, t in enumerate(topologies):
        if i not in results:
            results[i] = one(t)
    return [results[i] for i in range(len(topologies))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rig.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="run one command in a fresh guest")
    r.add_argument("--topology", "-t", default="numa", choices=TOPOLOGIES)
    r.add_argument("--no-chroot", action="store_true", help="stay in the busybox initramfs")
    r.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    r.add_argument("--keep", action="store_true", help="keep .work/runs/<run> (console.log)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command...")
    t = sub.add_parser("test", help="run the vm-marked pytest tests, one guest per topology")
    t.add_argument("--topology", "-t", action="append", choices=TOPOLOGIES,
                   help="repeatable; default: all")
    t.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    t.add_argument("--jobs", "-j", type=int, default=1, help="guests at a time (two-hosts: alone)")
    t.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- extra pytest arguments")
    a = ap.parse_args(argv)
    if a.what == "run":
        cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
        if not cmd:
            ap.error("run: give a command after --")
        t0 = time.monotonic()
        rc, out = run(cmd if len(cmd) > 1 else cmd[0], a.topology, not a.no_chroot, a.timeout,
                      keep=a.keep)
        sys.stdout.write(out)
        sys.stdout.flush()
        sep = "\n" if out and not out.endswith("\n") else ""
        print(f"{sep}[rig] topology {a.topology}: rc {rc}, {time.monotonic() - t0:.1f} s",
              file=sys.stderr)
        return rc
    extra = a.pytest_args[1:] if a.pytest_args[:1] == ["--"] else a.pytest_args
    t0 = time.monotonic()
    res = run_tests(a.topology or TOPOLOGIES, extra, a.timeout, a.jobs)
    print("\n##### make test-vm: wall time per topology")
    for x in res:
        print(f"  {x['topology']:<12} rc {x['rc']:<4} {x['wall_s']:>7.1f} s   {x['summary']}")
    total = time.monotonic() - t0
    print(f"  {'total':<12} {'':<7} {total:>7.1f} s   (wall, {a.jobs} guest(s) at a time)")
    (work_dir() / "test-vm-times.json").write_text(json.dumps(res) + "\n")
    return 0 if all(x["rc"] == 0 for x in res) else 1


if __name__ == "__main__":
    sys.exit(main())

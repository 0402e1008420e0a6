"""The rig's own plumbing on the host, without booting a guest: topology arguments, argument
errors, missing setup, and the run protocol (prep, cmd, rc, timeout) against a fake QEMU that
runs the guest's scripts directly."""
from __future__ import annotations

import os
import stat
import sys
import time

import pytest

import rig

FAKE_QEMU = r'''#!PYTHON
import os, subprocess, sys, time
args = sys.argv[1:]
xfer = next(a.split("path=")[1].split(",")[0] for a in args if a.startswith("local,id=xfer,"))
open(os.path.join(os.path.dirname(xfer), "fake.pid"), "w").write(str(os.getpid()))
mode = os.environ.get("FAKE_QEMU_MODE", "ok")
if mode == "hang":
    time.sleep(600)
console = next(a[5:] for a in args if a.startswith("file:"))
crashed = os.environ["CXLKIT_VM_WORK"] + "/crashed"
if mode == "crash" or (mode == "crash-once" and not os.path.exists(crashed)):
    open(console, "w").write("[    2.85] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n")
    open(crashed, "w").close()
    sys.exit(0)
if os.path.exists(xfer + "/prep.sh"):
    with open(xfer + "/prep.log", "w") as log:
        rc = subprocess.call(["sh", xfer + "/prep.sh"], stdout=log, stderr=log)
    open(xfer + "/prep-rc", "w").write(f"{rc}\n")
    if rc:
        sys.exit(0)
with open(xfer + "/out", "w") as out:
    rc = subprocess.call(["sh", xfer + "/cmd.sh"], stdout=out, stderr=out)
open(xfer + "/rc", "w").write(f"{rc}\n")
'''


@pytest.fixture
def fake_rig(tmp_path, monkeypatch):
    """A work dir with placeholder kernel/initrd and a fake qemu-system-x86_64 first in PATH."""
    work = tmp_path / "work"
    (work / "qemu10/usr/bin").mkdir(parents=True)
    (work / "vmlinuz").write_bytes(b"")
    (work / "initramfs.cpio.gz").write_bytes(b"")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for q in (bindir / "qemu-system-x86_64", work / "qemu10/usr/bin/qemu-system-x86_64"):
        q.write_text(FAKE_QEMU.replace("PYTHON", sys.executable))
        q.chmod(q.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CXLKIT_VM_WORK", str(work))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return work


def _args(spec: rig.GuestSpec) -> str:
    return " ".join(spec.args)


def test_numa_spec_tells_qemu_two_nodes_and_their_hmat_figures(tmp_path):
    spec = rig.topology_spec("numa", tmp_path)
    a = _args(spec)
    assert not spec.qemu10 and spec.prep == ""
    assert "node,nodeid=0,cpus=0-1,memdev=m0" in a and "node,nodeid=1,memdev=m1" in a
    assert "nodeid=2" not in a
    for node in (0, 1):
        lat, bw = rig.HMAT[node]
        assert f"target={node},hierarchy=memory,data-type=access-latency,latency={lat}" in a
        assert f"target={node},hierarchy=memory,data-type=access-bandwidth,bandwidth={bw}M" in a


@pytest.mark.parametrize("topo", ["devdax", "devdax-kmem"])
def test_devdax_specs_put_a_sparse_nvdimm_in_node2_and_format_it_map_mem(tmp_path, topo):
    spec = rig.topology_spec(topo, tmp_path)
    assert "nvdimm,id=nvdimm0,memdev=nv0,node=2" in _args(spec)
    img = tmp_path / "nvdimm.img"
    assert img.stat().st_size == rig.NVDIMM_BYTES and img.stat().st_blocks == 0
    assert "-m devdax --map=mem" in spec.prep
    assert ("--mode=system-ram" in spec.prep) == (topo == "devdax-kmem")


def test_cxl_spec_uses_qemu10_a_generic_port_and_the_region_script(tmp_path):
    spec = rig.topology_spec("cxl", tmp_path)
    a = _args(spec)
    assert spec.qemu10
    assert "cxl-type3,bus=rp0,volatile-memdev=cxlmem0" in a
    assert "acpi-generic-port,id=gp0,pci-bus=cxl.1,node=2" in a
    assert f"size={rig.CXL_BYTES}" in a
    assert "create_ram_region" in spec.prep
    assert "online_movable" in spec.cmdline


def test_two_hosts_spec_shares_one_backing_file_and_only_host_a_formats(tmp_path):
    a = rig.topology_spec("two-hosts", tmp_path / "a", host="a")
    b = rig.topology_spec("two-hosts", tmp_path / "b", host="b")
    shared = f"mem-path={tmp_path / 'shared-pool.img'}"
    assert shared in _args(a) and shared in _args(b)
    assert "create-namespace" in a.prep and "create-namespace" not in b.prep
    assert (a.env, b.env) == ({"CXLKIT_VM_HOST": "a"}, {"CXLKIT_VM_HOST": "b"})


def test_two_hosts_spec_with_a_third_host_raises_ValueError(tmp_path):
    with pytest.raises(ValueError, match="'c'"):
        rig.topology_spec("two-hosts", tmp_path, host="c")


def test_unknown_topology_raises_KeyError_naming_it(tmp_path, fake_rig):
    with pytest.raises(KeyError, match="torus"):
        rig.topology_spec("torus", tmp_path)
    with pytest.raises(KeyError, match="torus"):
        rig.run("true", "torus")


def test_run_rejects_a_bad_command_and_a_bad_timeout(fake_rig):
    with pytest.raises(TypeError, match="cmd"):
        rig.run(["echo", 3])
    with pytest.raises(ValueError, match="timeout"):
        rig.run("true", timeout=0)
    with pytest.raises(ValueError, match="env name 'A;rm'"):
        rig.run("true", env={"A;rm": "x"})
    with pytest.raises(TypeError, match="env N=3"):
        rig.run("true", env={"N": 3})


def test_run_without_setup_raises_VMError_pointing_at_vm_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_VM_WORK", str(tmp_path / "empty"))
    with pytest.raises(rig.VMError, match="make vm-setup"):
        rig.run("true")


def test_run_returns_the_commands_exit_code_output_and_environment(fake_rig):
    rc, out = rig.run("echo hello; echo $CXLKIT_VM_TOPOLOGY $MYVAR; pwd; exit 3",
                      chroot=True, env={"MYVAR": "x y"})
    assert rc == 3
    assert out.splitlines() == ["hello", "numa x y", str(rig.PROJECT)]
    # a failed run keeps its directory for diagnosis
    runs = list((fake_rig / "runs").iterdir())
    assert len(runs) == 1
    # the guest's /init learns the project's path (to bind it back over the guest's /tmp)
    assert (runs[0] / "xfer" / "chroot").read_text() == str(rig.PROJECT)


def test_run_of_an_argv_quotes_each_argument_and_cleans_up(fake_rig):
    rc, out = rig.run(["printf", "%s|", "a b", "$HOME"], chroot=False)
    assert (rc, out) == (0, "a b|$HOME|")
    assert list((fake_rig / "runs").iterdir()) == []


def test_guest_without_an_exit_code_reports_125_and_says_so(fake_rig, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "crash")
    rc, out = rig.run("true")
    assert rc == rig.RC_NO_REPORT
    assert "reported no exit code" in out


def test_a_guest_that_dies_before_init_is_booted_once_more_and_says_so(fake_rig, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "crash-once")
    rc, out = rig.run("echo ran")
    assert rc == 0
    first, rest = out.split("\n", 1)
    assert first.startswith("[rig] numa: the guest died before /init (")
    assert "Oops: int3" in first
    assert rest == "ran\n"
    # the crashed run stays for diagnosis, the good one is cleaned up
    kept = list((fake_rig / "runs").iterdir())
    assert len(kept) == 1 and "Oops" in (kept[0] / "console.log").read_text()


@pytest.fixture
def fake_two_hosts(fake_rig, monkeypatch):
    # the fake runs prep on the host: no NVDIMM to format here
    monkeypatch.setattr(rig, "_PREP_DEVDAX", "echo formatted > $CXLKIT_VM_WORK/formatted\n")
    monkeypatch.setattr(rig, "_PREP_SECOND_HOST", "test -e $CXLKIT_VM_WORK/formatted\n")
    return fake_rig


def test_two_hosts_runs_the_command_on_a_then_b_and_returns_both_outputs(fake_two_hosts):
    rc, out = rig.run("echo on $CXLKIT_VM_HOST", "two-hosts")
    assert rc == 0
    assert out == "=== host a (rc 0) ===\non a\n\n=== host b (rc 0) ===\non b\n"
    assert list((fake_two_hosts / "runs").iterdir()) == []


def test_two_hosts_returns_the_first_failing_code(fake_two_hosts):
    rc, out = rig.run('[ "$CXLKIT_VM_HOST" = a ] || exit 7', "two-hosts")
    assert rc == 7
    assert "=== host b (rc 7) ===" in out


def test_two_hosts_boots_host_a_again_when_it_dies_before_init(fake_two_hosts, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "crash-once")
    rc, out = rig.run("echo on $CXLKIT_VM_HOST", "two-hosts")
    assert rc == 0
    assert out.startswith("[rig] two-hosts host a: the guest died before /init (")
    assert out.endswith("=== host b (rc 0) ===\non b\n")
    (kept,) = (fake_two_hosts / "runs").iterdir()
    assert sorted(p.name for p in kept.iterdir() if p.is_dir()) == ["a", "a-again", "b"]


def test_failed_topology_setup_raises_VMError_with_its_log(fake_rig, monkeypatch):
    monkeypatch.setattr(rig, "_PREP_DEVDAX", "echo no nvdimm here; exit 4\n")
    with pytest.raises(rig.VMError, match=r"(?s)topology setup failed \(rc 4\).*no nvdimm here"):
        rig.run("true", "devdax")


def test_timeout_kills_qemu_and_raises_VMTimeout(fake_rig, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "hang")
    t0 = time.monotonic()
    with pytest.raises(rig.VMTimeout, match="did not finish in time; QEMU killed"):
        rig.run("true", timeout=1.0)
    assert time.monotonic() - t0 < 10
    pid = int(next((fake_rig / "runs").iterdir()).joinpath("fake.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_run_tests_reports_rc_wall_time_and_pytest_summary_per_topology(fake_rig, capsys):
    # the fake runs cmd.sh on the host, so pytest really runs there: one quick host test
    one = "test_numa_spec_tells_qemu_two_nodes_and_their_hmat_figures"
    res = rig.run_tests(["numa"], ["-k", one, "-m", "not vm"], timeout=120)
    assert len(res) == 1
    r = res[0]
    assert (r["topology"], r["rc"]) == ("numa", 0)
    assert r["wall_s"] >= 0
    assert r["summary"].startswith("1 passed"), r
    assert "##### topology numa: rc 0" in capsys.readouterr().out


def test_cli_run_without_a_command_is_a_usage_error(fake_rig):
    with pytest.raises(SystemExit) as e:
        rig.main(["run", "-t", "numa", "--"])
    assert e.value.code == 2


def test_cli_run_returns_the_guests_exit_code(fake_rig, capsys):
    assert rig.main(["run", "--no-chroot", "--", "sh", "-c", "echo hi; exit 5"]) == 5
    assert capsys.readouterr().out == "hi\n"


def test_run_tests_runs_guests_side_by_side_and_two_hosts_alone(monkeypatch, capsys):
    # stand-in guests: numa and devdax meet on a barrier, which only guests running at the
    # same time can pass; two-hosts must find no other guest running
    import threading

    met = threading.Barrier(2, timeout=30)
    running, lock, seen = set(), threading.Lock(), []

    def guest(cmd, topo, timeout, env):
        with lock:
            running.add(topo)
            seen.append(sorted(running))
        if topo in ("numa", "devdax"):
            met.wait()
        with lock:
            running.discard(topo)
        return 0, f"1 passed in 0.01s ({topo}, {env['PYTEST_DISABLE_PLUGIN_AUTOLOAD']})"

    monkeypatch.setattr(rig, "run", guest)
    res = rig.run_tests(["two-hosts", "numa", "devdax"], [], timeout=60, jobs=2)
    assert [r["topology"] for r in res] == ["two-hosts", "numa", "devdax"]
    assert all(r["rc"] == 0 and r["summary"].startswith("1 passed") for r in res), res
    assert ["two-hosts"] in seen and not any("two-hosts" in s and len(s) > 1 for s in seen)
    out = capsys.readouterr().out
    assert out.count("##### topology") == 3 and "(devdax, 1)" in out
    with pytest.raises(ValueError, match="jobs 0"):
        rig.run_tests(["numa"], [], timeout=60, jobs=0)

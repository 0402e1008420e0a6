"""`cxlkit doctor`: the verdicts on every sysfs fixture, the pools it opens, the engines it
loads, and its exit code (1 when something blocks use)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cxlkit
from cxlkit.cli import doctor as D
from cxlkit.cli.main import _load, app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def _machine(tmp_path: Path, fixture: str, *, release: str = "6.12.0", **kw) -> D.Machine:
    for d in ("proc/sys/kernel", "dev", "shm"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    base = dict(sysfs=FIXTURES / fixture, procfs=tmp_path / "proc", dev=tmp_path / "dev",
                shm=tmp_path / "shm", kernel_release=release, which=lambda tool: None)
    return D.Machine(**{**base, **kw})


def _by_item(findings: list[D.Finding]) -> dict[tuple[str, str], D.Finding]:
    return {(f.area, f.item): f for f in findings}


def _verdicts(m: D.Machine, **kw) -> dict[tuple[str, str], D.Finding]:
    findings = D.diagnose(m, engines=False, **kw)
    assert all(f.status in D.STATUSES for f in findings)
    return _by_item(findings)


def test_cxl_hmat_fixture_reports_memdevs_regions_and_kmem_dax_as_ok(tmp_path):
    v = _verdicts(_machine(tmp_path, "cxl-hmat"))
    for item in ("mem0", "mem1", "region0", "region1"):
        assert v["cxl", item].status == "ok", v["cxl", item]
    assert "online as node 1" in v["dax", "dax0.0"].detail
    assert v["dax", "dax0.0"].status == "ok"
    assert v["kernel", "weighted interleave auto mode"].detail == "auto = on"
    assert v["kernel", "memory tiers"].detail == "tier 4: nodes 0; tier 22: nodes 1; tier 84: nodes 2"
    assert v["nodes", "node 1"].detail.startswith("cxl, 16.0 GiB")
    assert ("nodes", "memory tiers to place on") not in v
    assert not D.blocking(list(v.values()))


def test_devdax_fixture_without_a_device_node_warns_and_names_the_path(tmp_path):
    m = _machine(tmp_path, "devdax")
    f = _verdicts(m)["dax", "dax0.0"]
    assert f.status == "warn"
    assert f"{tmp_path / 'dev' / 'dax0.0'} does not exist" in f.detail


def test_devdax_device_readable_by_the_user_is_ok_and_shows_owner_and_mode(tmp_path):
    m = _machine(tmp_path, "devdax")
    node = tmp_path / "dev" / "dax0.0"
    node.write_bytes(b"")
    node.chmod(0o660)
    f = _verdicts(m)["dax", "dax0.0"]
    assert f.status == "ok"
    assert "660, read-write for this user" in f.detail
    assert "devdax, 7.9 GiB, align 2.0 MiB" in f.detail


def test_devdax_device_the_user_cannot_open_says_how_to_share_it(tmp_path):
    m = _machine(tmp_path, "devdax", access=lambda path, mode: False)
    (tmp_path / "dev" / "dax0.0").write_bytes(b"")
    f = _verdicts(m)["dax", "dax0.0"]
    assert f.status == "warn"
    assert "not read-write for this user" in f.detail
    assert "chmod 660" in f.fix


def test_devdax_fixture_has_no_auto_mode_file_and_one_memory_node(tmp_path):
    v = _verdicts(_machine(tmp_path, "devdax"))
    assert v["kernel", "weighted interleave auto mode"].status == "missing"
    assert v["nodes", "memory tiers to place on"].status == "missing"
    assert v["cxl", "CXL devices"].status == "missing"


def test_two_socket_on_an_old_kernel_lacks_weighted_interleave_and_says_why(tmp_path):
    v = _verdicts(_machine(tmp_path, "two-socket", release="6.8.0-45-generic"))
    f = v["kernel", "weighted interleave"]
    assert f.status == "missing"
    assert "older than 6.9" in f.detail
    assert "stripe()" in f.fix
    assert v["nodes", "node 1"].status == "ok"


def test_hbm_pmem_fixture_names_the_node_kinds(tmp_path):
    v = _verdicts(_machine(tmp_path, "hbm-pmem"))
    assert v["nodes", "node 1"].detail.startswith("hbm")
    assert v["nodes", "node 2"].detail.startswith("pmem")
    assert v["kernel", "weighted interleave auto mode"].detail == "__auto_type = off"


def test_one_node_fixture_reads_numa_balancing_and_demotion(tmp_path):
    m = _machine(tmp_path, "one-node")
    (tmp_path / "proc/sys/kernel/numa_balancing").write_text("2\n")
    v = _verdicts(m)
    assert v["kernel", "NUMA balancing"].detail == "numa_balancing = 2: memory tiering (promotion)"
    assert v["kernel", "demotion to lower tiers"].status == "missing"


def test_missing_sysfs_is_a_blocking_failure(tmp_path):
    m = _machine(tmp_path, "one-node", sysfs=tmp_path / "nothing")
    findings = D.diagnose(m, engines=False)
    bad = D.blocking(findings)
    assert [f.item for f in bad] == ["NUMA nodes"]
    assert any("cannot read sysfs" in f.detail for f in findings)


def test_tools_are_found_and_their_version_read(tmp_path):
    tool = tmp_path / "numactl"
    tool.write_text("#!/bin/sh\necho 'numactl 2.0.19'\n")
    tool.chmod(0o755)
    m = _machine(tmp_path, "one-node",
                 which=lambda t: str(tool) if t == "numactl" else None)
    v = _verdicts(m)
    assert v["tools", "numactl"].detail == f"{tool}: numactl 2.0.19"
    assert v["tools", "daxctl"].status == "missing"
    assert "apt-get install daxctl" in v["tools", "daxctl"].fix


def test_a_healthy_pool_is_fscked_clean_and_a_corrupt_one_blocks(tmp_path):
    m = _machine(tmp_path, "one-node")
    good = tmp_path / "shm" / "cxlkit-good"
    with cxlkit.Pool(str(good), size="8M") as p:
        p.create("x", data=b"abc")
    bad = tmp_path / "shm" / "cxlkit-bad"
    bad.write_bytes(os.urandom(1 << 20))
    v = _verdicts(m)
    assert v["pools", "cxlkit-good"].status == "ok"
    assert "1 objects" in v["pools", "cxlkit-good"].detail
    assert "fsck clean" in v["pools", "cxlkit-good"].detail
    assert v["pools", "cxlkit-bad"].status == "fail"
    assert "cannot open" in v["pools", "cxlkit-bad"].detail
    assert "2 pool file(s)" in v["shm", str(tmp_path / "shm")].detail
    no_open = _verdicts(m, pools=False)
    assert "not opened" in no_open["pools", "cxlkit-bad"].detail


def test_pools_claiming_more_than_the_tmpfs_warns(tmp_path):
    m = _machine(tmp_path, "one-node")
    vfs = os.statvfs(tmp_path / "shm")
    with open(tmp_path / "shm" / "cxlkit-sparse", "wb") as f:
        f.truncate(vfs.f_blocks * vfs.f_frsize + (1 << 30))
    f = _verdicts(m, pools=False)["shm", str(tmp_path / "shm")]
    assert f.status == "warn"
    assert "SIGBUS" in f.fix


def test_an_unwritable_shm_blocks_the_embedded_default(tmp_path):
    m = _machine(tmp_path, "one-node", access=lambda path, mode: False)
    f = _verdicts(m)["shm", str(tmp_path / "shm")]
    assert f.status == "fail"


def test_installed_engines_load_their_integration_and_absent_ones_say_how(tmp_path):
    pytest.importorskip("torch")
    findings = D.diagnose(_machine(tmp_path, "one-node"), engines=True)
    v = _by_item(findings)
    assert v["engines", "torch"].status == "ok"
    assert "cxlkit.integrations.torch loads" in v["engines", "torch"].detail
    for name in ("vllm", "deepspeed"):
        f = v["engines", name]
        assert f.status in ("ok", "missing")
        if f.status == "missing":
            assert f.fix


def test_kernel_version_parses_distribution_releases():
    assert D.kernel_version("6.12.0-cxl+") == (6, 12)
    assert D.kernel_version("5.15.0-91-generic") == (5, 15)
    assert D.kernel_version("weird") is None


def test_cli_json_lists_findings_and_exits_0_when_nothing_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(FIXTURES / "cxl-hmat"))
    _load()
    r = CliRunner().invoke(app, ["doctor", "--json", "--no-engines", "--shm",
                                 str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["blocking"] == 0
    assert {"area": "cxl", "item": "region0"}.items() <= next(
        f for f in doc["findings"] if f["item"] == "region0").items()


def test_cli_exits_1_and_names_the_blocking_finding(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(FIXTURES / "one-node"))
    (tmp_path / "cxlkit-junk").write_bytes(b"\0" * (1 << 20))
    _load()
    r = CliRunner().invoke(app, ["doctor", "--no-engines", "--shm", str(tmp_path)],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    assert "blocking: cxlkit-junk: cannot open" in r.output


def test_cxlkit_manifests_and_lock_files_in_shm_are_not_pools(tmp_path):
    # found running doctor here: subgroup manifests (cxlkit-subgroups.<ns>.json) and lock files
    # in /dev/shm were reported as pools that "cannot open" and blocked
    m = _machine(tmp_path, "one-node")
    (tmp_path / "shm" / "cxlkit-subgroups.t1.json").write_text("{}")
    (tmp_path / "shm" / "cxlkit-subgroups-0a1b.lock").write_bytes(b"")
    with cxlkit.Pool(str(tmp_path / "shm" / "cxlkit-real"), size="8M"):
        pass
    v = _verdicts(m)
    assert [item for area, item in v if area == "pools"] == ["cxlkit-real"]
    assert "1 pool file(s)" in v["shm", str(tmp_path / "shm")].detail


def _findings_as(uid: int, m: D.Machine) -> list[dict]:
    """diagnose()'s pool findings computed by a forked child running as uid (a second user)."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, report through the pipe, never return into pytest
        code = 1
        try:
            os.close(r)
            os.setgid(uid)
            os.setgroups([])
            os.setuid(uid)
            out = [f.__dict__ for f in D._shm(m) + D._pools(m, check=True)]
            with os.fdopen(w, "wb") as f:
                pickle.dump(out, f)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pickle.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="running as a second user needs root")
def test_another_users_private_pool_is_skipped_not_a_failure(tmp_path):
    import tempfile

    shm = Path(tempfile.mkdtemp(prefix="cxlkit-test-doctor-", dir="/dev/shm"))
    try:
        shm.chmod(0o1777)
        with cxlkit.Pool(str(shm / "cxlkit-default"), size="4M", host_id=0):
            pass
        m = _machine(tmp_path, "one-node", shm=shm)
        v = {f["item"]: f for f in _findings_as(65534, m)}
        f = v["cxlkit-default"]
        assert f["status"] == "info" and "another user's pool" in f["detail"], f
        assert not [x for x in v.values() if x["status"] == "fail"]
        # for its owner the same pool is checked as before
        assert _verdicts(m)["pools", "cxlkit-default"].status == "ok"
    finally:
        for p in shm.iterdir():
            p.unlink()
        shm.rmdir()


def test_engine_fixes_name_make_targets_that_exist():
    import re

    root = Path(__file__).resolve().parents[2]
    targets = set()
    for mk in [root / "Makefile", *sorted((root / "mk").glob("*.mk"))]:
        targets |= set(re.findall(r"^([A-Za-z][\w.-]*):", mk.read_text(), re.M))
    for fix in D._ENGINE_FIX.values():
        for t in re.findall(r"make ([\w.-]+)", fix):
            assert t in targets, fix

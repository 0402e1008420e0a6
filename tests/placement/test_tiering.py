"""cxlkit.tiering against fixture /proc and /sys files: the NUMA-balancing and demotion switches,
the vmstat counters, and a process's pages moving between tiers over an interval; the
`cxlkit tiers` and `cxlkit audit --interval` output built from them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cxlkit.placement import tiering as TG
from cxlkit.cli.main import run as cli_run

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sysfs"
MiB = 1 << 20
VMSTAT = ("nr_free_pages 100\npgpromote_success {p}\npgpromote_candidate 9\n"
          "pgdemote_kswapd {d}\npgdemote_direct 0\nnuma_pages_migrated {p}\n"
          "pgmigrate_success {m}\nworkingset_refault_anon 5\n")


def _proc(tmp_path, nb: str | None = "2", p=0, d=0, m=0) -> Path:
    root = tmp_path / "proc"
    (root / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    if nb is not None:
        (root / "sys" / "kernel" / "numa_balancing").write_text(nb + "\n")
    (root / "vmstat").write_text(VMSTAT.format(p=p, d=d, m=m))
    return root


def _sys(tmp_path, demotion: str | None) -> Path:
    root = tmp_path / "sys"
    (root / "kernel" / "mm" / "numa").mkdir(parents=True, exist_ok=True)
    if demotion is not None:
        (root / "kernel" / "mm" / "numa" / "demotion_enabled").write_text(demotion + "\n")
    return root


@pytest.mark.parametrize("nb, demotion, balancing, tiering, dm", [
    ("0", "false", False, False, False),
    ("1", "true", True, False, True),
    ("2", "true", False, True, True),
    ("3", "false", True, True, False),
    (None, None, False, False, None),
])
def test_tiering_state_reads_both_switches(tmp_path, nb, demotion, balancing, tiering, dm):
    st = TG.tiering_state(procfs_root=_proc(tmp_path, nb), sysfs_root=_sys(tmp_path, demotion))
    assert (st.balancing, st.tiering, st.demotion_enabled) == (balancing, tiering, dm)
    assert st.numa_balancing == (None if nb is None else int(nb))


def test_describe_says_what_is_on():
    assert TG.TieringState(2, True).describe() == (
        "NUMA balancing mode 2 (tiering; promotion of hot pages on); demotion on")
    assert TG.TieringState(None, None).describe() == (
        "NUMA balancing: not in this kernel; demotion: not in this kernel")
    assert "mode 0 (off" in TG.TieringState(0, False).describe()


def test_a_garbled_switch_raises_ValueError_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match="numa_balancing: 'x'"):
        TG.tiering_state(procfs_root=_proc(tmp_path, "x"), sysfs_root=_sys(tmp_path, "true"))
    with pytest.raises(ValueError, match="demotion_enabled: 'maybe'"):
        TG.tiering_state(procfs_root=_proc(tmp_path, "0"), sysfs_root=_sys(tmp_path, "maybe"))


def test_vmstat_counters_keep_the_page_move_counters_only(tmp_path):
    c = TG.vmstat_counters(procfs_root=_proc(tmp_path, p=7, d=3, m=11))
    assert c == {"pgpromote_success": 7, "pgpromote_candidate": 9, "pgdemote_kswapd": 3,
                 "pgdemote_direct": 0, "numa_pages_migrated": 7, "pgmigrate_success": 11}


def _numa_maps(pid_dir: Path, n0: int, n2: int) -> None:
    pid_dir.mkdir(parents=True, exist_ok=True)
    (pid_dir / "numa_maps").write_text(
        f"7f0000000000 default anon={n0 + n2} N0={n0} N2={n2} kernelpagesize_kB=4\n")


def test_observe_reports_system_deltas_and_the_process_moving_between_tiers(tmp_path):
    proc = _proc(tmp_path, "2", p=10, d=100)
    _numa_maps(proc / "99", n0=1000, n2=300)
    sysfs = FIXTURES / "cxl-hmat"  # node 0 dram in tier 4, node 2 cxl in tier 84

    def sleep(s):  # during the interval the kernel promotes 256 of its pages from node 2
        assert s == 1.5
        (proc / "vmstat").write_text(VMSTAT.format(p=266, d=140, m=296))
        _numa_maps(proc / "99", n0=1256, n2=44)

    d = TG.observe(1.5, 99, procfs_root=proc, sysfs_root=sysfs, sleep=sleep)
    assert d.system["pgpromote_success"] == 256 and d.system["pgdemote_kswapd"] == 40
    assert d.tiers[0] < d.tiers[2]
    assert d.node_bytes_delta == {0: 256 * 4096, 2: -256 * 4096}
    assert d.promoted_bytes == 256 * 4096 and d.demoted_bytes == 0
    doc = d.to_dict()
    assert doc["pid"] == 99 and doc["state"]["tiering"] is True


def test_promoted_and_demoted_are_the_net_flows_between_the_fastest_tier_and_the_rest():
    st = TG.TieringState(2, True)
    up = TG.TieringDelta(1.0, st, {}, 1, {0: 10 * MiB, 2: 6 * MiB}, {0: 14 * MiB, 2: 2 * MiB},
                         {0: 4, 2: 84})
    assert (up.promoted_bytes, up.demoted_bytes) == (4 * MiB, 0)
    down = TG.TieringDelta(1.0, st, {}, 1, {0: 10 * MiB}, {0: 7 * MiB, 2: 3 * MiB},
                           {0: 4, 2: 84})
    assert (down.promoted_bytes, down.demoted_bytes) == (0, 3 * MiB)
    one = TG.TieringDelta(1.0, st, {}, None)
    assert one.node_bytes_delta is None and one.promoted_bytes == 0


@pytest.mark.parametrize("bad", [-1, float("inf"), True, "1"])
def test_observe_refuses_a_bad_interval(tmp_path, bad):
    with pytest.raises(ValueError, match="interval"):
        TG.observe(bad, procfs_root=_proc(tmp_path), sysfs_root=_sys(tmp_path, "true"),
                   sleep=lambda s: None)


def test_node_tiers_are_the_kernels_memory_tiers():
    assert TG.node_tiers(sysfs_root=FIXTURES / "cxl-hmat") == {0: 4, 1: 22, 2: 84}


def test_a_node_in_no_tier_counts_as_the_fastest(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "two-socket", root, symlinks=True)
    shutil.rmtree(root / "devices" / "virtual" / "memory_tiering")
    assert TG.node_tiers(sysfs_root=root) == {0: 0, 1: 0}


def test_cxlkit_tiers_json_and_table_show_the_kernel_tiering(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXLKIT_PROCFS_ROOT", str(_proc(tmp_path, "3", p=5, d=2)))
    sysfs = _sys(tmp_path, "true")
    assert cli_run(["tiers", "--json", "--sysfs-root", str(sysfs)]) == 0
    kt = json.loads(capsys.readouterr().out)["kernel_tiering"]
    assert kt["numa_balancing"] == 3 and kt["tiering"] and kt["demotion_enabled"]
    assert kt["vmstat"]["pgpromote_success"] == 5
    assert cli_run(["tiers", "--sysfs-root", str(sysfs)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "kernel tiering: NUMA balancing mode 3 (normal+tiering; promotion of hot pages " \
           "on); demotion on; since boot: pgpromote_success 5, pgdemote_kswapd 2" in out


def test_cxlkit_audit_interval_prints_what_moved(tmp_path, monkeypatch, capsys):
    proc = _proc(tmp_path, "2")
    _numa_maps(proc / "99", n0=10, n2=0)
    (proc / "99" / "environ").write_bytes(b"PATH=/bin\0")
    monkeypatch.setenv("CXLKIT_PROCFS_ROOT", str(proc))
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(FIXTURES / "cxl-hmat"))
    assert cli_run(["audit", "99", "--interval", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stripes: none (not started with CXLKIT_STRIPE" in out
    assert "over 0 s, system-wide: no page moved" in out
    assert "this process: promoted 0.0 MiB, demoted 0.0 MiB" in out

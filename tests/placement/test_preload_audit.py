"""cxlkit.preload: the stripe configuration and the environment `cxlkit run --stripe` execs with,
and the audit of a process's striped mappings (against a procfs snapshot with two nodes, and
against a live process on this machine); the CLI plumbing of both."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import preload_prog as PP
from cxlkit.placement import preload as PL
from cxlkit.cli.main import run as cli_run

MiB = 1 << 20
PAGE = PL.PAGE


def test_parse_stripe_reads_pairs_and_sizes():
    c = PL.parse_stripe("0:3, 2:1", chunk="4M", min_size="64K")
    assert (c.nodes, c.weights, c.chunk_bytes, c.min_bytes) == ((0, 2), (3, 1), 4 * MiB,
                                                                 64 << 10)
    assert c.spec == "0:3,2:1" and c.share() == {0: 0.75, 2: 0.25}
    assert c.env() == {"CXLKIT_STRIPE": "0:3,2:1", "CXLKIT_STRIPE_CHUNK": str(4 * MiB),
                       "CXLKIT_MIN_SIZE": str(64 << 10)}


@pytest.mark.parametrize("spec, kw, message", [
    ("0:3;1:1", {}, "expected node:weight"),
    ("0", {}, "expected node:weight"),
    ("0:256", {}, "weight 256 of node 0 out of range"),
    ("0:1,0:1", {}, "node 0 named twice"),
    ("1024:1", {}, "node 1024 out of range"),
    (",".join(f"{n}:1" for n in range(65)), {}, "more than 64 nodes"),
    ("0:1", {"chunk": "3000"}, "stripe chunk '3000'"),
    ("0:1", {"min_size": 100}, "min size 100"),
])
def test_parse_stripe_refuses_what_the_library_refuses(spec, kw, message):
    with pytest.raises(ValueError, match=message):
        PL.parse_stripe(spec, **kw)


def test_config_from_env_round_trips_and_reports_absence():
    c = PL.parse_stripe("0:3,1:1")
    assert PL.config_from_env(c.env()) == c
    assert PL.config_from_env({}) is None
    with pytest.raises(ValueError):
        PL.config_from_env({"CXLKIT_STRIPE": "x"})


def test_preload_env_puts_the_library_first_and_keeps_other_preloads():
    c = PL.parse_stripe("0:1")
    env = PL.preload_env(c, log="stderr", base={"LD_PRELOAD": "/x/libother.so", "A": "1"})
    lib = str(PL.library_path())
    assert env["LD_PRELOAD"] == f"{lib}:/x/libother.so" and env["A"] == "1"
    assert env["CXLKIT_PRELOAD_LOG"] == "stderr" and env["CXLKIT_STRIPE"] == "0:1"
    again = PL.preload_env(c, base=env)
    assert again["LD_PRELOAD"] == env["LD_PRELOAD"] and "CXLKIT_PRELOAD_LOG" not in again


def test_library_path_names_a_missing_library(monkeypatch, tmp_path):
    monkeypatch.setenv("CXLKIT_PRELOAD_LIB", str(tmp_path / "nope.so"))
    with pytest.raises(FileNotFoundError, match="preload library missing") as e:
        PL.library_path()
    assert e.value.filename == str(tmp_path / "nope.so")


def test_stripe_bounds_hold_the_rule_at_every_phase():
    c = PL.parse_stripe("0:3,1:1", chunk=2 * PAGE)
    pattern = [0] * 6 + [1] * 2  # pages of one round
    for n in (1, 5, 8, 13, 37):
        b = PL.stripe_bounds(c, n)
        for phase in range(8):
            window = [pattern[(phase + i) % 8] for i in range(n)]
            for node in (0, 1):
                assert b[node][0] <= window.count(node) <= b[node][1], (n, phase, node)


# A procfs snapshot of a process striped 0:3,1:1 (chunk 2 MiB): an 8 MiB mapping bound as
# 6 MiB on node 0 + 2 MiB on node 1, one page of the node-1 part sitting on node 0; a heap;
# a small bind of the program's own.
_BASE = 0x7f0000000000


def _snapshot(tmp_path, environ: bytes, pages_n1=511, misplaced=1):
    d = tmp_path / "proc" / "4242"
    d.mkdir(parents=True)
    a, b, c = _BASE, _BASE + 6 * MiB, _BASE + 8 * MiB
    small = _BASE + 64 * MiB
    (d / "maps").write_text(
        f"{a:x}-{b:x} rw-p 00000000 00:00 0 \n{b:x}-{c:x} rw-p 00000000 00:00 0 \n"
        f"{small:x}-{small + 4096:x} rw-p 00000000 00:00 0 \n"
        "555500000000-555500021000 rw-p 00000000 00:00 0 [heap]\n")
    (d / "numa_maps").write_text(
        f"{a:x} bind:0 anon=1536 dirty=1536 N0=1536 kernelpagesize_kB=4\n"
        f"{b:x} bind:1 anon=512 dirty=512 N0={misplaced} N1={pages_n1} kernelpagesize_kB=4\n"
        f"{small:x} bind:1 anon=1 dirty=1 N1=1 kernelpagesize_kB=4\n"
        "555500000000 default heap anon=33 dirty=33 N0=33 kernelpagesize_kB=4\n")
    (d / "environ").write_bytes(environ)
    return tmp_path / "proc"


_ENV = (b"PATH=/bin\0LD_PRELOAD=/opt/cxlkit/libcxlkit_preload.so\0CXLKIT_STRIPE=0:3,1:1\0"
        b"CXLKIT_STRIPE_CHUNK=2097152\0CXLKIT_MIN_SIZE=2097152\0")


def test_audit_stripes_groups_a_mapping_and_counts_misplaced_pages(tmp_path):
    root = _snapshot(tmp_path, _ENV)
    sa = PL.audit_stripes(4242, procfs_root=root)
    assert sa.preloaded and sa.problem is None and sa.config.spec == "0:3,1:1"
    (r,) = sa.ranges  # the one-page bind of the program's own is below the minimum
    assert (r.start, r.end, r.vmas) == (_BASE, _BASE + 8 * MiB, 2)
    assert r.pages == {0: 1537, 1: 511} and r.misplaced == 1 and not r.within
    assert r.bounds == {0: (1536, 1536), 1: (512, 512)}
    assert sa.achieved() == {0: 1537 / 2048, 1: 511 / 2048}


def test_audit_stripes_says_within_for_a_mapping_on_its_rule(tmp_path):
    sa = PL.audit_stripes(4242, procfs_root=_snapshot(tmp_path, _ENV, 512, 0))
    assert sa.ranges[0].within and sa.achieved() == {0: 0.75, 1: 0.25}


@pytest.mark.parametrize("environ, problem", [
    (b"PATH=/bin\0", "not started with CXLKIT_STRIPE"),
    (b"CXLKIT_STRIPE=0:3\0", "libcxlkit_preload.so is not in its LD_PRELOAD"),
    (b"LD_PRELOAD=libcxlkit_preload.so\0CXLKIT_STRIPE=0:x\0", "the library placed nothing"),
])
def test_audit_stripes_names_why_there_is_nothing_to_compare(tmp_path, environ, problem):
    sa = PL.audit_stripes(4242, procfs_root=_snapshot(tmp_path, environ))
    assert problem in sa.problem


def test_audit_of_a_pid_that_does_not_exist_raises_ProcessLookupError(tmp_path):
    (tmp_path / "proc").mkdir()
    with pytest.raises(ProcessLookupError):
        PL.audit_stripes(77, procfs_root=tmp_path / "proc")


def test_cli_audit_json_and_table_carry_the_stripe_section(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXLKIT_PROCFS_ROOT", str(_snapshot(tmp_path, _ENV)))
    assert cli_run(["audit", "4242", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    st = doc["stripe"]
    assert st["requested"] == "0:3,1:1" and st["requested_share"] == {"0": 0.75, "1": 0.25}
    assert st["ranges"][0]["misplaced"] == 1 and st["ranges"][0]["within"] is False
    assert doc["tiering"]["state"]["numa_balancing"] is None  # not in the snapshot
    assert cli_run(["audit", "4242"]) == 0
    out = capsys.readouterr().out
    assert "stripe 0:3,1:1" in out and "requested node 0 75.0%, node 1 25.0%" in out
    assert "kernel tiering: NUMA balancing: not in this kernel" in out


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return str(PP.alloc_prog(tmp_path_factory.mktemp("prog")))


def _cxlkit(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cxlkit.cli.main import main; main()", *args]


def test_cxlkit_run_stripe_execs_the_program_under_the_library_and_audit_sees_it(prog,
                                                                                 tmp_path):
    log = tmp_path / "log"
    s = PP.start(_cxlkit("run", "--stripe", "0:1", "--min-size", "4M", "--log", str(log),
                         "--", prog, "mmap:8M", "malloc:3M", "calloc:5M"), dict(PP.os.environ))
    try:
        pid = s.pids["parent"]
        assert pid == s.proc.pid  # cxlkit run execs: the program is the same process
        a = subprocess.run(_cxlkit("audit", str(pid), "--json"), capture_output=True,
                           text=True)
    finally:
        rc, err = s.finish()
    assert rc == 0 and "cxlkit run: stripe 0:1 (chunk 2.0 MiB, mappings from 4.0 MiB)" in err
    assert a.returncode == 0, a.stderr
    st = json.loads(a.stdout)["stripe"]
    assert st["preloaded"] and st["min_bytes"] == 4 * MiB
    # adjacent placed mappings on one node may merge into one range (the kernel merges them)
    for b in (s.blocks[0], s.blocks[2]):
        assert any(int(r["start"], 16) <= b.address < int(r["end"], 16) for r in st["ranges"])
    assert all(r["within"] and r["misplaced"] == 0 for r in st["ranges"])
    assert [p["what"] for p in PP.placements(log.read_text())] == ["mmap", "calloc"]


@pytest.mark.parametrize("args, message", [
    (["--stripe", "0:1;1"], "expected node:weight"),
    (["--stripe", "0:1,900:1"], "node 900 has no memory on this machine"),
    (["--stripe", "0:1", "--min-size", "12"], "min size '12'"),
])
def test_cxlkit_run_stripe_refuses_a_bad_stripe_in_one_line(args, message, capsys):
    assert cli_run(["run", *args, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_cxlkit_run_stripe_with_a_task_policy_places_the_rest_by_that_policy(prog, tmp_path):
    log = tmp_path / "log"
    s = PP.start(_cxlkit("run", "--stripe", "0:1", "--bind", "0", "--log", str(log), "--",
                         prog, "mmap:4M", "malloc:64K"), dict(PP.os.environ))
    try:
        numa_maps = open(f"/proc/{s.pids['parent']}/numa_maps").read()
    finally:
        rc, err = s.finish()
    assert rc == 0, err
    heap = next(x for x in numa_maps.splitlines() if " heap " in x)
    assert heap.split()[1] == "bind:0", heap  # the task policy of --bind
    assert [p["what"] for p in PP.placements(log.read_text())] == ["mmap"]
    assert "cxlkit run: stripe 0:1" in err and "bind:0" in err

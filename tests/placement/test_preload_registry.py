"""The library's registry of placed ranges (native/preload/registry.c, cxlkit.preload_registry)
and the audit that judges each placement by it: two adjacent placed mappings the kernel merged
into one VMA are audited one by one; a hole punched in a placement; a freed block leaves it;
a forked child edits its own copy; a malformed or busy registry is refused by name."""
from __future__ import annotations

import os
import struct

import pytest

import preload_prog as PP
from cxlkit.placement import preload as PL
from cxlkit.placement import preload_registry as R

MiB = 1 << 20
PAGE = PL.PAGE


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return str(PP.alloc_prog(tmp_path_factory.mktemp("prog")))


def _audit_live(prog, args, env, readies=1):
    s = PP.start([prog, *args], env, readies)
    try:
        audits = {who: PL.audit_stripes(pid) for who, pid in s.pids.items()}
        regs = {who: R.read(R.find(pid, PL.Path("/proc")), PAGE) for who, pid in s.pids.items()}
    finally:
        rc, err = s.finish()
    assert rc == 0, err
    return s, audits, regs


def _vmas_covering(pid_maps: str, lo: int, hi: int) -> int:
    n = 0
    for line in pid_maps.splitlines():
        a, b = (int(x, 16) for x in line.split()[0].split("-"))
        n += a < hi and b > lo
    return n


def test_adjacent_placed_mappings_merge_into_one_vma_but_are_audited_one_by_one(prog):
    s = PP.start([prog, "adjacent:6M"], PP.preload_env("0:1"))
    try:
        pid = s.pids["parent"]
        maps = open(f"/proc/{pid}/maps").read()
        sa = PL.audit_stripes(pid)
    finally:
        rc, err = s.finish()
    assert rc == 0, err
    a, b = s.blocks
    assert b.address == a.address + 6 * MiB
    assert _vmas_covering(maps, a.address, b.address + 6 * MiB) == 1  # the kernel merged them
    assert sa.source == "registry" and sa.problem is None
    mine = [r for r in sa.ranges if a.address <= r.start < b.address + 6 * MiB]
    assert [(r.start, r.end, r.origin) for r in mine] == [
        (a.address, a.address + 6 * MiB, a.address), (b.address, b.address + 6 * MiB, b.address)]
    for r in mine:
        assert r.source == "registry" and r.vmas == 1 and r.within
        assert r.pages == {0: 6 * MiB // PAGE} and r.bounds == {0: (1536, 1536)}


def test_the_maps_grouping_misjudges_merged_mappings_the_registry_judges_right(monkeypatch):
    # 0:3,1:1 in 2 MiB chunks: two 6 MiB placements side by side are 3 + 3 chunks on node 0,
    # one VMA of 12 MiB bound to node 0 for the kernel. As one range at any phase, 6 chunks
    # hold at most 5 on node 0: the maps grouping says "outside the rule" for a correct pair.
    cfg = PL.parse_stripe("0:3,1:1")
    a = 0x7f0000000000
    vma = PL.Vma(a, a + 12 * MiB, "bind:0", {0: 3072})
    (old,) = PL.striped_ranges([vma], cfg)
    assert not old.within and old.bounds[0] == (2048, 2560)
    reg = R.Registry("fake", [R.Placement(a, a, a + 6 * MiB),
                              R.Placement(a + 6 * MiB, a + 6 * MiB, a + 12 * MiB)], 0, 0)
    monkeypatch.setattr(R, "page_nodes", lambda pid, lo, hi, page: [0] * ((hi - lo) // page))
    new = PL.registry_ranges(1, cfg, reg, [vma])
    assert [r.within for r in new] == [True, True]
    assert [r.bounds for r in new] == [{0: (1536, 1536), 1: (0, 0)}] * 2
    # and a page on the wrong node is still caught, by its own chunk
    monkeypatch.setattr(R, "page_nodes",
                        lambda pid, lo, hi, page: [1] + [0] * ((hi - lo) // page - 1))
    bad = PL.registry_ranges(1, cfg, reg, [vma])
    assert [r.misplaced for r in bad] == [1, 1] and not any(r.within for r in bad)


def test_expected_pages_follow_the_origin_of_a_cut_placement():
    cfg = PL.parse_stripe("0:3,1:1")
    o = 0x7f0000000000
    # chunks 0..7 of the placement: 0 0 0 1 0 0 0 1; [4 MiB+4 KiB, 8 MiB) is chunks 2 and 3
    assert PL.expected_pages(cfg, o, o + 4 * MiB + PAGE, o + 8 * MiB) == {0: 511, 1: 512}
    assert [PL.chunk_node(cfg, c) for c in range(8)] == [0, 0, 0, 1, 0, 0, 0, 1]


def test_a_hole_cuts_the_record_and_each_piece_keeps_its_origin(prog):
    s, audits, regs = _audit_live(prog, ["mmap:12M", "hole:4M"], PP.preload_env("0:1"))
    (b,) = s.blocks
    mine = [p for p in regs["parent"].placements if b.address <= p.start < b.address + 12 * MiB]
    assert [(p.origin, p.start - b.address, p.end - b.address) for p in mine] == [
        (b.address, 0, 4 * MiB), (b.address, 8 * MiB, 12 * MiB)]
    assert all(r.within for r in audits["parent"].ranges)


def test_a_hole_smaller_than_the_minimum_still_cuts_the_record(prog):
    # munmap below --min-size takes the fast path unless the registry says it touches a record
    s, audits, regs = _audit_live(prog, ["mmap:12M", "hole:1M"], PP.preload_env("0:1"))
    (b,) = s.blocks
    mine = [p for p in regs["parent"].placements if b.address <= p.start < b.address + 12 * MiB]
    assert sorted((p.start - b.address, p.end - b.address) for p in mine) == [
        (0, 1 * MiB), (2 * MiB, 12 * MiB)]


def test_a_placed_block_shrunk_below_the_minimum_keeps_only_its_mapped_part(prog):
    # realloc(4 MiB placed block, 100): glibc shrinks the mapping in place (mremap) to a page.
    # Before the fix the record kept 4 MiB + 4 KiB, most of it no longer mapped.
    env = PP.preload_env("0:1", CXLKIT_PRELOAD_CACHE="0")
    s, audits, regs = _audit_live(prog, ["malloc:4M", "realloc:100"], env)
    (b,) = s.blocks
    mine = [p for p in regs["parent"].placements if p.start <= b.address < p.end]
    assert [(p.end - p.start) for p in mine] == [PAGE]
    assert not [p for p in regs["parent"].placements if p.end - p.start > PAGE]


def test_a_freed_block_leaves_the_registry_and_a_fork_child_edits_its_own(prog):
    env = PP.preload_env("0:1", CXLKIT_PRELOAD_CACHE="0")
    s, audits, regs = _audit_live(prog, ["malloc:5M", "mmap:4M", "free", "mmap:6M", "fork"],
                                  env, readies=2)
    starts = {who: {p.start for p in r.placements} for who, r in regs.items()}
    mmap6 = [b for b in s.blocks if b.who == "parent"][0]
    child_own = [b for b in s.blocks if b.name == "child-malloc"][0]
    assert mmap6.address in starts["parent"] and mmap6.address in starts["child"]
    assert len(starts["parent"]) == 1  # the freed and unmapped blocks left
    assert any(p <= child_own.address < p + 4 * MiB for p in starts["child"])
    assert not any(p <= child_own.address < p + 4 * MiB for p in starts["parent"])
    assert audits["parent"].source == audits["child"].source == "registry"


def _registry_bytes(records, *, magic=b"CXLKSTR1", version=1, rsize=32, capacity=16,
                    gen=2, used=None):
    used = len(records) if used is None else used
    head = R.HEADER.pack(magic, version, rsize, capacity, used, gen, 0)
    return head + b"".join(R.RECORD.pack(*r) for r in records)


def test_read_checks_every_record_and_refuses_a_foreign_file(tmp_path):
    p = tmp_path / "reg"
    a = 0x7f0000000000
    p.write_bytes(_registry_bytes([(a, a, a + 4 * MiB, 1), (a, a + 1, a + 4 * MiB, 1),
                                   (a + MiB, a, a + 4 * MiB, 1), (a, a, a + MiB, 7)]))
    reg = R.read(p, PAGE)
    assert reg.placements == [R.Placement(a, a, a + 4 * MiB)] and reg.skipped == 3
    for kw, says in [({"magic": b"NOTMINE!"}, "not a cxlkit-stripes registry"),
                     ({"rsize": 64}, "record size 64"),
                     ({"capacity": 4, "used": 5}, "capacity 4, used 5: out of range"),
                     ({"capacity": 1 << 30}, "out of range")]:
        p.write_bytes(_registry_bytes([], **kw))
        with pytest.raises(R.RegistryError, match=str(p)) as e:
            R.read(p, PAGE)
        assert says in str(e.value)
    p.write_bytes(b"short")
    with pytest.raises(R.RegistryError, match="shorter than the header"):
        R.read(p, PAGE)


def test_read_gives_up_on_a_registry_that_stays_mid_edit(tmp_path):
    p = tmp_path / "reg"
    p.write_bytes(_registry_bytes([], gen=3))
    with pytest.raises(R.RegistryError, match="kept editing it"):
        R.read(p, PAGE, tries=3)


def test_find_returns_none_without_a_registry_and_raises_for_a_missing_pid(tmp_path):
    assert R.find(os.getpid(), PL.Path("/proc")) is None
    (tmp_path / "proc").mkdir()
    with pytest.raises(ProcessLookupError):
        R.find(4242, tmp_path / "proc")


def test_page_nodes_of_this_process_and_a_refused_query():
    import mmap
    import ctypes
    m = mmap.mmap(-1, 4 * PAGE)
    m.write(b"x" * PAGE)  # one page present, three not
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    st = list(R.page_nodes(os.getpid(), addr, addr + 4 * PAGE, PAGE))
    assert st[0] >= 0 and st[1:] == [-2, -2, -2]
    with pytest.raises(OSError):
        R.page_nodes(2 ** 22 + 12345, addr, addr + PAGE, PAGE)  # no such process
    del addr
    m.close()


def test_fuzz_parse_gives_checked_placements_or_a_registry_error():
    # the registry is a memfd of the audited process (any program can write it): random
    # headers and records, some of them near-valid, give only sane placements or
    # RegistryError naming the file, never another exception
    from hypothesis import given, settings
    from hypothesis import strategies as st

    a = 0x7f0000000000
    rec = st.tuples(st.sampled_from([a, a + MiB, 0, 2**64 - PAGE]),
                    st.sampled_from([a, a + 1, a + MiB, 1 << 57, 0]),
                    st.sampled_from([a + 4 * MiB, a, 2**64 - 1, 1 << 57]),
                    st.sampled_from([1, 0, 7]))

    @settings(max_examples=300, deadline=None)
    @given(recs=st.lists(rec, max_size=8), used=st.integers(0, 2**64 - 1),
           capacity=st.integers(0, 2**64 - 1), flips=st.lists(
               st.tuples(st.integers(0, 64 + 8 * 32 - 1), st.integers(1, 255)), max_size=4),
           cut=st.integers(0, 64 + 8 * 32))
    def check(recs, used, capacity, flips, cut):
        raw = bytearray(_registry_bytes(recs, used=min(used, len(recs)) if used % 3 else used,
                                        capacity=capacity if capacity % 2 else 64))
        for off, x in flips:
            if off < len(raw):
                raw[off] ^= x
        raw = bytes(raw[:cut]) if cut < len(raw) and cut % 5 == 0 else bytes(raw)
        try:
            reg = R.parse("fuzz-reg", raw[:R.HEADER.size], raw[R.HEADER.size:], PAGE)
        except R.RegistryError as e:
            assert "fuzz-reg" in str(e)
            return
        for p in reg.placements:
            assert p.origin <= p.start < p.end < 1 << 57
            assert (p.origin | p.start | p.end) % PAGE == 0
        assert len(reg.placements) + reg.skipped <= len(raw[R.HEADER.size:]) // R.RECORD.size

    check()

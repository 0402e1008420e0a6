"""The v2 pool fuzzer (tests/fuzz/fuzz_v2.py): its field table matches the native headers, its
known-defect classifier is precise, and a short run over every structure finds no crash,
hang, wrong bytes, lost object or untyped error other than the known defects. The long run:
`make fuzz FUZZ_TRIALS=5000` (mk/fuzz.mk)."""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))

import fuzz_v2  # noqa: E402
import layout  # noqa: E402


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict:
    """'struct field' -> (offset, size) and constants, printed by a C++ program built on the
    native headers."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler to check the fuzzer's field table against the headers")
    win = (REPO / "native/msg/win.cpp").read_text()
    m = re.search(r"struct WinHdr \{.*?\};", win, re.S)
    assert m, "native/msg/win.cpp: WinHdr not found"
    d = tmp_path_factory.mktemp("layout")
    (d / "layout.cpp").write_text(layout.c_program(m.group(0)))
    subprocess.run([cxx, "-std=c++17", "-I", str(REPO / "native"), "-I", str(REPO / "include"),
                    "-o", str(d / "layout"), str(d / "layout.cpp")], check=True, timeout=120)
    out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True,
                         timeout=30).stdout
    fields, consts = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "const":
            consts[parts[1]] = int(parts[2])
        else:
            fields[(parts[0], parts[1])] = (int(parts[2]), int(parts[3]))
    return {"fields": fields, "consts": consts}


def test_field_table_matches_the_native_headers(c_layout):
    checked = 0
    for sname, fields in layout.CSIDE.items():
        for fname in fields or {}:
            off, fmt = layout.STRUCTS[sname][fname]
            c_off, c_size = c_layout["fields"][(sname, fname)]
            assert off == c_off, f"{sname}.{fname}: table offset {off}, header {c_off}"
            if (sname, fname) in layout.WORDS_OF:
                assert struct.calcsize(fmt) <= c_size, f"{sname}.{fname} wider than its member"
            else:
                assert struct.calcsize(fmt) == c_size, f"{sname}.{fname}: size differs"
            checked += 1
    assert checked >= 100
    for name, (value, _) in layout.CONSTANTS.items():
        assert c_layout["consts"][name] == value, name


def test_recency_header_fields_match_the_python_table():
    from cxlkit.kv import recency

    raw = recency.header(5, 1024)
    tab = layout.STRUCTS["kv_recency"]
    assert struct.unpack_from(tab["magic"][1], raw, tab["magic"][0])[0] == recency.MAGIC
    assert struct.unpack_from(tab["version"][1], raw, tab["version"][0])[0] == recency.VERSION
    assert struct.unpack_from(tab["host"][1], raw, tab["host"][0])[0] == 5
    assert struct.unpack_from(tab["nslots"][1], raw, tab["nslots"][0])[0] == 1024


@pytest.fixture(scope="module")
def template():
    path = f"/dev/shm/cxlkit-fuzz2-test-{os.getpid()}"
    try:
        yield path, fuzz_v2.make_template(path)
    finally:
        Path(path).unlink(missing_ok=True)


def test_template_holds_every_structure(template):
    _, t = template
    want = {"superblock", "slot_identity", "slot_bakery", "slot_mutex", "slot_counters",
            "slot_free_heads", "slot_pending", "slot_creating", "claim", "name_entry", "lease",
            "extmap", "object_header", "free_block", "payload", "kv_block_header",
            "kv_counters", "kv_recency", "msg_rank", "msg_rdv", "msg_mem", "msg_win",
            "msg_hdr", "msg_short", "rpc_srv", "rpc_slot"} | {f"{s}@{o}" for s in (
                "ring_header", "ring_head", "ring_prod", "ring_cell") for o in ("msg", "rpc")}
    assert want <= set(t["at"]), want - set(t["at"])
    assert all(t["at"][s] for s in want)


def test_mutation_is_one_field_and_replays_from_seed_and_trial(template):
    path, t = template
    copies = [f"{path}-a", f"{path}-b"]
    try:
        done = []
        for c in copies:
            shutil.copyfile(path, c)
            done.append(fuzz_v2.mutate(c, t, fuzz_v2.trial_rng(7, 3), "name_entry"))
        assert done[0] == done[1]
        a, b = (Path(c).read_bytes() for c in copies)
        assert a == b
        orig = np.frombuffer(Path(path).read_bytes(), dtype=np.uint8)
        diff = np.flatnonzero(orig != np.frombuffer(a, dtype=np.uint8))
        assert all(done[0]["offset"] <= i < done[0]["offset"] + 8 for i in diff)
    finally:
        for c in copies:
            Path(c).unlink(missing_ok=True)


def _ev(outcome, op, etype=None, module="builtins"):
    ev = {"who": "x", "op": op, "outcome": outcome}
    if etype:
        ev["err"] = {"type": etype, "module": module, "errno": None, "message": "m"}
    return ev


@pytest.mark.parametrize("m, ev, want", [
    ({"structure": "live:slot_bakery", "field": "choosing"}, _ev("hang", "rank0:create"),
     "bakery-garbage-hang"),
    ({"structure": "slot_counters", "field": "nlive"}, _ev("false_full", "create"),
     "derived-counters-refuse"),
    ({"structure": "superblock", "field": "data_off"}, _ev("bad_superblock", "open"),
     "sb-data-off-unaligned"),
    ({"structure": "live:msg_hdr", "field": "len"}, _ev("untyped", "rank1:msg.recv",
                                                         "MemoryError"), "rdv-length-sizing"),
    ({"structure": "live:ring_head@rpc", "field": "head"},
     _ev("typed", "client:rpc.call", "RpcServerLostError", "cxlkit.errors"),
     "rpc-head-server-gone"),
    ({"structure": "live:ring_cell@msg", "field": "kind"},
     _ev("untyped", "rank0:msg.isend.wait", "FileExistsError"), "untyped-msg-rpc"),
    ({"structure": "live:ring_prod@rpc", "field": "closed"},
     _ev("misreported", "client:rpc.call", "RpcServerLostError", "cxlkit.errors"),
     "rpc-dropped-client-told-server-gone"),
    ({"structure": "extmap", "field": "word0"},
     {"who": "host0", "op": "read.verify", "outcome": "untyped",
      "err": {"type": "OSError", "module": "builtins", "errno": 22, "message": "m"}},
     "verify-untyped-einval"),
    # not known: other structures, outcomes or error types stay new findings
    ({"structure": "live:msg_rank", "field": "beat"},
     _ev("misreported", "client:rpc.call", "RpcServerLostError", "cxlkit.errors"), None),
    ({"structure": "slot_bakery", "field": "choosing"}, _ev("crash", "create"), None),
    ({"structure": "slot_counters", "field": "nlive"}, _ev("hang", "create"), None),
    ({"structure": "name_entry", "field": "block"}, _ev("untyped", "read.open", "OSError"),
     None),
    ({"structure": "live:msg_hdr", "field": "tag"}, _ev("untyped", "rank1:msg.recv",
                                                         "MemoryError"), None),
    ({"structure": "superblock", "field": "data_off"}, _ev("crash", "open"), None),
    ({"structure": "payload", "field": "byte0"}, _ev("wrong", "read.read"), None),
])
def test_known_defect_classifier_is_precise(m, ev, want):
    assert fuzz_v2.known_finding(m, ev) == want


def test_judge_marks_server_gone_as_misreported_only_while_the_server_had_no_error():
    m = {"structure": "live:rpc_slot", "field": "id"}
    lost = _ev("typed", "client:rpc.call", "RpcServerLostError", "cxlkit.errors")
    assert fuzz_v2.judge(m, [dict(lost)])["outcome"] == "misreported"
    server = {"who": "server", "op": "rpc.serve", "outcome": "typed",
              "err": {"type": "MsgError", "module": "cxlkit.errors", "errno": 74, "message": ""}}
    assert fuzz_v2.judge(m, [dict(lost), server])["outcome"] == "typed"


def test_judge_counts_only_failures_as_findings():
    m = {"structure": "lease", "field": "pid"}
    j = fuzz_v2.judge(m, [_ev("typed", "open", "PoolCorruptError", "cxlkit.errors"),
                          _ev("garbled", "rank1:msg.recv")])
    assert j == {"outcome": "typed", "known": [], "new": []}
    j = fuzz_v2.judge(m, [_ev("lost", "repair")])
    assert j["outcome"] == "lost" and j["new"]


SHORT = 40


def test_short_fuzz_run_finds_no_new_crash_hang_wrong_bytes_or_untyped_error():
    """Every static structure, and a few live ones (the bakery's live case waits out the
    bakery's bound, seconds a trial: left to the long run and the hostile-neighbour test)."""
    live = ["live:msg_hdr", "live:ring_cell@msg", "live:msg_rdv", "live:rpc_slot",
            "live:ring_head@rpc", "live:rpc_srv", "live:ring_head@msg"]
    static = ["superblock", "slot_identity", "slot_bakery", "slot_mutex", "slot_counters",
              "slot_free_heads", "slot_pending", "slot_creating", "claim", "name_entry",
              "lease", "extmap", "object_header", "free_block", "payload", "kv_block_header",
              "kv_counters", "kv_recency", "msg_rank", "msg_rdv", "msg_mem", "msg_win",
              "msg_hdr", "rpc_srv", "rpc_slot", "ring_header@msg", "ring_head@rpc",
              "ring_cell@msg", "ring_prod@rpc", "ring_cell@rpc", "ring_header@rpc",
              "ring_head@msg", "ring_prod@msg"]
    r = fuzz_v2.run(SHORT, seed=20261128, timeout=10.0, structures=static + live)
    assert r["trials"] == SHORT
    assert r["new_findings"] == 0, r["new"]
    assert not r["known_findings"], r["known_findings"]  # every known defect is fixed
    assert set(r["per_structure"]) == set(static + live)
    assert r["outcomes"].get("ok", 0) + r["outcomes"].get("typed", 0) > SHORT // 2, r


class UntypedError(AssertionError):
    """A user operation raised an error outside cxlkit's typed classes."""


def test_verify_of_an_object_in_an_extent_another_host_claims_is_typed(template):
    """fuzz_v2 --seed 1 --trial 894 --structure extmap: host 0's extent map marks the extent
    holding host 1's h1-o3 as the start of a run of its own."""
    import cxlkit
    from cxlkit.errors import PoolError

    path, t = template
    copy = f"{path}-stolen"
    shutil.copyfile(path, copy)
    try:
        with cxlkit.Pool(copy, host_id=0) as p:
            off = p.info("h1-o3").offset
        e = (off - t["data_off"]) // t["extent_bytes"]
        word = t["extmap_off"] + 8 * (e // 32)  # host 0's map
        old = fuzz_v2.u(copy, word)
        with open(copy, "r+b") as f:
            f.seek(word)
            f.write(struct.pack("<Q", old | (3 << (2 * (e % 32)))))  # START
        with cxlkit.Pool(copy, host_id=0) as p, p.open("h1-o3") as obj:
            for op in (obj.read, obj.verify):
                try:
                    op()
                except (PoolError, ValueError):
                    pass  # refused, typed
                except OSError as exc:
                    raise UntypedError(f"{op.__name__}: {type(exc).__name__}: {exc}") from exc
    finally:
        Path(copy).unlink(missing_ok=True)


def _set_field(path: str, off: int, fmt: str, value: int, *, resign: bool = False) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(struct.pack(fmt, value))
    if resign:
        fuzz_v2._resign(path)


@pytest.mark.parametrize("structure, field, at, value, defect", [
    pytest.param("superblock", "data_off", lambda t: 0, lambda cur: cur - 64,
                 "sb-data-off-unaligned", id="superblock.data_off-64"),
    pytest.param("slot_counters", "nlive", lambda t: t["host_table_off"], lambda cur: 257,
                 "derived-counters-refuse", id="host0.nlive=257"),
    pytest.param("slot_counters", "ncreating", lambda t: t["host_table_off"] + 4096,
                 lambda cur: 300, "derived-counters-refuse", id="host1.ncreating=300"),
])
def test_fixed_pool_defects_replayed_exactly_stay_fixed(template, structure, field, at,
                                                       value, defect):
    """One field set as a trial of the fuzzer would, every user operation run on the copy:
    no failure, and never the defect this case once showed."""
    path, t = template
    copy = f"{path}-known"
    shutil.copyfile(path, copy)
    try:
        foff, fmt = layout.STRUCTS[structure][field]
        off = at(t) + foff
        _set_field(copy, off, fmt, value(fuzz_v2.u(copy, off, fmt)),
                   resign=structure == "superblock")
        m = {"structure": structure, "field": field}
        j = fuzz_v2.judge(m, fuzz_v2.exercise(copy, m, t, timeout=20))
        assert not j["new"], f"new finding: {j['new']}"
        assert not j["known"], f"{fuzz_v2.KNOWN[defect]} is back: {j}"
    finally:
        Path(copy).unlink(missing_ok=True)

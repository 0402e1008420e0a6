"""A hostile neighbour: while honest ranks talk (a cxlkit.msg job of two ranks on hosts 0 and
1, an RPC server on host 0 and its client on host 1, each a forked process), another process
writes garbage into their live rings, cells, rendezvous buffers, rank and service objects, or
lies in its own bakery registers as a live host (tests/fuzz/live.py). The honest parties must
end with typed errors or drop the bad peer, never hang or crash (every party is bounded by a
child timeout) and never raise an untyped error.

A case a known defect breaks is marked xfail(raises=KnownDefect): it counts as expected only
when every failure it saw is that defect (fuzz_v2.known_finding), so another failure in it
still fails the test, and it passes once the defect is fixed."""
from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

import fuzz_v2  # noqa: E402
import live  # noqa: E402

BAD = {"crash", "hang", "untyped", "misreported"}


class KnownDefect(AssertionError):
    """Every failure of the case is the known defect it is marked with."""


def _attack(structure: str, field: str, value, *, which: int = 0, persist: bool = False):
    """attack(path): field of the which-th live instance of structure := value."""
    fields = fuzz_v2.structure_fields(structure)

    def attack(path: str) -> dict:
        at = live.where(path, structure)
        assert at, f"no live {structure} to attack"
        foff, fmt = fields[field]
        off = at[min(which, len(at) - 1)] + foff
        raw = value if isinstance(value, bytes) else struct.pack(fmt, value)
        live.write(path, off, fmt, raw)
        m = {"structure": "live:" + structure, "field": field, "offset": off}
        if persist:
            m["persist"] = [off, raw.hex()]
        return m

    return attack


def _check(events: list[dict], m: dict, known: set[str] | None) -> None:
    fuzz_v2.judge(m, events)  # marks misreported events
    bad = [ev for ev in events if ev["outcome"] in BAD]
    if not bad:
        return
    kinds = {fuzz_v2.known_finding(m, ev) for ev in bad}
    if known and kinds <= known:
        raise KnownDefect(f"{[fuzz_v2.ALL_KNOWN[k] for k in sorted(kinds)]}: {bad[:2]}")
    raise AssertionError(f"honest parties failed under {m}: {bad[:3]}")


@pytest.fixture
def live_pool(pool_path):
    live.make_pool(pool_path)
    return pool_path


def known(defects: set[str]):
    return pytest.mark.xfail(raises=KnownDefect, strict=False, reason="known defect: " + "; ".join(
        fuzz_v2.ALL_KNOWN[d] for d in sorted(defects)))


HUGE = (1 << 63) + 12345
MSG_CASES = [
    ("ring_header@msg", "magic", 0, {}),
    ("ring_header@msg", "cell_bytes", 0xFFFFFFFF, {"persist": True}),
    ("ring_header@msg", "ncells", 3, {"persist": True}),
    ("ring_head@msg", "head", HUGE, {"persist": True}),
    ("ring_head@msg", "head", 0, {"which": 1, "persist": True}),
    ("ring_prod@msg", "closed", 1, {}),
    ("ring_prod@msg", "wake", 0xFFFFFFFF, {"persist": True}),
    ("ring_cell@msg", "stamp", HUGE, {}),
    ("ring_cell@msg", "nbytes", 0xFFFFFFFF, {}),
    ("ring_cell@msg", "kind", 0xDEAD, {"which": 1}),
    ("msg_hdr", "len", 1 << 40, {"which": 1}),   # the RTS: a receive sized from it
    ("msg_hdr", "len", 1000, {"which": 1}),
    ("msg_hdr", "ncells", 0xFFFFFFFF, {}),
    ("msg_hdr", "rdv_index", 0xFFFFFFF0, {"which": 1}),
    ("msg_hdr", "rdv_off", HUGE, {"which": 1}),
    ("msg_rdv", "ready", HUGE, {"persist": True}),
    ("msg_rdv", "cookie", 0, {"persist": True}),
    ("msg_rdv", "magic", 0, {"persist": True}),
    ("msg_rank", "beat", 0, {"persist": True}),
    ("msg_rank", "barrier", HUGE, {"persist": True}),
    ("msg_rank", "pid", 1, {}),
]
RPC_CASES = [
    ("rpc_srv", "magic", 0, {"persist": True}),
    ("rpc_srv", "slot_bytes", 0xFFFFFFFF, {}),
    ("rpc_srv", "pid", 0x7FFFFFFF, {"persist": True}),
    ("ring_head@rpc", "head", HUGE, {"persist": True}),
    ("ring_head@rpc", "head", HUGE, {"which": 1, "persist": True}),
    ("ring_prod@rpc", "closed", 1, {"persist": True}),
    ("ring_header@rpc", "ncells", 0, {"persist": True}),
    ("ring_cell@rpc", "nbytes", 0xFFFFFFFF, {"which": 1}),
    ("ring_cell@rpc", "stamp", 7, {"which": 1}),
    ("rpc_slot", "id", HUGE, {"which": 1}),
    ("rpc_slot", "method", 0xFFFFFFFF, {"which": 1}),
]
# cases a known defect breaks (fuzz_v2.KNOWN), by (structure, field, which, value): none
# since their fixes; a case listed here is expected to fail only with that defect
KNOWN_CASES: dict[tuple, set[str]] = {}


def _key(s: str, f: str, v, kw: dict) -> tuple:
    return (s, f, kw.get("which", 0), v)


def _param(case):
    s, f, v, kw = case
    key = _key(s, f, v, kw)
    marks = [pytest.mark.slow]
    if key in KNOWN_CASES:
        marks.append(known(KNOWN_CASES[key]))
    return pytest.param(s, f, v, kw, id=f"{s}.{f}={v:#x}" + (
        f"@{kw['which']}" if "which" in kw else "") + ("-persist" if kw.get("persist") else ""),
        marks=marks)


@pytest.mark.parametrize("structure, field, value, kw", [_param(c) for c in MSG_CASES])
def test_garbage_in_a_live_job_gives_typed_errors_never_a_hang(live_pool, structure, field,
                                                               value, kw):
    attack = _attack(structure, field, value, **kw)
    events, m = live.live_msg(live_pool, attack, timeout=30)
    assert m is not None, "the attacker never ran"
    _check(events, m, KNOWN_CASES.get(_key(structure, field, value, kw)))


@pytest.mark.parametrize("structure, field, value, kw", [_param(c) for c in RPC_CASES])
def test_garbage_in_a_live_rpc_service_gives_typed_errors_never_a_hang(live_pool, structure,
                                                                       field, value, kw):
    attack = _attack(structure, field, value, **kw)
    events, m = live.live_rpc(live_pool, attack, timeout=30)
    assert m is not None, "the attacker never ran"
    _check(events, m, KNOWN_CASES.get(_key(structure, field, value, kw)))


@pytest.mark.slow
@pytest.mark.parametrize("field, value", [("choosing", 1), ("number", 1)])
def test_a_live_host_lying_in_its_bakery_registers_does_not_hang_creates(live_pool, field,
                                                                         value):
    """Host 2 stays alive (beating) with garbage in its bakery line, as written by its own
    writer; rank 0's create must not wait on it forever (bounded by the child's timeout)."""
    slot2 = 2

    def attack(path: str) -> dict:
        off = live.where(path, "slot_bakery")[slot2] + fuzz_v2.structure_fields(
            "slot_bakery")[field][0]
        live.write(path, off, "<Q", value)
        return {"structure": "live:slot_bakery", "field": field, "offset": off,
                "persist": [off, value.to_bytes(8, "little").hex()]}

    events, m = live.live_msg(live_pool, attack, timeout=12, neighbour=True)
    _check(events, m, {"bakery-garbage-hang"})


def test_the_honest_job_and_service_run_clean_without_an_attacker(live_pool):
    events, _ = live.live_msg(live_pool, lambda path: {"structure": "none"}, timeout=30)
    assert events == []
    os.unlink(live_pool)
    live.make_pool(live_pool)
    events, _ = live.live_rpc(live_pool, lambda path: {"structure": "none"}, timeout=30)
    assert events == []

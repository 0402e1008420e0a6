"""The allocator and name table as a hypothesis state machine against a dict model: after any
sequence of create / destroy / hold (a reader's lease) / release / reopen, objects do not
overlap, stay inside this host's partition, names are unique, payloads are intact, and the
capacity accounting is exact (used + free == partition; used == what the blocks hold)."""
from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import cxlkit

HEADER = 320          # object header bytes (docs/pool-format.md)
MIN_BLOCK = HEADER + 64
MAX_OBJECTS = 12
NAMES = st.sampled_from([f"obj{i}" for i in range(16)])
SIZES = st.sampled_from([1, 63, 64, 65, 1000, 4096, 65536, 300_000, 700_000])


def need(nbytes: int) -> int:
    return (HEADER + nbytes + 63) // 64 * 64


def extent_map(path: str) -> list[int]:
    """Host 0's extent map as the pool file holds it (docs/pool-format.md: 2 bits per extent,
    0 free, 1 reserved, 2 continues a run, 3 starts one)."""
    with open(path, "rb") as f:
        sb = f.read(248)
        extent, n, off = struct.unpack_from("<QQQ", sb, 200)
        f.seek(off)
        words = struct.unpack(f"<{(n + 31) // 32}Q", f.read((n + 31) // 32 * 8))
    return [(words[e // 32] >> (2 * (e % 32))) & 3 for e in range(n)]


def longest_free_extents(path: str) -> int:
    best = cur = 0
    for s in extent_map(path):
        cur = cur + 1 if s == 0 else 0
        best = max(best, cur)
    return best


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.path = f"/dev/shm/cxlkit-test-sm-{uuid.uuid4().hex[:12]}"
        self.pool = cxlkit.Pool(self.path, size=4 << 20, host_id=0, max_hosts=1,
                                max_objects=MAX_OBJECTS)
        self.model: dict[str, tuple[int, int]] = {}   # name -> (nbytes, fill byte)
        self.held: list[tuple[str, object, int]] = []  # (name, object, nbytes)
        self.counter = 0

    def teardown(self) -> None:
        for _, o, _ in self.held:
            o.close()
        self.pool.close()
        Path(self.path).unlink()

    @rule(name=NAMES, nbytes=SIZES)
    def create(self, name, nbytes):
        if name in self.model:
            with pytest.raises(FileExistsError):
                self.pool.create(name, nbytes)
            return
        largest = self.pool.fsck(repair=False).largest_free
        before = self.pool.stat()
        try:
            obj = self.pool.create(name, nbytes)
        except cxlkit.PoolFullError:
            # never refused while a held block or a stretch of free extents would fit
            longest = longest_free_extents(self.path)
            assert len(self.model) >= MAX_OBJECTS or (
                largest < need(nbytes) and longest * before.extent_bytes < need(nbytes))
            return
        assert len(self.model) < MAX_OBJECTS
        after = self.pool.stat()
        if largest >= need(nbytes):  # it fitted a held block: no extent was claimed
            assert after.extents_held == before.extents_held
        self.counter = (self.counter + 1) % 251
        fill = self.counter + 1
        view = memoryview(obj)
        assert view[0] == 0 and view[-1] == 0  # created zeroed
        view[:] = bytes([fill]) * nbytes
        view.release()
        obj.publish(checksum=True)
        obj.close()
        self.model[name] = (nbytes, fill)

    @rule(name=NAMES)
    def destroy(self, name):
        if name not in self.model:
            with pytest.raises(KeyError):
                self.pool.destroy(name)
            return
        self.pool.destroy(name)
        del self.model[name]

    @precondition(lambda self: self.model and len(self.held) < 3)
    @rule(data=st.data())
    def hold(self, data):
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.held.append((name, self.pool.open(name), self.model[name][0]))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data):
        i = data.draw(st.integers(0, len(self.held) - 1))
        _, obj, _ = self.held.pop(i)
        obj.close()

    @rule()
    def reopen(self):
        for _, o, _ in self.held:
            o.close()
        self.held.clear()
        self.pool.close()
        self.pool = cxlkit.Pool(self.path, host_id=0)

    @invariant()
    def listing_matches_model(self):
        objs = self.pool.list()
        assert sorted(o.name for o in objs) == sorted(self.model)
        for o in objs:
            assert o.state == "live" and o.nbytes == self.model[o.name][0]

    @invariant()
    def no_overlap_in_bounds(self):
        st_ = self.pool.stat()
        lo, hi = st_.data_offset, st_.data_offset + st_.partition_bytes
        spans = sorted((o.offset - HEADER, o.offset + o.nbytes) for o in self.pool.list())
        for a, b in spans:
            assert lo <= a < b <= hi
        for (_, b), (a, _) in zip(spans, spans[1:]):
            assert b <= a

    @invariant()
    def accounting_exact(self):
        st_ = self.pool.stat()
        rep = self.pool.fsck(repair=False)
        assert rep.clean
        assert st_.used_bytes + st_.free_bytes == st_.extents_held * st_.extent_bytes
        assert st_.extents_held + st_.extents_free == st_.nextents  # one host: no one else holds
        states = extent_map(self.path)
        assert states.count(1) == 0  # no reservation outlives a claim
        assert sum(1 for x in states if x >= 2) == st_.extents_held
        if states.count(3):
            assert states[next(i for i, x in enumerate(states) if x)] == 3  # no orphan first
        assert rep.bytes_used == st_.used_bytes and rep.bytes_free == st_.free_bytes
        # blocks: live objects plus destroyed ones a reader still holds
        live = [need(n) for n, _ in self.model.values()]
        dead_held = [need(n) for (off, gen), n in
                     {(o.offset, o.generation): n for _, o, n in self.held
                      if not o.valid()}.items()]
        blocks = live + dead_held
        assert rep.objects_live == len(live)
        assert sum(blocks) <= st_.used_bytes < sum(blocks) + MIN_BLOCK * max(1, len(blocks))
        if not blocks:
            assert st_.used_bytes == 0
            assert st_.extents_held <= 1  # emptied extents went back (one kept: no churn)

    @invariant()
    def payloads_intact(self):
        for name, (nbytes, fill) in self.model.items():
            with self.pool.open(name) as o:
                data = o.read()
                assert len(data) == nbytes and data.count(fill) == nbytes, name
                o.verify()


TestPoolStateMachine = PoolMachine.TestCase
TestPoolStateMachine.settings = settings(max_examples=40, stateful_step_count=25,
                                         deadline=None)

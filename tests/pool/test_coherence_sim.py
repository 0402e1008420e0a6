"""The non-coherence simulator (coherence="sim"): each host id sees the pool through
a cache of its own, so a missing flush or invalidate shows. The mutation tests remove one
protocol step on purpose (cxlkit.testing.mutate) and show that the simulator catches it while
coherent memory (coherence="none" on this machine) does not."""
from __future__ import annotations

import glob
import os

import pytest

import cxlkit
from cxlkit import _native, msg
from cxlkit.testing import MUTATIONS, mutate, sim_counts

MiB = 1 << 20
PAYLOAD = bytes(range(256)) * 16  # 4 KiB, no zero line


@pytest.fixture
def path(pool_path, tmp_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_SIM_DIR", str(tmp_path))
    monkeypatch.setenv("CXLKIT_SIM_EVICT", "0")  # mutation tests: no eviction may mask a step
    return pool_path


def two_hosts(path: str, coherence: str) -> tuple[cxlkit.Pool, cxlkit.Pool]:
    a = cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2, coherence=coherence)
    return a, cxlkit.Pool(path, host_id=1, coherence=coherence)


# ---- one scenario per mutation: True when the other host saw what the protocol promises ----
def publish_then_read(path: str, coherence: str) -> bool:
    a, b = two_hosts(path, coherence)
    with a, b:
        o = a.create("x", len(PAYLOAD))
        o.write(0, PAYLOAD)
        o.publish()
        o.close()
        with b.open("x") as r:
            return r.read() == PAYLOAD


def ring_round_trip(path: str, coherence: str) -> bool:
    a, b = two_hosts(path, coherence)
    # the rings close before their pools (a pool refuses to close under a ring)
    with a, b, msg.Ring.create(a, "r", cell_bytes=128, ncells=4) as prod, \
            msg.Ring.open(b, "r") as cons:
        got = []
        for lap in range(3):
            for k in range(4):
                if not prod.push(bytes([lap, k]) * 8, kind=k):
                    return False  # the consumer's head never reached the producer
            while (m := cons.pop()) is not None:
                got.append(m)
        return got == [(bytes([lap, k]) * 8, k) for lap in range(3) for k in range(4)]


def counter_seen_by_another_host(path: str, coherence: str) -> bool:
    a, b = two_hosts(path, coherence)
    with a, b:
        a.create("ctr", 64, publish=True).close()
        with a.open("ctr", writable=True) as w, b.open("ctr") as r:
            w.add_u64(8, 5)
            w.add_u64(8, 2)
            r.invalidate()
            return int(r.numpy("uint64")[1]) == 7


SCENARIOS = {
    "publish_payload_flush": publish_then_read,
    "read_invalidate": publish_then_read,
    "ring_head_flush": ring_round_trip,
    "counter_writeback": counter_seen_by_another_host,
}


def test_every_mutation_has_a_scenario_and_the_native_names_agree():
    assert set(SCENARIOS) == set(MUTATIONS) == set(_native.mutation_names())
    with pytest.raises(ValueError, match="mutation"):
        with mutate("drop_everything"):
            pass


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_removed_protocol_step_is_caught_by_sim_and_not_by_coherent_memory(path, name):
    scenario = SCENARIOS[name]
    assert scenario(path, "sim"), "the intact protocol must pass under the simulator"
    cxlkit.pool.remove(path)
    with mutate(name):
        assert scenario(path, "none"), "coherent memory hides the missing step"
        cxlkit.pool.remove(path)
        assert not scenario(path, "sim"), f"the simulator missed the removed step {name}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_protocols_pass_under_sim_with_random_evictions(pool_path, tmp_path, monkeypatch,
                                                            seed):
    monkeypatch.setenv("CXLKIT_SIM_DIR", str(tmp_path))
    monkeypatch.setenv("CXLKIT_SIM_SEED", str(seed))
    monkeypatch.setenv("CXLKIT_SIM_EVICT", "1")  # an eviction at every flush and invalidate
    before = sim_counts()
    for scenario in (publish_then_read, ring_round_trip, counter_seen_by_another_host):
        assert scenario(pool_path, "sim"), scenario.__name__
        cxlkit.pool.remove(pool_path)
    after = sim_counts()
    assert after["evictions"] > before["evictions"] and after["writebacks"] > before["writebacks"]


def test_a_store_stays_in_its_hosts_cache_until_written_back(path):
    a, b = two_hosts(path, "sim")
    a2 = cxlkit.Pool(path, host_id=0, coherence="sim")  # another process of host 0, in effect
    with a, b, a2:
        assert a.stat().coherence == b.stat().coherence == "sim"
        a.create("w", 64, publish=True).close()
        with a.open("w", writable=True) as w, b.open("w") as r, a2.open("w") as r0:
            w.numpy("uint64")[0] = 42
            assert int(r0.numpy("uint64")[0]) == 42  # one host: one coherence domain
            r.invalidate()
            assert int(r.numpy("uint64")[0]) == 0  # not written back: the pool has the old word
            w.flush(0, 8)
            assert int(r.numpy("uint64")[0]) == 0  # written back, but b's copy is stale
            r.invalidate()
            assert int(r.numpy("uint64")[0]) == 42


@pytest.mark.parametrize("nt_stores", [False, True])
def test_kv_blocks_put_on_one_host_are_got_on_another(path, nt_stores):
    torch = pytest.importorskip("torch")
    from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes

    layout = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32",
                         block_tokens=16)

    def engine():
        ts = [torch.zeros(2, 4, 16, 2, 16) for _ in range(layout.num_layers)]
        return ts, EngineTensors.per_layer(layout, ts, "KBTHD")

    src, se = engine()
    for t in src:
        t.normal_()
    keys = block_hashes(list(range(48)))
    before = sim_counts()["nt_lines"]
    with Store(path, layout, host_id=0, create=True, size=32 << 20, coherence="sim",
               checksum=True, nt_stores=nt_stores) as w:
        assert w.put(keys, se, [0, 1, 2]) == 3
        with Store(path, layout, host_id=1, coherence="sim", checksum=True) as r:
            dst, de = engine()
            assert r.lookup(keys) == 3
            assert r.get(keys, de, [1, 2, 3]) == 3
            for layer in range(layout.num_layers):
                assert torch.equal(dst[layer][:, 1:4], src[layer][:, 0:3])
    assert (sim_counts()["nt_lines"] > before) == nt_stores


def test_views_are_files_of_their_host_removed_by_its_last_handle(path, tmp_path):
    a, b = two_hosts(path, "sim")
    views = sorted(os.path.basename(v) for v in glob.glob(str(tmp_path / ".cxlkit-sim-*")))
    assert len(views) == 3 and views[0].endswith("-host0") and views[1].endswith("-host1")
    assert views[2].endswith("-locks")
    b.close()
    assert len(glob.glob(str(tmp_path / ".cxlkit-sim-*"))) == 2
    a.close()
    assert glob.glob(str(tmp_path / ".cxlkit-sim-*")) == []


def test_a_hosts_last_close_writes_its_dirty_lines_back(path):
    a, b = two_hosts(path, "sim")
    with b:
        a.create("d", 64, publish=True).close()
        with a.open("d", writable=True) as w:
            w.numpy("uint8")[:8] = 7  # never flushed
        a.close()  # the host keeps running: its cache drains
        with b.open("d") as r:
            r.invalidate()
            assert bytes(r.read(0, 8)) == bytes([7]) * 8


def test_a_sim_directory_that_does_not_exist_is_a_FileNotFoundError(pool_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_SIM_DIR", "/nonexistent-cxlkit-sim-dir")
    with pytest.raises(FileNotFoundError):
        cxlkit.Pool(pool_path, size=8 * MiB, host_id=0, coherence="sim")
    with cxlkit.Pool(pool_path, host_id=0, coherence="none") as p:  # the pool itself is whole
        assert p.fsck(repair=False).clean


# ---- findings of the simulator in today's code, each with the test that failed before ----
def test_fsck_reads_the_name_of_another_hosts_creating_object_from_the_pool(path):
    # A block reused for a new name: host 0 cached the header lines of the old (LIVE) object
    # in an earlier fsck; the new object, still CREATING, must not be judged by that stale
    # name (fsck counted an error: the entry's hash did not match the cached name).
    a, b = two_hosts(path, "sim")
    with a, b:
        old = b.create("old-name", 4096, data=PAYLOAD)
        old.close()
        assert a.fsck(repair=False).clean  # caches the old header's lines in host 0
        b.destroy("old-name")
        o = b.create("a-new-and-longer-name", 4096)  # first fit: the same block, CREATING
        assert o.offset == old.offset
        r = a.fsck(repair=False)
        assert (r.objects_creating, r.errors) == (1, 0), r
        o.close()

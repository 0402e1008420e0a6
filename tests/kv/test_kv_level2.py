"""The level below the pool (cxlkit.kv.level2) with backends that behave or fail on purpose:
demotion on eviction, promotion on a miss (into another pod's pool), integrity of what comes
back, and failures that stay misses (one log line, bounded waits, puts never blocked)."""
import logging
import os
import subprocess
import threading

import pytest
import torch

from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes
from cxlkit.kv.level2 import Level2
from kv_fakes.level2_fake import DictBackend, FailingBackend, HungBackend

LAYOUT = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32", block_tokens=16)
NBLOCKS = 8


def engine(seed=None):
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    ts = [torch.randn(2, NBLOCKS, 16, 2, 16, generator=g) if g else torch.zeros(2, NBLOCKS, 16,
                                                                               2, 16)
          for _ in range(LAYOUT.num_layers)]
    return ts, EngineTensors.per_layer(LAYOUT, ts, "KBTHD")


def pod(path, level2, host_id=0, **kw):
    return Store(path, LAYOUT, create=True, size=32 << 20, host_id=host_id, checksum=True,
                 level2=level2, **kw)


def level(backend, **kw):
    lv = Level2(lambda: backend, **kw)
    return lv


KEYS = block_hashes(list(range(16 * 5)))  # 5 blocks


def test_blocks_evicted_in_one_pod_are_promoted_into_another_pods_pool_intact(pool_path):
    lv = level(DictBackend())
    src, se = engine(seed=1)
    with pod(pool_path, lv) as a, pod(pool_path + "-b", lv) as b:
        assert a.put(KEYS, se, range(5)) == 5
        assert a.clear() == 5  # evicted: each block demoted first
        assert lv.flush(10) and a.stats.demoted == 5 and lv.stats.demoted == 5
        assert b.lookup(KEYS) == 5  # pod B's pool missed them all: promoted from level 2
        assert b.stats.promoted == 5 and len(b.blocks()) == 5
        dst, de = engine()
        assert b.get(KEYS, de, [7, 6, 5, 4, 3]) == 5
        for i, blk in enumerate([7, 6, 5, 4, 3]):
            for s, d in zip(src, dst):
                assert torch.equal(s[:, i], d[:, blk])
    lv.close()


def test_load_promotes_the_blocks_it_misses(pool_path):
    lv = level(DictBackend())
    src, se = engine(seed=2)
    with pod(pool_path, lv) as a, pod(pool_path + "-b", lv) as b:
        a.put(KEYS[:3], se, range(3))
        a.clear()
        assert lv.flush(10)
        b.put(KEYS[:1], se, [0])  # pod B has the first block itself
        dst, de = engine()
        r = b.load(KEYS, de, range(5))
        assert (r.loaded, r.stop, b.stats.promoted) == (3, "miss", 2)
        assert all(torch.equal(s[:, :3], d[:, :3]) for s, d in zip(src, dst))
    lv.close()


@pytest.mark.parametrize("damage", ["image", "key", "short"])
def test_a_damaged_block_from_level_2_is_a_miss_and_never_enters_the_pool(pool_path, damage):
    backend = DictBackend()
    lv = level(backend)
    _, se = engine(seed=3)
    with pod(pool_path, lv) as a, pod(pool_path + "-b", lv) as b:
        a.put(KEYS[:2], se, range(2))
        a.clear()
        assert lv.flush(10)
        name = b.name(KEYS[1])
        raw = bytearray(backend.data[name])
        if damage == "image":
            raw[-1] ^= 1  # the checksum recorded in the header no longer matches
        elif damage == "key":
            raw = bytearray(backend.data[b.name(KEYS[0])])  # another block under this key
        else:
            raw = raw[:-4]
        backend.data[name] = bytes(raw)
        assert b.lookup(KEYS[:2]) == 1
        assert name not in b.pool and b.stats.promoted == 1
    lv.close()


def test_a_failing_level_2_is_a_miss_with_one_log_line(pool_path, caplog):
    lv = level(FailingBackend())
    _, se = engine(seed=4)
    with caplog.at_level(logging.WARNING, logger="cxlkit"), pod(pool_path, lv) as a:
        a.put(KEYS, se, range(5))
        a.clear()  # demotions fail in the background
        assert lv.flush(10)
        for _ in range(3):
            assert a.lookup(KEYS) == 0
        dst, de = engine()
        assert a.get(KEYS, de, range(5)) == 0
    lines = [r for r in caplog.records if "level 2" in r.getMessage()]
    assert len(lines) == 1 and "failed" in lines[0].getMessage()
    assert lv.down and lv.stats.demote_dropped == 5
    lv.close()


def test_a_hung_level_2_bounds_lookups_and_never_blocks_puts(pool_path):
    backend = HungBackend()
    lv = level(backend, timeout_s=0.2, queue_blocks=1)
    _, se = engine(seed=5)
    done = threading.Event()

    def work():
        with pod(pool_path, lv, capacity_bytes=2 * (128 + LAYOUT.nbytes)) as a:
            for i in range(5):  # each put past two blocks evicts one: demotions pile up
                a.put(KEYS[i:i + 1], se, [i])
            assert backend.entered.wait(10)
            assert a.lookup(block_hashes(list(range(1, 81)))) == 0  # times out: a miss
            assert a.lookup(block_hashes(list(range(2, 82)))) == 0  # still stuck: no wait
        done.set()

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(30)
    finished = done.is_set()
    backend.release.set()
    assert finished, "a put or lookup waited on the hung level"
    assert lv.stats.demote_dropped >= 1  # the queue of one was full: dropped, not waited for
    lv.close()


def test_level2_refuses_bad_bounds():
    with pytest.raises(ValueError, match="queue_blocks"):
        Level2(DictBackend, queue_blocks=0)
    with pytest.raises(ValueError, match="timeout_s"):
        Level2(DictBackend, timeout_s=0)


def test_mooncake_config_errors_name_the_key():
    from cxlkit.integrations.mooncake import open_level2

    with pytest.raises(ValueError, match="master"):
        open_level2({"metadata": "http://127.0.0.1:1/metadata"})
    with pytest.raises(ValueError, match="unknown keys"):
        open_level2({"master": "a:1", "metadata": "m", "segement_bytes": 1})
    with pytest.raises(ValueError, match="segment_bytes"):
        open_level2({"master": "a:1", "metadata": "m", "segment_bytes": 1 << 20})


def test_local_mooncake_without_the_wheel_names_the_package(monkeypatch):
    import sys

    from cxlkit.integrations.mooncake import MooncakeError
    from cxlkit.integrations.mooncake_local import master_binary

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setitem(sys.modules, "mooncake", None)  # import mooncake raises ImportError
    with pytest.raises(MooncakeError, match="mooncake-transfer-engine-non-cuda"):
        master_binary()


def test_a_local_store_node_that_cannot_connect_is_an_error_and_nothing_is_left(
        tmp_path, monkeypatch):
    """A master that never answers (a stand-in on PATH) and a node without the client: the
    node says it could not connect within start_s, local_mooncake raises MooncakeError, and both processes are gone."""
    from cxlkit.integrations.mooncake import MooncakeError
    from cxlkit.integrations.mooncake_local import local_mooncake

    fake = tmp_path / "mooncake_master"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    hide = tmp_path / "py" / "mooncake"  # the node fails fast, wheel installed or not
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('no Mooncake in this test')\n")
    monkeypatch.setenv("PYTHONPATH", f"{hide.parent}:{os.environ.get('PYTHONPATH', '')}")
    started = []
    real_popen = subprocess.Popen

    def popen(*a, **kw):
        started.append(real_popen(*a, **kw))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(MooncakeError, match="could not connect within 1"):
        with local_mooncake(32 << 20, start_s=1):
            pass
    assert len(started) == 2 and all(p.poll() is not None for p in started)


def test_a_master_binary_that_cannot_run_is_a_mooncake_error(tmp_path, monkeypatch):
    from cxlkit.integrations.mooncake import MooncakeError
    from cxlkit.integrations.mooncake_local import local_mooncake

    fake = tmp_path / "mooncake_master"
    fake.write_text("not a program\n")
    fake.chmod(0o644)  # not executable: starting it raises PermissionError
    monkeypatch.setattr("cxlkit.integrations.mooncake_local.master_binary", lambda: str(fake))
    with pytest.raises(MooncakeError, match="mooncake_master: cannot start it"):
        with local_mooncake():
            pass


def test_a_local_store_node_that_dies_at_start_is_named_with_its_exit_status(
        tmp_path, monkeypatch):
    from cxlkit.integrations.mooncake import MooncakeError
    from cxlkit.integrations.mooncake_local import local_mooncake

    fake = tmp_path / "mooncake_master"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr("sys.executable", "/bin/false")  # the node exits at once, silent
    with pytest.raises(MooncakeError, match="ended with exit status 1 before it was ready"):
        with local_mooncake(32 << 20, start_s=5):
            pass


def test_local_mooncake_refuses_a_node_too_small_for_mooncake():
    from cxlkit.integrations.mooncake_local import local_mooncake

    with pytest.raises(ValueError, match="node_bytes"):
        with local_mooncake(1 << 20):
            pass

"""A block put without a checksum, read by a store that verifies them (checksum=True): not
loaded, and never silently — load() says "unverifiable", stats.unverifiable counts it (not
load_errors: nothing is corrupt), and the log names the block; a checksum=False store loads
it; a corrupt checksummed block is still "corrupt"."""
from __future__ import annotations

import logging

import pytest
import torch

from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes
from cxlkit.kv.store import LoadResult

LAYOUT = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32", block_tokens=16)
NBLOCKS = 4


def engine(fill: float = 0.0):
    ts = [torch.full((2, NBLOCKS, 16, 2, 16), fill) for _ in range(LAYOUT.num_layers)]
    return ts, EngineTensors.per_layer(LAYOUT, ts, "KBTHD")


@pytest.fixture
def stores(pool_path):
    plain = Store(pool_path, LAYOUT, host_id=0, create=True, size=32 << 20, checksum=False)
    checked = Store(pool_path, LAYOUT, host_id=1, checksum=True)
    yield plain, checked
    checked.close()
    plain.close()


def test_unchecksummed_block_is_unverifiable_not_a_silent_miss(stores, caplog):
    plain, checked = stores
    keys = block_hashes(list(range(32)))  # 2 blocks
    _, src = engine(1.5)
    assert plain.put(keys, src, [0, 1]) == 2
    dst_t, dst = engine()
    with caplog.at_level(logging.WARNING, logger="cxlkit"):
        r = checked.load(keys, dst, [2, 3])
    assert r == LoadResult(0, "unverifiable", keys[0])
    assert checked.stats.unverifiable == 1 and checked.stats.misses == 1
    assert checked.stats.load_errors == 0
    assert any(plain.name(keys[0]) in m and "checksum" in m for m in caplog.messages)
    assert checked.get(keys, dst, [2, 3]) == 0 and checked.stats.unverifiable == 2
    # the store that does not verify loads it
    assert plain.load(keys, dst, [2, 3]) == LoadResult(2, "complete")
    assert torch.equal(dst_t[0][:, 2], torch.full((2, 16, 2, 16), 1.5))


def test_checksummed_blocks_load_and_a_miss_is_a_miss(stores):
    plain, checked = stores
    keys = block_hashes(list(range(48)))  # 3 blocks
    _, src = engine(2.0)
    assert checked.put(keys[:2], src, [0, 1]) == 2
    _, dst = engine()
    assert checked.load(keys, dst, [1, 2, 3]) == LoadResult(2, "miss", keys[2])
    assert checked.stats.unverifiable == 0 and checked.stats.load_errors == 0

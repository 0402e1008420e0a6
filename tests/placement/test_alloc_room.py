"""cxlkit.alloc refuses what cannot fit: a populated allocation larger than
what its policy's nodes can give raises InsufficientMemoryError naming the nodes and what they
have (it ran into the OOM killer before); overcommit=True allocates anyway."""
import pytest

import cxlkit
from cxlkit import InsufficientMemoryError, topology
from cxlkit import placement as P


def test_a_terabyte_bound_to_node_0_is_refused_naming_the_node_and_what_is_free():
    with pytest.raises(InsufficientMemoryError, match=r"node 0: [0-9.]+ GiB free") as e:
        cxlkit.alloc(1 << 40, P.bind(0))
    assert e.value.nodes == (0,) and e.value.nbytes == 1 << 40
    assert 0 < e.value.available < 1 << 40
    assert "overcommit=True" in str(e.value)
    assert isinstance(e.value, MemoryError)


def test_default_and_preferred_count_every_node():
    with pytest.raises(InsufficientMemoryError) as e:
        cxlkit.alloc(1 << 44, P.preferred(0))
    assert e.value.nodes == tuple(topology.memory_nodes())


def test_overcommit_skips_the_check_and_unpopulated_memory_is_not_checked():
    with cxlkit.alloc(1 << 40, P.bind(0), populate=False) as buf:
        assert buf.nbytes == 1 << 40
    with cxlkit.alloc(1 << 40, P.bind(0), populate=False, overcommit=True) as buf:
        assert buf.nbytes == 1 << 40


def _sysfs(tmp_path, free_kb: int, file_kb: int = 0, shmem_kb: int = 0):
    d = tmp_path / "devices/system/node"
    (d / "node0").mkdir(parents=True)
    (d / "has_memory").write_text("0\n")
    (d / "node0/meminfo").write_text(
        f"Node 0 MemTotal: {4 * free_kb} kB\nNode 0 MemFree: {free_kb} kB\n"
        f"Node 0 FilePages: {file_kb} kB\nNode 0 Shmem: {shmem_kb} kB\n"
        "Node 0 SReclaimable: 1024 kB\n")
    return tmp_path


def test_available_counts_free_droppable_cache_and_reclaimable_slab(tmp_path):
    root = _sysfs(tmp_path, free_kb=1000, file_kb=500, shmem_kb=200)
    assert topology.node_available_bytes(0, root) == (1000 + 300 + 1024) * 1024
    assert topology.node_available_bytes(5, root) is None


def test_a_node_with_little_room_refuses_what_fits_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(_sysfs(tmp_path, free_kb=1024)))
    with pytest.raises(InsufficientMemoryError, match="node 0: 0.0 GiB"):
        cxlkit.alloc(16 << 20, P.bind(0))
    with cxlkit.alloc(16 << 20, P.bind(0), overcommit=True) as buf:
        assert buf.residency().not_present == 0

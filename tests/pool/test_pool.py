"""The pool through cxlkit.Pool: objects and views, typed errors for bad input, fault
injection on open, backings (file, memfd, striped, NUMA-bound), and several processes with
different host ids sharing one pool file (synchronised by barriers)."""
from __future__ import annotations

import errno
import hashlib
import multiprocessing as mp
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import cxlkit
from cxlkit import _native, pool as poolmod
from cxlkit.testing import inject_fault

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from harness import crc32c  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def path(pool_path):  # conftest: a private /dev/shm path, removed with its stripes
    return pool_path


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---- objects --------------------------------------------------------------------------

def test_create_publish_open_read_roundtrip(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        obj = pool.create("weights", 4096)
        a = obj.numpy(np.float32)
        a[:] = np.arange(1024, dtype=np.float32)
        del a  # a view pins the object open
        obj.publish(checksum=True)
        with pool.open("weights") as r:
            assert r.offset == obj.offset and r.offset % 64 == 0
            assert not r.writable
            np.testing.assert_array_equal(r.numpy(np.float32), np.arange(1024, dtype=np.float32))
            assert r.read(4, 4) == struct.pack("f", 1.0)
            r.verify()
            assert r.valid()
        obj.close()
        info = pool.info("weights")
        assert (info.nbytes, info.host, info.state) == (4096, 0, "live")
        assert info.checksum is not None


def test_create_with_data_publishes_with_checksum(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        pool.create("blob", data=b"abc" * 100).close()
        with pool.open("blob") as r:
            assert r.read() == b"abc" * 100
            r.verify()


def test_torch_view_is_zero_copy(path):
    torch = pytest.importorskip("torch")
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        with pool.create("t", 64 * 4, publish=True) as obj:
            from cxlkit.integrations.views import tensor

            t = tensor(obj, torch.float32, (8, 8))
            t.fill_(2.5)
            assert obj.numpy(np.float32)[63] == 2.5
            del t


def test_memoryview_blocks_close_until_released(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        obj = pool.create("v", 128, publish=True)
        mv = memoryview(obj)
        with pytest.raises(BufferError, match="views"):
            obj.close()
        with pytest.raises(BufferError, match="views"):
            pool.close()
        mv.release()
        obj.close()
        assert obj.closed
        with pytest.raises(ValueError, match="closed"):
            obj.valid()


def test_open_unpublished_raises_ObjectNotPublishedError(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        pool.create("draft", 100)
        with pytest.raises(cxlkit.ObjectNotPublishedError):
            pool.open("draft")
        assert "draft" in pool
        assert pool.info("draft").state == "creating"


def test_create_without_zeroing_keeps_old_bytes_until_written(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        pool.create("old", data=b"\xab" * 4096).close()
        pool.destroy("old")  # its block is free again and still holds 0xab
        with pool.create("fresh", 4096, zero=False) as obj:
            assert bytes(memoryview(obj)[:16]) == b"\xab" * 16  # the flag skipped the memset
            with pytest.raises(cxlkit.ObjectNotPublishedError):
                pool.open("fresh")  # nobody reads it before publish
            memoryview(obj)[:] = b"\x01" * 4096
            obj.publish()
        pool.destroy("fresh")
        with pool.create("zeroed", 4096) as obj:  # the default still zeroes the reused block
            assert bytes(memoryview(obj)) == bytes(4096)
        pool.destroy("zeroed")
        pool.create("tail", data=b"\xcd" * 4096).close()
        pool.destroy("tail")
        with pool.create("short", 4096, data=b"xy", zero=False) as obj:
            assert bytes(memoryview(obj)[:4]) == b"xy\0\0"  # bytes past data are zeroed
            assert bytes(memoryview(obj)) == b"xy" + bytes(4094)


def test_create_zero_is_keyword_only(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        with pytest.raises(TypeError):
            pool.create("k", 64, None, None, None, False)


def test_create_same_name_twice_raises_FileExistsError(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        pool.create("x", 10, publish=True)
        with pytest.raises(FileExistsError) as ei:
            pool.create("x", 10)
        assert "x" in str(ei.value)


def test_unknown_name_raises_KeyError_naming_it(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        for op in (pool.open, pool.destroy, pool.info):
            with pytest.raises(KeyError, match="ghost"):
                op("ghost")
        assert "ghost" not in pool


def test_bad_names_and_sizes_raise_before_native(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        with pytest.raises(ValueError, match="longer than 255"):
            pool.create("n" * 256, 10)
        with pytest.raises(ValueError):
            pool.create("", 10)
        with pytest.raises(TypeError):
            pool.create(b"bytes", 10)
        with pytest.raises(ValueError, match="> 0"):
            pool.create("zero", 0)
        with pytest.raises(TypeError):
            pool.create("none")
        with pytest.raises(ValueError, match="does not fit"):
            pool.create("small", 2, data=b"abc")
        pool.create("n" * 255, 10).close()  # the longest name is fine


def test_pool_full_raises_PoolFullError_naming_pool(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as pool:
        part = pool.stat().partition_bytes
        with pytest.raises(cxlkit.PoolFullError) as ei:
            pool.create("huge", part)
        assert ei.value.errno == errno.ENOSPC and path in str(ei.value)
        assert "pool full" in str(ei.value) and "cxlkit pool hosts" in str(ei.value)
        objs = []
        with pytest.raises(cxlkit.PoolFullError):
            for i in range(10_000):
                objs.append(pool.create(f"o{i}", 64 * 1024))
        assert 0 < len(objs) < 10_000
        st = pool.stat()
        assert st.used_bytes + st.free_bytes == st.extents_held * st.extent_bytes
        assert len(objs) * 64 * 1024 >= 0.95 * part  # one host fills the pool (format v2)


def test_name_table_full_raises_PoolFullError(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_objects=8) as pool:
        for i in range(8):
            pool.create(f"n{i}", 64).close()
        with pytest.raises(cxlkit.PoolFullError, match="name table full: .*max_objects=8"):
            pool.create("n8", 64)
        pool.destroy("n0")
        pool.create("n8", 64).close()


def test_destroy_with_reader_lease_defers_free(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as a, \
            cxlkit.Pool(path, host_id=1) as b:
        a.create("shared", 1000, data=b"z" * 1000).close()
        r = b.open("shared")
        with pytest.raises(PermissionError, match="shared"):
            b.destroy("shared")  # only the owner host destroys
        used = a.stat().used_bytes
        a.destroy("shared")
        assert a.stat().used_bytes == used  # the reader still holds it
        assert not r.valid()
        with pytest.raises(cxlkit.StaleObjectError):
            r.read()
        r.close()
        rep = a.fsck()
        assert rep.clean and rep.objects_dead == 0 and a.stat().used_bytes == 0


def test_writable_open_of_other_hosts_object_raises_PermissionError(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as a, \
            cxlkit.Pool(path, host_id=1) as b:
        a.create("mine", 10, publish=True).close()
        with pytest.raises(PermissionError, match="owned by host 0"):
            b.open("mine", writable=True)
        with a.open("mine", writable=True) as w:
            memoryview(w)[0] = 7
        assert b.fsck().leases_live == 0


def test_list_and_stat_describe_every_host(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=3) as a, \
            cxlkit.Pool(path, host_id="second") as b:
        a.create("a1", 10, publish=True).close()
        b.create("b1", 20, publish=True).close()
        names = {(o.name, o.host) for o in a.list()}
        assert names == {("a1", 0), ("b1", b.host_id)}
        st = b.stat()
        assert st.objects == 2 and st.objects_host == 1 and st.hosts_active == 2
        assert st.kind == "file" and st.version == 2 and st.max_hosts == 3
        assert b.host_id != 0


def test_pool_file_mode_is_0600(path):
    with cxlkit.Pool(path, size=8 * MiB):
        assert os.stat(path).st_mode & 0o777 == 0o600


def test_group_gives_0660_and_the_group(path):
    with cxlkit.Pool(path, size=8 * MiB, group=os.getgid()):
        st = os.stat(path)
        assert st.st_mode & 0o777 == 0o660 and st.st_gid == os.getgid()


def test_bare_name_resolves_to_dev_shm():
    assert poolmod.resolve("kv") == "/dev/shm/cxlkit-kv"
    assert poolmod.resolve("cxlkit-default") == "/dev/shm/cxlkit-default"
    assert poolmod.resolve("/tmp/x") == "/tmp/x"
    assert poolmod.resolve("memfd:m") == "memfd:m"


def test_host_id_from_environment(path, monkeypatch):
    monkeypatch.setenv("CXLKIT_HOST_ID", "2")
    with cxlkit.Pool(path, size=8 * MiB) as p:
        assert p.host_id == 2
    monkeypatch.setenv("CXLKIT_HOST_ID", "node-b")
    with cxlkit.Pool(path) as p, cxlkit.Pool(path) as q:
        assert p.host_id == q.host_id  # the same name finds the same slot
    monkeypatch.delenv("CXLKIT_HOST_ID")
    with cxlkit.Pool(path) as p:
        assert p.host_id == 2  # the slot this machine's id already tags


def test_explicit_slot_with_another_hosts_tag_raises(path, monkeypatch):
    with cxlkit.Pool(path, size=8 * MiB, host_id="alpha") as p:
        slot = p.host_id
    monkeypatch.setattr(poolmod.options, "machine_tag", lambda: "some-other-machine")
    with pytest.raises(cxlkit.PoolError) as ei:
        cxlkit.Pool(path, host_id=slot)
    assert ei.value.errno == errno.EBUSY


# ---- opening: bad input never modifies the pool ------------------------------------------

def test_open_missing_pool_raises_FileNotFoundError(path):
    with pytest.raises(FileNotFoundError) as ei:
        cxlkit.Pool(path)
    assert ei.value.filename == path


def test_foreign_file_raises_PoolFormatError_and_is_untouched(path):
    Path(path).write_bytes(b"not a pool" * 1000)
    before = digest(path)
    for kw in ({}, {"size": 8 * MiB}):
        with pytest.raises(cxlkit.PoolFormatError) as ei:
            cxlkit.Pool(path, **kw)
        assert path in str(ei.value)
    assert digest(path) == before


def test_corrupt_superblock_raises_PoolCorruptError_and_is_untouched(path):
    cxlkit.Pool(path, size=8 * MiB).close()
    with open(path, "r+b") as f:
        f.seek(40)  # max_hosts, covered by the checksum
        f.write(b"\x07")
    before = digest(path)
    with pytest.raises(cxlkit.PoolCorruptError):
        cxlkit.Pool(path)
    assert digest(path) == before


def test_wrong_version_raises_PoolVersionError(path):
    cxlkit.Pool(path, size=8 * MiB).close()
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 99))
    before = digest(path)
    with pytest.raises(cxlkit.PoolVersionError, match="version"):
        cxlkit.Pool(path)
    assert digest(path) == before


def test_too_small_raises_PoolTooSmallError_and_leaves_no_file(path):
    with pytest.raises(cxlkit.PoolTooSmallError):
        cxlkit.Pool(path, size=64 * 1024)
    assert not os.path.exists(path)
    assert not list(Path(path).parent.glob(Path(path).name + "*"))


def test_exclusive_create_of_existing_raises_FileExistsError(path):
    cxlkit.Pool(path, size=8 * MiB).close()
    with pytest.raises(FileExistsError):
        cxlkit.Pool(path, size=8 * MiB, exclusive=True)


def test_bad_arguments_raise_before_native(path):
    with pytest.raises(ValueError, match="coherence"):
        cxlkit.Pool(path, size=MiB, coherence="maybe")
    with pytest.raises(ValueError, match="max_hosts"):
        cxlkit.Pool(path, size=MiB, max_hosts=65)
    with pytest.raises(ValueError, match="host_id"):
        cxlkit.Pool(path, size=MiB, host_id=64)
    with pytest.raises(ValueError, match="size"):
        cxlkit.Pool(path, size="lots")
    with pytest.raises(TypeError):
        cxlkit.Pool(3.5)
    with pytest.raises(ValueError, match="host_id"):
        cxlkit.Pool(path, size=MiB, host_id="x" * 40)


@pytest.mark.parametrize("syscall", ["open", "ftruncate", "mmap"])
def test_fault_while_creating_leaves_nothing(path, syscall):
    with inject_fault(syscall, 1, "ENOMEM"):
        with pytest.raises(OSError) as ei:
            cxlkit.Pool(path, size=8 * MiB)
    assert ei.value.errno == errno.ENOMEM
    assert not list(Path(path).parent.glob(Path(path).name + "*"))


@pytest.mark.parametrize("syscall", ["open", "fstat", "mmap", "fcntl"])
def test_fault_while_opening_leaves_pool_untouched(path, syscall):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as p:
        p.create("keep", data=b"k" * 100).close()
    before = digest(path)
    with inject_fault(syscall, 1, "EIO"):
        with pytest.raises(OSError) as ei:
            cxlkit.Pool(path, host_id=1)
    assert ei.value.errno == errno.EIO and ei.value.filename == path
    assert digest(path) == before
    with cxlkit.Pool(path, host_id=1) as p, p.open("keep") as o:
        assert o.read() == b"k" * 100


def _held(name: str) -> tuple[int, int]:
    """Mappings and file descriptors of this process that refer to a pool backing."""
    maps = sum(name in line for line in Path("/proc/self/maps").read_text().splitlines())
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += name in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the listing's own descriptor, closed meanwhile
    return maps, fds


@pytest.mark.parametrize("backing", ["file", "memfd"])
def test_heartbeat_thread_that_cannot_start_fails_the_open_and_leaks_nothing(path, backing):
    if backing == "file":
        cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2).close()
        before, target, kw = digest(path), path, {}
    else:
        target, kw = f"memfd:cxlkit-hb-{os.getpid()}", {"size": 8 * MiB}
    held = _held(target.removeprefix("memfd:"))
    with inject_fault("pthread_create", 1, "EAGAIN"):
        with pytest.raises(cxlkit.PoolError, match="heartbeat thread") as ei:
            cxlkit.Pool(target, host_id=1, **kw)
    assert ei.value.errno == errno.EAGAIN and ei.value.filename == target
    assert _held(target.removeprefix("memfd:")) == held  # no mapping, no descriptor left
    if backing == "file":
        assert digest(path) == before  # the thread starts before the slot is written
        with cxlkit.Pool(path, host_id=1) as p:
            assert p.stat().host_id == 1


def test_damaged_host_lock_fails_the_open_and_leaks_nothing(path):
    cxlkit.Pool(path, size=8 * MiB, host_id=0).close()
    # glibc marks a robust mutex whose owner died without making it consistent by
    # __owner = PTHREAD_MUTEX_NOTRECOVERABLE (int at byte 8 of the mutex, slot line 2)
    with open(path, "r+b") as f:
        f.seek(4096 + 128 + 8)
        f.write(struct.pack("<i", 0x7FFF_FFFE))
    held = _held(path)
    with pytest.raises(cxlkit.PoolError, match="lock in the pool is damaged") as ei:
        cxlkit.Pool(path, host_id=0)
    assert ei.value.errno == errno.ENOTRECOVERABLE and ei.value.filename == path
    assert _held(path) == held


# ---- backings ---------------------------------------------------------------------------

def _memfd_reader(shared_path, out):
    with cxlkit.Pool(shared_path, host_id=1) as p, p.open("m") as o:
        out.put(o.read())


def test_memfd_pool_shared_through_proc_fd(path):
    with cxlkit.Pool("memfd:cxlkit-test", size=8 * MiB, host_id=0, max_hosts=2) as p:
        assert p.stat().kind == "memfd"
        assert p.shared_path.startswith(f"/proc/{os.getpid()}/fd/")
        p.create("m", data=b"memfd").close()
        with p.open("m") as o:
            assert o.read() == b"memfd"
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(target=_memfd_reader, args=(p.shared_path, out), daemon=True)
        child.start()
        assert out.get(timeout=60) == b"memfd"
        child.join(60)
    with cxlkit.Pool(path, size=8 * MiB) as f:
        assert f.shared_path == path


def test_striped_pool_interleaves_2MiB_granules(path):
    paths = [path + ".s0", path + ".s1"]
    with cxlkit.Pool(paths, size=16 * MiB, host_id=0, max_hosts=1) as p:
        st = p.stat()
        assert st.kind == "striped" and st.nbackings == 2 and st.size == 16 * MiB
        obj = p.create("wide", 6 * MiB)
        a = obj.numpy(np.uint8)
        a[:] = (np.arange(a.size) // MiB).astype(np.uint8) + 1
        del a
        obj.publish()
        obj.close()
        off = obj.offset
    # pool granule k lives in backing k % 2 at (k // 2) * 2 MiB
    files = [Path(q).read_bytes() for q in paths]
    g = 2 * MiB
    for pos in (off, off + 3 * MiB, off + 5 * MiB):
        k = pos // g
        byte = files[k % 2][(k // 2) * g + pos % g]
        assert byte == (pos - off) // MiB + 1
    with cxlkit.Pool(paths) as p, p.open("wide") as o:
        assert o.numpy(np.uint8)[5 * MiB] == 6
    with pytest.raises(OSError):
        cxlkit.Pool(paths[:1])  # the same pool through the wrong backing list


def test_numa_bound_pool_pages_are_on_the_node(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, numa_node=0) as p:
        with p.create("n", MiB, publish=True) as o:
            per_node, absent = _native.residency_of_buffer(o, 4)
            assert absent == 0 and per_node[0] == sum(per_node) > 0


def test_dax_geometry_reads_sysfs(tmp_path):
    d = tmp_path / "bus/dax/devices/dax0.0"
    d.mkdir(parents=True)
    (d / "size").write_text("4294967296\n")
    (d / "align").write_text("2097152\n")
    assert _native.pool_dax_geometry(str(tmp_path), "dax0.0") == (4 << 30, 2 * MiB)
    (d / "align").unlink()
    assert _native.pool_dax_geometry(str(tmp_path), "dax0.0")[1] == 2 * MiB  # pre-5.10
    (d / "align").write_text("3\n")
    with pytest.raises(OSError):
        _native.pool_dax_geometry(str(tmp_path), "dax0.0")
    with pytest.raises(FileNotFoundError):
        _native.pool_dax_geometry(str(tmp_path), "dax9.9")


def test_remove_deletes_pool_file(path):
    cxlkit.Pool(path, size=8 * MiB).close()
    poolmod.remove(path)
    assert not os.path.exists(path)
    with pytest.raises(FileNotFoundError):
        poolmod.remove(path)
    with pytest.raises(ValueError):
        poolmod.remove("/dev/dax0.0")


# ---- several processes, several hosts -------------------------------------------------------

def _host_worker(path, host, nhosts, per_host, barrier, results):
    try:
        _host_work(path, host, nhosts, per_host, barrier, results)
    except BaseException as e:  # let the others leave their barrier instead of hanging
        barrier.abort()
        results.put((host, repr(e), 0))
        raise


def _host_work(path, host, nhosts, per_host, barrier, results):
    pool = cxlkit.Pool(path, host_id=host)
    ok = 0
    for k in range(per_host):
        data = bytes([host * 16 + k % 16]) * (1000 + k)
        pool.create(f"h{host}-{k}", data=data).close()
    barrier.wait()
    for h in range(nhosts):
        for k in range(per_host):
            with pool.open(f"h{h}-{k}") as o:
                assert o.host == h
                assert o.read() == bytes([h * 16 + k % 16]) * (1000 + k)
                o.verify()
                ok += 1
    barrier.wait()
    # every host races for the same names: exactly one wins each
    wins = 0
    for r in range(20):
        barrier.wait()
        try:
            pool.create(f"race-{r}", 64, publish=True).close()
            wins += 1
        except FileExistsError:
            pass
    barrier.wait()
    for k in range(per_host):
        pool.destroy(f"h{host}-{k}")
    for r in range(20):
        try:
            pool.destroy(f"race-{r}")
        except (PermissionError, KeyError):  # another host's, or already gone
            pass
    barrier.wait()
    pool.close()
    results.put((host, ok, wins))


def test_hosts_share_one_pool_file_nothing_torn_or_lost(path):
    nhosts, per_host = 3, 20
    cxlkit.Pool(path, size=16 * MiB, max_hosts=nhosts, host_id=0).close()
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(nhosts), ctx.Queue()
    procs = [ctx.Process(target=_host_worker, args=(path, h, nhosts, per_host, barrier, results))
             for h in range(nhosts)]
    for p in procs:
        p.daemon = True
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(ok == nhosts * per_host for _, ok, _ in got), got
    assert sum(w for _, _, w in got) == 20  # unique names across hosts
    with cxlkit.Pool(path, host_id=0) as pool:
        assert pool.list() == []
        rep = pool.fsck()
        assert rep.clean and rep.objects_live == 0 and rep.leases_live == 0


def test_noncoherent_mode_flushes_and_invalidates(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2, coherence="none") as a, \
            cxlkit.Pool(path, host_id=1, coherence="none") as b:
        assert a.stat().coherence == "none"
        obj = a.create("nc", 4096)
        obj.numpy()[:] = 9
        obj.flush()
        obj.publish(checksum=True)
        with b.open("nc") as r:
            r.invalidate()
            assert r.read() == bytes([9]) * 4096
            r.verify()
        obj.close()
        a.destroy("nc")
        assert a.fsck().clean


# ---- ranges: write into an object, u64 words by offset, flush / invalidate part of it -----
def test_write_copies_into_the_payload_within_its_range(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        obj = pool.create("w", 256)
        obj.write(8, b"abc")
        obj.write(253, bytearray(b"xyz"))  # up to the last byte
        obj.write(256, b"")  # an empty write at the end
        assert bytes(memoryview(obj)[:12]) == bytes(8) + b"abc\0"
        assert bytes(memoryview(obj)[250:]) == bytes(3) + b"xyz"
        for pos, data in ((254, b"xyz"), (257, b""), (-1, b"a"), (0, bytes(257))):
            with pytest.raises(ValueError, match="outside object w of 256 bytes"):
                obj.write(pos, data)
        with pytest.raises(TypeError):
            obj.write(0, "text")  # not a bytes-like object
        obj.publish()
        obj.close()
        with pytest.raises(ValueError, match="object w is closed"):
            obj.write(0, b"a")
        with pool.open("w") as ro:
            with pytest.raises(PermissionError, match="object w in pool .* read-only"):
                ro.write(0, b"a")
            assert ro.read(8, 3) == b"abc"
    with pytest.raises(ValueError, match="closed"):
        obj.write(0, b"a")


def test_u64_words_are_stored_and_loaded_by_payload_offset_within_the_object(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        obj = pool.create("u", 64)
        obj.store_u64(np.array([0, 56, 16], np.uint64), 2**64 - 3)
        obj.store_u64(np.array([], np.uint64), 1)
        got = obj.load_u64(np.array([56, 8, 0, 16, 56], np.uint64))
        assert got.dtype == np.uint64 and got.tolist() == [2**64 - 3, 0, 2**64 - 3, 2**64 - 3,
                                                           2**64 - 3]
        assert obj.load_u64(np.array([], np.uint64)).tolist() == []
        assert bytes(memoryview(obj)[16:24]) == (2**64 - 3).to_bytes(8, "little")
        for call in (obj.load_u64, lambda o: obj.store_u64(o, 1)):
            with pytest.raises(ValueError, match="offset 4 in object u: not a multiple of 8"):
                call(np.array([0, 4], np.uint64))
            for bad in (64, 1 << 63):
                with pytest.raises(ValueError, match=f"range \\[{bad}, \\+8\\) outside object u"):
                    call(np.array([bad], np.uint64))
            with pytest.raises(ValueError, match="outside object u"):
                call(np.array([-8], np.int64))  # converted to u64: far past the end
        obj.publish()
        obj.close()
        with pool.open("u") as ro:
            assert ro.load_u64(np.array([0], np.uint64)).tolist() == [2**64 - 3]
            with pytest.raises(PermissionError, match="read-only"):
                ro.store_u64(np.array([0], np.uint64), 1)
        for call in (lambda: obj.load_u64(np.array([0], np.uint64)),
                     lambda: obj.store_u64(np.array([0], np.uint64), 1)):
            with pytest.raises(ValueError, match="object u is closed"):
                call()


@pytest.mark.parametrize("coherence", ["host", "none"])
def test_flush_and_invalidate_of_a_range_are_checked_against_the_object(path, coherence):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, coherence=coherence) as pool:
        obj = pool.create("r", 4096)
        obj.write(0, bytes(range(256)) * 16)
        for sync in (obj.flush, obj.invalidate):
            sync()  # the whole payload
            sync(64, 8)
            sync(4000)  # to its end
            sync(4096, 0)  # an empty range at the end
            sync(offset=8, nbytes=None)
            for args in ((4097,), (4090, 7), (-8, 8), (0, -1), (0, 4097)):
                with pytest.raises(ValueError, match="outside object r of 4096 bytes"):
                    sync(*args)
        for sync_at in (obj.flush_at, obj.invalidate_at):
            sync_at(np.array([0, 64, 4088], np.uint64))  # 8 bytes each
            sync_at(np.array([4000], np.uint64), 96)
            sync_at(np.array([], np.uint64))
            for offs, n in (([0, 4089], 8), ([0], 4097), ([1 << 63], 8)):
                with pytest.raises(ValueError, match="outside object r of 4096 bytes"):
                    sync_at(np.array(offs, np.uint64), n)
            with pytest.raises(ValueError, match="outside object r"):
                sync_at(np.array([0], np.uint64), -1)
            with pytest.raises(TypeError):
                sync_at([0, 64])  # offsets are a u64 array
        obj.publish()
        assert obj.read() == bytes(range(256)) * 16  # written back, never dropped
        obj.close()
        for call in (lambda: obj.flush(0, 8), lambda: obj.invalidate(),
                     lambda: obj.flush_at(np.array([0], np.uint64)),
                     lambda: obj.invalidate_at(np.array([0], np.uint64))):
            with pytest.raises(ValueError, match="object r is closed"):
                call()


def test_an_object_forged_outside_the_pool_cannot_write_read_or_sync_there(path):
    # PoolObject takes its offset from Python: the range calls check it against the pool
    # (writes: this host's extents only), so a forged one cannot reach past the mapping
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as other:
        other.create("o", 64, publish=True).close()  # host 0 claims the first extent
    with cxlkit.Pool(path, size=8 * MiB, host_id=1, max_hosts=2) as pool:
        st = pool.stat()
        theirs = poolmod.PoolObject(pool._h, "theirs", st.data_offset, 4096, 1, 1, True)
        for write in (lambda: theirs.write(0, b"x"),
                      lambda: theirs.store_u64(np.array([0], np.uint64), 1)):
            with pytest.raises(ValueError, match=r"outside this host's extents .* of pool"):
                write()  # host 0's extent
        past = poolmod.PoolObject(pool._h, "past", st.size - 64, 4096, 1, 1, False)
        meta = poolmod.PoolObject(pool._h, "meta", 0, 4096, 1, 1, False)
        for forged in (past, meta):
            for call in (forged.flush, forged.invalidate,
                         lambda: forged.load_u64(np.array([0], np.uint64)),
                         lambda: forged.flush_at(np.array([0], np.uint64)),
                         lambda: forged.invalidate_at(np.array([0], np.uint64))):
                with pytest.raises(ValueError, match=r"offset 0x[0-9a-f]+ .* outside the data "
                                                     r"region"):
                    call()
        del theirs, past, meta, forged


def test_memfd_pool_bound_to_node(path):
    with cxlkit.Pool("memfd:cxlkit-test-numa", size=8 * MiB, host_id=0, numa_node=0) as p:
        with p.create("n", MiB, publish=True) as o:
            per_node, absent = _native.residency_of_buffer(o, 4)
            assert absent == 0 and per_node[0] == sum(per_node) > 0


def _lease_holder(path, ready):
    pool = cxlkit.Pool(path, host_id=1)
    held = pool.open("leased")  # held until this process is killed
    assert held.valid()
    ready.set()
    ready.wait()
    while True:
        os.sched_yield()


def test_lease_of_dead_host_expires(path):
    import signal

    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as a:
        a.create("leased", data=b"x" * 100).close()
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        child = ctx.Process(target=_lease_holder, args=(path, ready), daemon=True)
        child.start()
        assert ready.wait(60)
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        a.destroy("leased")
        assert a.fsck(repair=False).objects_dead == 1  # host 1 still looks alive
        # Host 1 falls silent: age its heartbeat (host slot 1, line 0, offset 40) past the
        # lease timeout instead of waiting it out.
        with open(path, "r+b") as f:
            f.seek(4096 + 4096 + 40)
            f.write(struct.pack("<q", 0))
        rep = a.fsck(repair=True)
        assert rep.reclaimed_objects == 1 and rep.objects_dead == 0
        assert rep.leases_expired == 1 and rep.leases_live == 0
        assert a.stat().used_bytes == 0
        assert a.stat().hosts_active == 1


def _forked_child_closes_inherited(pool, obj):
    obj.close()   # the parent's lease: not the child's to drop
    pool.close()
    os._exit(0)


def test_forked_child_closing_inherited_handles_keeps_parents_leases(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        pool.create("kept", data=b"k" * 64).close()
        held = pool.open("kept")
        child = mp.get_context("fork").Process(target=_forked_child_closes_inherited,
                                               args=(pool, held))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert pool.fsck(repair=False).leases_live == 1
        pool.destroy("kept")
        assert pool.fsck(repair=False).objects_dead == 1  # our lease still holds it
        held.close()
        assert pool.fsck(repair=False).objects_dead == 0


def test_lease_table_full_raises_PoolError_naming_object(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, lease_slots=4) as pool:
        pool.create("o", data=b"1").close()
        held = [pool.open("o") for _ in range(4)]
        with pytest.raises(cxlkit.PoolError, match="lease table is full") as ei:
            pool.open("o")
        assert ei.value.errno == errno.EMFILE and "o" in str(ei.value.filename)
        with pytest.raises(cxlkit.PoolError, match="lease table is full"):
            pool.create("p", 10)
        held.pop().close()
        pool.open("o").close()
        for h in held:
            h.close()


def test_too_many_unpublished_objects_raises_PoolError(path):
    with cxlkit.Pool(path, size=16 * MiB, host_id=0, max_objects=400) as pool:
        drafts = [pool.create(f"d{i}", 64) for i in range(288)]  # kCreatingMax
        with pytest.raises(cxlkit.PoolError, match="await publishing") as ei:
            pool.create("one-more", 64)
        assert ei.value.errno == errno.EAGAIN
        drafts[0].publish()
        pool.create("one-more", 64, publish=True).close()
        for d in drafts:
            d.close()


def test_no_free_host_slot_raises_PoolError_EBUSY(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id="first", max_hosts=1):
        with pytest.raises(cxlkit.PoolError) as ei:
            cxlkit.Pool(path, host_id="second")
        assert ei.value.errno == errno.EBUSY


def _open_after_reboot(path, out):
    with cxlkit.Pool(path, host_id=0) as pool:
        rep = pool.fsck()
        with pool.open("survivor") as o:
            out.put((rep.clean, o.read()))


def test_slot_of_a_previous_boot_is_taken_over_even_with_its_lock_held(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0) as pool:
        pool.create("survivor", data=b"s" * 32).close()
    # Host 0 "rebooted" while one of its processes held the lock: another boot hash in the
    # slot (line 0, offset 32) and a mutex owned by a thread id that no longer exists.
    with open(path, "r+b") as f:
        f.seek(4096 + 32)
        f.write(struct.pack("<Q", 0x8000_0000_0000_1234))
        f.seek(4096 + 128)
        f.write(struct.pack("<i", 0x3FFF_FFF0))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_open_after_reboot, args=(path, out), daemon=True)
    child.start()
    clean, data = out.get(timeout=60)  # would block forever without the takeover
    child.join(60)
    assert clean and data == b"s" * 32


def _forge_header_and_touch(path: str, what: str) -> None:
    # A payload whose bytes look like an object header (magic, LIVE, a huge nbytes), then an
    # offset-taking call aimed at it: the pool must refuse, not read past its mapping.
    with cxlkit.Pool(path, 2 * MiB, host_id=0) as p:
        obj = p.create("carrier", 8192)
        gen = 1 << 40
        fake = struct.pack("<IIQQQQQqIHH", 0x4F4B5843, 2, 4096, 0, 1 << 40, gen, 1 << 32, 0,
                           0, 1, 0)
        memoryview(obj)[640:640 + len(fake)] = fake
        off = obj.offset + 640 + 320
        forged = poolmod.PoolObject(p._h, "forged", off, 4 * MiB, gen, p.host_id, False)
        try:
            forged.verify() if what == "verify" else forged.read()
        except OSError as e:
            os._exit(e.errno)
        os._exit(0)


@pytest.mark.parametrize("what,err", [("verify", errno.ESTALE), ("read", errno.ESTALE)])
def test_offset_calls_refuse_a_forged_header_instead_of_reading_past_the_pool(path, what, err):
    ctx = mp.get_context("fork")
    proc = ctx.Process(target=_forge_header_and_touch, args=(path, what))
    proc.start()
    proc.join(60)
    assert proc.exitcode == err  # a crash would be a negative exit code (-SIGSEGV)


@pytest.mark.parametrize("field,value", [
    (56, 0),        # level_buckets[0] = 0: every lookup would divide by zero
    (88, 8),        # name_slots smaller than the levels' buckets: probes past the table
    (96, 1 << 40),  # max_objects larger than the name table
])
def test_superblock_with_valid_checksum_but_impossible_name_table_is_corrupt(path, field, value):
    cxlkit.Pool(path, size=8 * MiB, host_id=0).close()
    with open(path, "r+b") as f:
        sb = bytearray(f.read(208))
        fmt = "<I" if field == 56 else "<Q"
        struct.pack_into(fmt, sb, field, value)
        struct.pack_into("<Q", sb, 200, (1 << 32) | crc32c(bytes(sb[:200])))
        f.seek(0)
        f.write(sb)
    before = digest(path)
    with pytest.raises(cxlkit.PoolCorruptError):
        cxlkit.Pool(path, host_id=0)
    assert digest(path) == before


def test_destroyed_objects_beyond_the_pending_list_are_freed_when_their_readers_leave(path):
    n = 140  # more than the 128 entries of the pending list
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=1) as p:
        for i in range(n):
            p.create(f"o{i}", 64, data=b"x" * 64).close()
        readers = [p.open(f"o{i}") for i in range(n)]
        for i in range(n):
            p.destroy(f"o{i}")  # every one is leased: it waits for its reader
        for r in readers:
            r.close()
        rep = p.fsck(repair=False)
        assert rep.objects_dead == 0 and p.stat().used_bytes == 0


def test_host_id_beyond_the_pools_max_hosts_raises_an_error_naming_host_id(path):
    cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2).close()
    before = digest(path)
    with pytest.raises(cxlkit.PoolError, match="not a slot of this pool") as ei:
        cxlkit.Pool(path, host_id=5)
    assert path in str(ei.value)
    assert digest(path) == before

"""`cxlkit pool upgrade`: a version 1 pool becomes version 2 in place with every
published object readable by name with identical bytes; refused while a v1 host is alive or
when the metadata has no room (file unchanged); a crash at each step leaves a valid v1 pool
(upgrade retries) or a valid v2 pool; corrupt v1 pools give typed refusals."""
from __future__ import annotations

import gzip
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cxlkit
from cxlkit import _native
from cxlkit.cli import pool as _pool_cli  # noqa: F401 (registers `cxlkit pool`)
from cxlkit.cli.main import app
from cxlkit.errors import PoolInUseError
from cxlkit.pool.upgrade import upgrade

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import v1pool  # noqa: E402
from harness import crc32c  # noqa: E402

MiB = 1 << 20
V1 = Path(__file__).parents[1] / "data" / "pool_v1.bin.gz"


def payload(name: str, n: int) -> bytes:
    seed = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return (seed * (n // 8 + 1))[:n]


OBJECTS = {0: [("a", payload("a", 1000)), ("b", payload("b", 70_000)), ("c", payload("c", 64))],
           1: [("d", payload("d", 300_000))],
           3: [("e", payload("e", 5_000)), ("f", payload("f", 200_000))]}


def sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def version(path: str) -> int:
    with open(path, "rb") as f:
        return struct.unpack("<8xI", f.read(12))[0]


def assert_all_objects(path: str, objects=OBJECTS, host="reader") -> None:
    """Every object readable by name with its bytes, fsck clean, no extent held twice."""
    with cxlkit.Pool(path, host_id=host) as pool:
        for items in objects.values():
            for name, data in items:
                with pool.open(name) as o:
                    assert bytes(o.read()) == data, name
        rep = pool.fsck()
        assert rep.errors == 0 and rep.duplicate_names == 0, rep
        assert rep.objects_live == sum(len(v) for v in objects.values())
        assert pool.stat().version == _native.POOL_FORMAT_VERSION


@pytest.fixture
def path(pool_path):
    return pool_path


# 8 MiB, 4 hosts: the partitions end at the pool's end, so the metadata takes the free tail of
# the last partition (a cut); 8 MiB + 192 KiB leaves a tail after the partitions.
@pytest.mark.parametrize("total,cut", [(8 * MiB, True), (8 * MiB + 3 * 65536, False)])
def test_upgrade_keeps_every_object_by_name_with_identical_bytes(path, total, cut):
    v1pool.write_pool(path, total, OBJECTS)
    r = upgrade(path)
    assert (r.from_version, r.version, r.objects) == (1, 2, 6)
    assert (r.cut_bytes > 0) == cut
    assert version(path) == 2
    assert_all_objects(path)
    # the v1 hosts come back by name: their slot is taken over and rebuilt, and they write
    with cxlkit.Pool(path, host_id="v1-host-0") as pool:
        assert pool.host_id == 0
        pool.create("g", data=b"g" * 400_000).close()  # more than its partition's free run
        pool.destroy("a")
        rep = pool.fsck(repair=True)
        assert rep.errors == 0, rep
    objs = {0: [o for o in OBJECTS[0] if o[0] != "a"] + [("g", b"g" * 400_000)],
            1: OBJECTS[1], 3: OBJECTS[3]}
    assert_all_objects(path, objs)


def test_upgrade_of_a_pool_already_at_version_2_changes_nothing(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    upgrade(path)
    before = sha(path)
    r = cxlkit.upgrade_pool(path)  # the package's face of cxlkit.pool.upgrade.upgrade
    assert isinstance(r, cxlkit.UpgradeReport) and (r.from_version, r.version) == (2, 2)
    assert sha(path) == before


def test_upgrade_of_the_pool_made_by_the_version_1_code(path):
    with gzip.open(V1, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.chmod(path, 0o600)
    r = upgrade(path)
    assert r.from_version == 1
    with cxlkit.Pool(path, host_id="reader") as pool:
        names = [o.name for o in pool.list()]
        assert len(names) == r.objects
        for n in names:
            with pool.open(n) as o:
                assert len(bytes(o.read())) == o.nbytes
                o.verify()  # published with a checksum by the v1 code: the same bytes
        assert pool.fsck().errors == 0


def test_upgrade_while_a_v1_host_is_alive_raises_PoolInUseError_naming_it(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS, alive={1})
    before = sha(path)
    with pytest.raises(PoolInUseError, match=r"host slot 1 \('v1-host-1'\) is alive") as ei:
        upgrade(path)
    assert ei.value.host == 1 and ei.value.filename == path
    assert sha(path) == before


def test_upgrade_when_the_last_partition_is_full_raises_PoolFullError_unchanged(path):
    objs = dict(OBJECTS)
    objs[3] = OBJECTS[3] + [("tail", payload("tail", 1000))]
    v1pool.write_pool(path, 8 * MiB, objs, fill_last=True)
    before = sha(path)
    with pytest.raises(cxlkit.PoolFullError,
                       match="host slot 3 \\('v1-host-3'\\)'s partition.*last 0 bytes are free"):
        upgrade(path)
    assert sha(path) == before and version(path) == 1


# ---- crash safety: kill -9 at each step --------------------------------------------------

def _upgrade_crashing_at(path: str, point: str) -> None:
    _native.pool_crash_at(point, 1)
    upgrade(path)
    os._exit(0)  # the point was not reached


@pytest.mark.parametrize("point,after", [("upgrade.split", 1), ("upgrade.staged", 1),
                                         ("upgrade.committed", 2), ("upgrade.rewriting", 2)])
def test_a_crash_at_each_step_leaves_a_valid_v1_or_v2_pool(path, point, after):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    p = mp.get_context("fork").Process(target=_upgrade_crashing_at, args=(path, point))
    p.start()
    p.join(60)
    assert p.exitcode == 137, f"{point} not reached"
    assert version(path) == after
    if after == 1:
        # still a whole version 1 pool: its read-only view holds every object, fsck clean
        with _open_v1(path) as pool:
            for items in OBJECTS.values():
                for name, data in items:
                    with pool.open(name) as o:
                        assert bytes(o.read()) == data, name
            assert pool.fsck(repair=False).errors == 0
    else:
        assert_all_objects(path)  # already a whole v2 pool (the staged superblock if torn)
    r = upgrade(path)
    assert r.from_version == after
    assert_all_objects(path)
    with open(path, "rb") as f:  # offset 0 is the whole v2 superblock again
        sb = f.read(248)
    assert struct.unpack_from("<Q", sb, 240)[0] == (1 << 32) | crc32c(sb[:240])


# ---- corrupt version 1 pools: typed refusals, nothing written ----------------------------

def _poke(path: str, off: int, fmt: str, value: int, fix_sb: bool = True) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(struct.pack(fmt, value))
        if fix_sb:
            f.seek(0)
            sb = f.read(200)
            f.seek(200)
            f.write(struct.pack("<Q", (1 << 32) | crc32c(sb)))


@pytest.mark.parametrize("what,off,fmt,value,err", [
    ("checksum", 200, "<Q", 12345, cxlkit.PoolCorruptError),
    ("max_hosts", 40, "<I", 65, cxlkit.PoolCorruptError),
    ("partition past the end", 160, "<Q", 1 << 40, cxlkit.PoolCorruptError),
    ("partition not 64 KiB", 160, "<Q", 65536 + 64, cxlkit.PoolCorruptError),
    ("total past the file", 16, "<Q", 1 << 40, cxlkit.PoolCorruptError),
    ("names overlap slots", 120, "<Q", 4096, cxlkit.PoolCorruptError),
    ("level with no bucket", 56, "<I", 0, cxlkit.PoolCorruptError),
    ("version 7", 8, "<I", 7, cxlkit.PoolVersionError),
    ("magic", 0, "<Q", 0, cxlkit.PoolFormatError),
])
def test_a_corrupt_v1_superblock_is_refused_typed_and_unchanged(path, what, off, fmt, value,
                                                                 err):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    _poke(path, off, fmt, value, fix_sb=what != "checksum")
    before = sha(path)
    with pytest.raises(err):
        upgrade(path)
    assert sha(path) == before


@pytest.mark.parametrize("field,value", [(8, 0), (8, 1 << 50), (8, 100), (0, 0xDEAD), (4, 9)])
def test_a_broken_v1_block_chain_is_refused_typed_and_unchanged(path, field, value):
    g = v1pool.write_pool(path, 8 * MiB, OBJECTS)
    block = g["data_off"] + g["partition_bytes"] + 0  # host 1's first block
    _poke(path, block + field, "<Q" if field == 8 else "<I", value, fix_sb=False)
    before = sha(path)
    with pytest.raises(cxlkit.PoolCorruptError, match="block chain"):
        upgrade(path)
    assert sha(path) == before


def test_upgrade_of_a_missing_path_raises_FileNotFoundError(tmp_path):
    with pytest.raises(FileNotFoundError):
        upgrade(str(tmp_path / "none"))


# ---- the CLI -----------------------------------------------------------------------------

def test_cli_pool_upgrade_then_already_done(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    r = CliRunner().invoke(app, ["pool", "upgrade", path])
    assert r.exit_code == 0 and "upgraded from version 1 to 2: 6 objects" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["pool", "upgrade", path, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["from_version"] == 2 and d["version"] == 2
    r = CliRunner().invoke(app, ["pool", "upgrade", "--help"])
    assert r.exit_code == 0 and "version 1" in r.output


def test_cli_pool_upgrade_of_a_live_v1_pool_is_one_line_exit_2(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS, alive={0})
    r = CliRunner().invoke(app, ["pool", "upgrade", path])
    assert r.exit_code == 2
    assert "host slot 0 ('v1-host-0') is alive" in " ".join(r.output.split())
    assert "Traceback" not in r.output


# ---- a version 1 pool opened without upgrade: read-only -----------------------------------

def _open_v1(path: str, host="reader") -> cxlkit.Pool:
    with pytest.warns(cxlkit.errors.PoolReadOnlyWarning,
                      match=f"version 1 .*opened read-only.*`cxlkit pool upgrade {path}`"):
        return cxlkit.Pool(path, host_id=host)


def test_a_v1_pool_opens_read_only_every_object_readable_file_unchanged(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    before = sha(path)
    with _open_v1(path) as pool:
        assert pool.read_only
        st = pool.stat()
        assert (st.version, st.size) == (1, 8 * MiB)
        assert sorted(o.name for o in pool.list()) == list("abcdef")
        for items in OBJECTS.values():
            for name, data in items:
                with pool.open(name) as o:
                    assert bytes(o.read()) == data
        rep = pool.fsck(repair=False)
        assert rep.errors == 0 and rep.objects_live == 6
    assert sha(path) == before


@pytest.mark.parametrize("write", ["create", "destroy", "repair", "release"])
def test_writes_to_a_v1_pool_raise_PoolReadOnlyError_naming_upgrade(path, write):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    before = sha(path)
    with _open_v1(path) as pool:
        act = {"create": lambda: pool.create("new", data=b"n" * 100),
               "destroy": lambda: pool.destroy("a"),
               "repair": lambda: pool.fsck(repair=True),
               "release": lambda: pool.release(1)}[write]
        with pytest.raises(cxlkit.errors.PoolReadOnlyError, match="`cxlkit pool upgrade"):
            act()
        with pool.open("a") as o:  # still readable after the refusal
            assert bytes(o.read()) == OBJECTS[0][0][1]
    assert sha(path) == before


def test_a_live_v1_host_does_not_stop_a_read_only_open(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS, alive={0})
    with _open_v1(path) as pool:
        with pool.open("d") as o:
            assert bytes(o.read()) == OBJECTS[1][0][1]


def test_a_corrupt_v1_pool_open_is_a_typed_refusal(path):
    g = v1pool.write_pool(path, 8 * MiB, OBJECTS)
    _poke(path, g["data_off"] + 8, "<Q", 1 << 50, fix_sb=False)  # host 0's first block_bytes
    before = sha(path)
    with pytest.raises(cxlkit.PoolCorruptError):
        cxlkit.Pool(path, host_id="reader")
    assert sha(path) == before


def test_cli_pool_ls_of_a_v1_pool_lists_with_one_note_naming_upgrade(path):
    v1pool.write_pool(path, 8 * MiB, OBJECTS)
    r = CliRunner().invoke(app, ["pool", "ls", path, "--host-id", "reader"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert out.count("cxlkit pool upgrade") == 1 and "read-only" in out
    for name in "abcdef":
        assert name in r.stdout


def _check_v1_or_v2(path: str) -> int:
    """The pool is a whole v1 pool (read through its view) or a whole v2 pool: every object
    with its bytes, fsck clean. Returns the version word."""
    v = version(path)
    assert v in (1, 2)
    if v == 2:
        assert_all_objects(path)
        return v
    with _open_v1(path) as pool:
        for items in OBJECTS.values():
            for name, data in items:
                with pool.open(name) as o:
                    assert bytes(o.read()) == data, name
        assert pool.fsck(repair=False).errors == 0
    return v


def test_sigkill_at_random_moments_of_an_upgrade_leaves_v1_or_v2(path):
    import random

    rng = random.Random(18)
    seen = set()
    for _ in range(12):
        v1pool.write_pool(path, 8 * MiB, OBJECTS)
        pid = os.fork()
        if pid == 0:  # the child: upgrade, killed wherever it is
            try:
                upgrade(path)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, 0.002))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        seen.add(_check_v1_or_v2(path))
        r = upgrade(path)  # whatever the kill left, upgrade finishes it
        assert r.version == 2
        assert_all_objects(path)
    assert seen  # both outcomes are valid; which ones a run hits depends on the machine


def test_a_live_v1_host_whose_tag_is_not_utf8_is_named_with_a_replacement(path):
    # any host writes its slot's tag: bytes that are not UTF-8 still give the typed refusal
    v1pool.write_pool(path, 8 * MiB, OBJECTS, alive={1})
    raw = Path(path).read_bytes()
    at = raw.index(b"v1-host-1")
    with open(path, "r+b") as f:
        f.seek(at + len(b"v1-host-"))
        f.write(b"\xff")
    with pytest.raises(PoolInUseError, match="host slot 1 \\('v1-host-\ufffd'\\) is alive"):
        upgrade(path)

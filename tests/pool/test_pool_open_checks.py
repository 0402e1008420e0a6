"""Opening what is not a usable pool is a typed error that says what it is: a superblock whose
checksum is valid but whose data_off is not 64 KiB-aligned (named), a FIFO, a symbolic link
to /dev/zero (a character device that is not devdax)."""
from __future__ import annotations

import errno
import os
import struct
import sys
from pathlib import Path

import pytest

import cxlkit
from cxlkit import pool as P

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from harness import crc32c  # noqa: E402

MiB = 1 << 20
DATA_OFF, EXTENT_BYTES, NEXTENTS, CHECKSUM = 152, 200, 208, 240


def _reseal(sb: bytearray) -> None:
    sb[CHECKSUM:CHECKSUM + 8] = struct.pack("<Q", (1 << 32) | crc32c(bytes(sb[:CHECKSUM])))


def test_a_data_off_not_64KiB_aligned_under_a_valid_checksum_is_refused_naming_it(pool_path):
    cxlkit.Pool(pool_path, size=8 * MiB, host_id=0).close()
    with open(pool_path, "r+b") as f:
        sb = bytearray(f.read(248))
        off, = struct.unpack_from("<Q", sb, DATA_OFF)
        extent, n = struct.unpack_from("<QQ", sb, EXTENT_BYTES)
        assert off % 65536 == 0
        # one extent fewer leaves room to move the data region up a line: every other rule
        # of the geometry still holds, only data_off's alignment is broken
        struct.pack_into("<QQ", sb, DATA_OFF, off + 64, (n - 1) * extent)
        struct.pack_into("<Q", sb, NEXTENTS, n - 1)
        _reseal(sb)
        f.seek(0)
        f.write(sb)
    before = Path(pool_path).read_bytes()
    with pytest.raises(cxlkit.PoolCorruptError) as ei:
        cxlkit.Pool(pool_path, host_id=0)
    assert ei.value.errno == errno.EBADMSG
    assert "data_off is not 64 KiB-aligned" in str(ei.value) and pool_path in str(ei.value)
    assert Path(pool_path).read_bytes() == before  # a failed open writes nothing


def test_a_fifo_named_as_a_pool_is_called_a_fifo(tmp_path):
    fifo = tmp_path / "cxlkit-fifo"
    os.mkfifo(fifo)
    with pytest.raises(cxlkit.PoolFormatError) as ei:
        cxlkit.Pool(str(fifo), host_id=0)
    assert "a FIFO, not a pool file or device" in str(ei.value) and str(fifo) in str(ei.value)


def test_a_symlink_to_dev_zero_is_a_typed_error_naming_the_link(tmp_path):
    link = tmp_path / "cxlkit-zero"
    link.symlink_to("/dev/zero")
    with pytest.raises(cxlkit.PoolFormatError) as ei:
        cxlkit.Pool(str(link), host_id=0)
    msg = str(ei.value)
    assert not isinstance(ei.value, FileNotFoundError)
    assert "symbolic link to /dev/zero" in msg and "not a devdax device" in msg
    assert str(link) in msg


def test_a_symlink_to_a_pool_file_still_opens(pool_path, tmp_path):
    cxlkit.Pool(pool_path, size=8 * MiB, host_id=0).close()
    link = tmp_path / "cxlkit-link"
    link.symlink_to(pool_path)
    with cxlkit.Pool(str(link), host_id=0) as p:
        assert p.stat().size == 8 * MiB


def test_the_probe_names_the_broken_field_without_opening_the_pool(pool_path):
    cxlkit.Pool(pool_path, size=8 * MiB, host_id=0).close()
    d = P._native.pool_probe(pool_path)
    assert (d.superblock, d.version, d.size, d.why) == (0, 2, 8 * MiB, "")


def test_a_symlink_loop_named_as_a_pool_is_a_typed_error(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(cxlkit.PoolFormatError, match="loop") as ei:
        cxlkit.Pool(str(a), host_id=0)
    assert str(a) in str(ei.value)


MAX_OBJECTS = 96  # superblock field (tests/fuzz/layout.py)


def test_a_host_holding_more_names_than_a_rewritten_max_objects_allows_is_not_clean(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0) as p:
        for i in range(5):
            p.create(f"o{i}", data=b"x" * 100).close()
    with open(pool_path, "r+b") as f:
        sb = bytearray(f.read(248))
        struct.pack_into("<Q", sb, MAX_OBJECTS, 3)  # fewer than host 0 holds, validly sealed
        _reseal(sb)
        f.seek(0)
        f.write(sb)
    with cxlkit.Pool(pool_path, host_id=0) as p:
        with pytest.raises(cxlkit.PoolFullError):  # the superblock's word is the rule
            p.create("o5", data=b"y")
        rep = p.fsck()
        assert rep.errors >= 1 and not rep.clean  # and fsck says the two disagree

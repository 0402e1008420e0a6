"""`cxlkit pool rm` / cxlkit.pool.remove(): only a file proven a pool (a regular file, not
followed through a link, with the pool magic and a whole superblock, read without mapping it)
is deleted, and only while no host uses it unless forced; a damaged pool needs force; what was
deleted is said. `pool rm POOL OBJ` still destroys objects."""
from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cxlkit
from cxlkit import pool as P

MiB = 1 << 20
HOST0 = 4096  # host slot 0: tag[32], boot u64 at 32, heartbeat_ns i64 at 40


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "cxlkit"  # the entry point beside this interpreter
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)


def made(path: str, **kw) -> str:
    cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2, **kw).close()
    return path


# ---- what is not a pool ------------------------------------------------------------------

def test_rm_of_a_file_that_is_not_a_pool_raises_PoolFormatError_and_keeps_it(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("x\n")
    with pytest.raises(cxlkit.PoolFormatError) as ei:
        P.remove(str(notes))
    assert ei.value.errno == errno.EMEDIUMTYPE and str(notes) in str(ei.value)
    assert "nothing removed" in str(ei.value)
    r = cli("pool", "rm", str(notes))
    assert r.returncode != 0 and "not a cxlkit pool" in r.stderr
    assert notes.read_text() == "x\n"


def test_rm_of_a_symlink_to_a_pool_deletes_neither_the_link_nor_the_pool(pool_path, tmp_path):
    made(pool_path)
    link = tmp_path / "link"
    link.symlink_to(pool_path)
    with pytest.raises(cxlkit.PoolFormatError, match="symbolic link") as ei:
        P.remove(str(link))
    assert str(link) in str(ei.value)
    assert link.is_symlink() and os.path.isfile(pool_path)


def test_rm_of_a_fifo_says_it_is_a_fifo_and_does_not_block(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(cxlkit.PoolFormatError, match="a FIFO") as ei:
        P.remove(str(fifo))
    assert str(fifo) in str(ei.value)
    assert fifo.exists()


def test_rm_without_the_pool_magic_is_refused_even_with_force(pool_path):
    made(pool_path)
    with open(pool_path, "r+b") as f:
        f.write(b"NOTAPOOL")
    with pytest.raises(cxlkit.PoolFormatError):
        P.remove(pool_path, force=True)
    assert os.path.isfile(pool_path)


def test_rm_of_a_missing_pool_raises_FileNotFoundError_naming_it(pool_path):
    with pytest.raises(FileNotFoundError) as ei:
        P.remove(pool_path)
    assert ei.value.filename == pool_path


# ---- damaged pools -------------------------------------------------------------------------

def test_rm_of_a_pool_with_a_bad_checksum_needs_force(pool_path):
    made(pool_path)
    with open(pool_path, "r+b") as f:
        f.seek(24)  # the uuid: covered by the checksum, read by nothing else here
        f.write(b"\xff" * 16)
    with pytest.raises(cxlkit.PoolCorruptError, match="--force") as ei:
        P.remove(pool_path)
    assert ei.value.errno == errno.EBADMSG and pool_path in str(ei.value)
    assert os.path.isfile(pool_path)
    r = P.remove(pool_path, force=True)
    assert r.damaged and "checksum" in r.damaged and not os.path.exists(pool_path)


# ---- live and dead hosts -------------------------------------------------------------------

def test_rm_refuses_a_pool_this_machine_holds_open_unless_forced(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0, max_hosts=2):
        with pytest.raises(cxlkit.PoolError) as ei:
            P.remove(pool_path)
        assert ei.value.errno == errno.EBUSY and "1 live host" in str(ei.value)
        assert os.path.isfile(pool_path)
        r = P.remove(pool_path, force=True)
        assert (r.hosts_live, r.path) == (1, pool_path) and not os.path.exists(pool_path)


def test_cli_rm_refuses_while_another_process_holds_the_pool_then_removes_it(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=1, max_hosts=2):
        r = cli("pool", "rm", pool_path)
        assert r.returncode != 0 and "live host" in r.stderr and "--force" in r.stderr
        assert os.path.isfile(pool_path)
    r = cli("pool", "rm", pool_path)
    assert r.returncode == 0, r.stderr
    # one line: the path, its size, its hosts (closed just now: dead, however fresh its beat)
    assert r.stdout.strip() == f"removed {pool_path}: 8 MiB, 0 live / 1 dead hosts"
    assert not os.path.exists(pool_path)


def _stamp_other_boot(path: str, heartbeat_ns: int) -> None:
    """Host slot 0 as a host of another machine (another boot) left it."""
    with open(path, "r+b") as f:
        f.seek(HOST0 + 32)
        f.write(struct.pack("<Qq", 0xABCDEF, heartbeat_ns))


def test_rm_counts_another_machines_host_live_while_its_heartbeat_is_fresh(pool_path):
    made(pool_path)
    _stamp_other_boot(pool_path, time.time_ns())
    with pytest.raises(cxlkit.PoolError, match="1 live host"):
        P.remove(pool_path)
    _stamp_other_boot(pool_path, time.time_ns() - 3600 * 10**9)
    r = P.remove(pool_path)
    assert (r.hosts_live, r.hosts_dead, r.size) == (0, 1, 8 * MiB)


def test_rm_json_names_what_was_removed(pool_path):
    made(pool_path)
    r = cli("pool", "rm", pool_path, "--json")
    assert r.returncode == 0, r.stderr
    assert '"removed": "%s"' % pool_path in r.stdout and '"hosts_dead": 1' in r.stdout


# ---- objects -------------------------------------------------------------------------------

def test_rm_with_object_names_still_destroys_objects_and_keeps_the_pool(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0, max_hosts=2) as p:
        p.create("a", data=b"a").close()
        p.create("b", data=b"b").close()
    r = cli("pool", "rm", pool_path, "a", "--host-id", "0")
    assert r.returncode == 0, r.stderr
    with cxlkit.Pool(pool_path, host_id=0) as p:
        assert "a" not in p and "b" in p
    assert cli("pool", "rm", pool_path, "b", "--host-id", "0", "--force").returncode != 0
    assert Path(pool_path).is_file()

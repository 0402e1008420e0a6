"""The pool's records (PoolStat, HostInfo, FsckReport, ObjectInfo) are the native library's C
structs bound as they are: the attributes and Python types callers had, read-only, with
equality, a repr and as_dict()."""
from __future__ import annotations

import errno
import json
import os
import stat
import uuid
from pathlib import Path

import pytest

import cxlkit
from cxlkit import _native

STAT_FIELDS = ("path", "kind", "size", "version", "uuid", "max_hosts", "host_id",
               "hosts_active", "coherence", "partition_bytes", "used_bytes", "free_bytes",
               "objects", "objects_host", "max_objects", "align", "nbackings",
               "lease_timeout_s", "data_offset", "extent_bytes", "nextents", "extents_held",
               "extents_free", "names_host")
HOST_FIELDS = ("slot", "state", "name", "pid", "heartbeat_age_s", "extents", "held_bytes",
               "used_bytes", "objects")
OBJECT_FIELDS = ("name", "nbytes", "offset", "host", "generation", "state", "checksum",
                 "created", "created_ns")


@pytest.fixture
def pool():
    path = f"/dev/shm/cxlkit-test-records-{uuid.uuid4().hex[:10]}"
    with cxlkit.Pool(path, "8M", host_id=0, max_hosts=2) as p:
        yield p
    Path(path).unlink(missing_ok=True)


def test_stat_is_the_native_struct_with_the_attributes_and_types_callers_had(pool):
    st = pool.stat()
    assert type(st) is _native.PoolStat and isinstance(st, cxlkit.PoolStat)
    assert st._fields == STAT_FIELDS and tuple(st.as_dict()) == STAT_FIELDS
    assert st.path == pool.path and st.kind == "file" and st.coherence == "host"
    assert isinstance(st.uuid, str) and len(st.uuid) == 32 and int(st.uuid, 16) > 0
    assert isinstance(st.lease_timeout_s, float) and st.lease_timeout_s > 0
    assert (st.size, st.max_hosts, st.host_id, st.version) == (8 << 20, 2, 0, 2)
    assert st.used_bytes + st.free_bytes == st.extents_held * st.extent_bytes
    assert json.loads(json.dumps(st.as_dict())) == st.as_dict()


def test_records_are_frozen(pool):
    pool.create("a", data=b"x").close()
    for rec, attr in ((pool.stat(), "size"), (pool.hosts()[0], "state"),
                      (pool.fsck(repair=False), "errors"), (pool.info("a"), "nbytes")):
        with pytest.raises(AttributeError):
            setattr(rec, attr, 1)
        with pytest.raises(AttributeError):
            setattr(rec, "not_a_field", 1)


def test_records_compare_hash_and_print_by_their_fields(pool):
    a, b = pool.stat(), pool.stat()
    assert a == b and hash(a) == hash(b) and a != object()
    assert repr(a).startswith(f"PoolStat(path={pool.path!r}, kind='file', size=8388608")
    pool.create("a", data=b"x").close()
    assert pool.stat() != a  # objects, used bytes
    info = pool.info("a")
    assert pool.list() == [info] and repr(info).startswith("ObjectInfo(name='a', nbytes=1")


def test_hosts_are_host_info_with_state_words(pool):
    rows = pool.hosts()
    assert [type(h) for h in rows] == [_native.HostInfo] * 2
    me, free = rows
    assert me._fields == HOST_FIELDS and tuple(me.as_dict()) == HOST_FIELDS
    assert (me.slot, me.state, free.slot, free.state) == (0, "live", 1, "free")
    assert isinstance(me.heartbeat_age_s, float) and free.heartbeat_age_s is None
    assert isinstance(me.name, str) and me.pid > 0 and free.pid == 0


def test_objects_are_object_info(pool):
    pool.create("summed", data=b"abcd").close()  # data: published with a checksum
    pool.create("plain", 64).close()             # being created, no checksum
    by = {o.name: o for o in pool.list()}
    assert by["summed"]._fields == OBJECT_FIELDS
    s, c = by["summed"], by["plain"]
    assert (s.state, s.live, c.state, c.live) == ("live", True, "creating", False)
    assert isinstance(s.checksum, int) and 0 <= s.checksum < 1 << 32 and c.checksum is None
    assert isinstance(s.created, float) and s.created == s.created_ns / 1e9
    assert (s.nbytes, s.host) == (4, 0) and s.offset % 64 == 0


def test_fsck_report_is_native_with_clean_and_a_keyword_constructor(pool):
    rep = pool.fsck(repair=False)
    assert type(rep) is _native.FsckReport and rep.clean and rep.errors == 0
    assert cxlkit.FsckReport() == cxlkit.FsckReport(**dict.fromkeys(rep._fields, 0))
    assert not cxlkit.FsckReport(errors=1).clean
    with pytest.raises(TypeError, match="no field bogus"):
        cxlkit.FsckReport(bogus=1)
    with pytest.raises(TypeError, match="FsckReport field"):
        cxlkit.FsckReport(errors=-1)


def test_records_the_library_gives_have_no_constructor():
    for cls in (cxlkit.PoolStat, cxlkit.HostInfo, cxlkit.ObjectInfo):
        with pytest.raises(TypeError):
            cls()


def test_cli_host_rows_match_host_info(pool):
    """The CLI's own rows (read without attaching, or marked exited) have HostInfo's fields
    in its order, so `cxlkit pool hosts --json` gives one shape for both."""
    from cxlkit.cli.pool_hosts import HostRow

    me = pool.hosts()[0]
    row = HostRow(**{**me.as_dict(), "state": "exited"})
    assert tuple(row.as_dict()) == me._fields
    assert {**row.as_dict(), "state": me.state} == me.as_dict()


PROBE_FIELDS = ("file_type", "superblock", "version", "max_hosts", "hosts_live", "hosts_dead",
                "size", "dev", "ino", "why")
UPGRADE_FIELDS = ("from_version", "busy_host", "busy_tag", "extent_bytes", "nextents",
                  "objects", "meta_off", "cut_bytes", "errno")


def test_the_probe_is_a_read_only_record_of_the_file_it_read(pool, tmp_path):
    d = _native.pool_probe(pool.path)
    st = os.lstat(pool.path)
    assert type(d) is _native.PoolProbeInfo and d._fields == PROBE_FIELDS
    assert (d.superblock, d.version, d.max_hosts, d.hosts_live, d.why) == (0, 2, 2, 1, "")
    assert (d.size, d.dev, d.ino, d.file_type) == (8 << 20, st.st_dev, st.st_ino,
                                                  stat.S_IFREG)
    with pytest.raises(AttributeError):
        d.hosts_live = 0
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * 8192)
    assert _native.pool_probe(str(junk)).superblock == errno.EMEDIUMTYPE  # an errno, positive


def test_the_upgrade_result_is_a_read_only_record_with_its_errno(pool, tmp_path):
    u = _native.pool_upgrade(pool.path)
    assert type(u) is _native.PoolUpgradeInfo and u._fields == UPGRADE_FIELDS
    assert (u.errno, u.from_version, u.busy_tag) == (0, 2, "")  # already version 2
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * 8192)
    assert _native.pool_upgrade(str(junk)).errno == errno.EMEDIUMTYPE
    assert tuple(u.as_dict()) == UPGRADE_FIELDS and u == _native.pool_upgrade(pool.path)

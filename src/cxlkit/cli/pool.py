"""`cxlkit pool create | ls | stat | rm | fsck | hosts | release | upgrade`: manage pools and their objects; run_demo()
shares an object between two processes (two simulated hosts) for `cxlkit demo`."""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import multiprocessing as mp
import sys
import time
from struct import error as struct_error
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from .. import pool as P
from . import tables as T
from .main import app, fail, one_line
from .pool_hosts import _age, _exited, _hosts_from_file
from .poolopen import GROUP_OPT, shared_gid

pool_app = typer.Typer(no_args_is_help=True, help="Shared memory pools of named objects.")
app.add_typer(pool_app, name="pool")

POOL_ARG = typer.Argument(None, help="pool name (/dev/shm/cxlkit-NAME), path or /dev/daxX.Y; "
                          "default: CXLKIT_POOL")
HOST_OPT = typer.Option(None, "--host-id", help="host slot (int) or host name; default: "
                        "CXLKIT_HOST_ID, else the machine id")
JSON_OPT = typer.Option(False, "--json", help="one JSON document on stdout")
COHERENCE_OPT = typer.Option(None, "--coherence", help="host (one coherence domain) or none "
                             "(hosts behind a CXL switch); default: CXLKIT_COHERENCE, else host")


def _fail(msg: str, code: int = 2) -> NoReturn:
    fail(msg, code)  # one line on stderr


DEFAULT_SIZE = 64 << 20  # `pool create` of a new pool without --size
# The library's messages name Python arguments; on the command line they are flags.
_FLAGS = (("overcommit=True", "--overcommit"), ("pass group=", "pass --group GROUP"),
          ("`cxlkit pool rm --force`, or force=True", "--force"),
          ("max_hosts", "--max-hosts"), ("max_objects", "--max-objects"),
          ("numa_node", "--numa-node"), ("host_id", "--host-id"),
          ("open it without them", "open it without --size and --max-hosts"))


def pool_error(path: str, e: BaseException) -> str:
    """A pool's open error as `pool PATH: why; what to do`, naming CLI flags."""
    device = path.startswith("/dev/") and not path.startswith("/dev/shm/")
    if isinstance(e, FileNotFoundError) and not device and not os.path.exists(path):
        base = os.path.basename(path)
        name = base[len("cxlkit-"):] if path == P.resolve(base[len("cxlkit-"):] or base) \
            else path
        return (f"pool {path}: no such pool; create it with `cxlkit pool create {name}` or "
                "list the pools with `cxlkit pool ls --pools`")
    msg = one_line(e)
    for py, flag in _FLAGS:
        msg = msg.replace(py, flag)
    if "too small for a pool" in msg:
        msg += "; give a larger --size, e.g. 64M"
    return msg if msg.startswith(path) or path in msg else f"pool {path}: {msg}"


def _check_size(path: str, nbytes: Optional[int]) -> None:
    """--size against an existing pool file's size, in units that fit (the library would say
    'not 0.0 MiB' for --size 4K)."""
    if nbytes is None or not os.path.isfile(path):
        return
    have = os.path.getsize(path)
    if have != nbytes:
        _fail(f"--size {T.size(nbytes)}: the pool {path} exists with size {T.size(have)}; "
              f"leave --size out to open it, or remove it first (`cxlkit pool rm {path}`)")


def _check_node(node: Optional[int]) -> None:
    """--numa-node names a node with memory (the library would only see a failed bind)."""
    if node is None:
        return
    from .. import topology

    have = topology.memory_nodes()
    if node not in have:
        _fail(f"--numa-node {node}: no memory node {node} on this machine (nodes with memory: "
              f"{','.join(map(str, have))}); pass one of them or leave it out")


def _host(host_id: Optional[str]) -> int | str | None:
    if host_id is None:
        return None
    return int(host_id) if host_id.isdigit() else host_id


def _open(pool: Optional[str], host_id: Optional[str], coherence: Optional[str] = None,
          group: Optional[str] = None, **kw) -> P.Pool:
    import warnings

    try:
        gid = shared_gid(P.resolve(pool), group)
        if kw.get("size", 0) is None:
            del kw["size"]  # an existing pool, opened at its own size
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", P.PoolReadOnlyWarning)
            p = P.Pool(pool, host_id=_host(host_id), coherence=coherence, group=gid, **kw)
        for n in notes:  # a version 1 pool: read-only, one line naming `cxlkit pool upgrade`
            typer.echo(f"Warning: {' '.join(str(n.message).split())}", err=True)
        return p
    except (OSError, ValueError, TypeError) as e:
        _fail(pool_error(P.resolve(pool), e))


def _mib(n: int) -> str:
    return T.size(n)  # a unit that fits: 4 KiB, 64 MiB, 1 GiB


def _stat_table(st: P.PoolStat) -> Table:
    t = Table(title=f"pool {st.path}", show_header=False)
    rows = [("kind", st.kind), ("size", _mib(st.size)), ("format version", str(st.version)),
            ("uuid", st.uuid), ("hosts (active / max)", f"{st.hosts_active} / {st.max_hosts}"),
            ("this host", str(st.host_id)), ("coherence", st.coherence),
            ("data region (one host may fill it)", _mib(st.partition_bytes)),
            ("extents (size / this host / free)",
             f"{_mib(st.extent_bytes)} / {st.extents_held} / {st.extents_free} of {st.nextents}"),
            ("this host used / free in its extents",
             f"{_mib(st.used_bytes)} / {_mib(st.free_bytes)}"),
            ("unclaimed (any host may claim it)", _mib(st.extents_free * st.extent_bytes)),
            ("objects (all hosts / this host)", f"{st.objects} / {st.objects_host}"),
            ("names per host", str(st.max_objects)), ("backings", str(st.nbackings)),
            ("alignment", f"{st.align} B"), ("lease timeout", f"{st.lease_timeout_s:g} s")]
    for k, v in rows:
        t.add_row(k, v)
    return t


def _print_stat(st: P.PoolStat, as_json: bool) -> None:
    if as_json:
        print(json.dumps(st.as_dict()))
    else:
        Console().print(_stat_table(st))


@pool_app.command("create")
def create_cmd(
    pool: Optional[str] = POOL_ARG,
    size: Optional[str] = typer.Option(None, "--size", help="total bytes (files and memfd), "
                                       "e.g. 1G; default: 64M for a new pool, an existing "
                                       "pool's own size"),
    max_hosts: Optional[int] = typer.Option(None, "--max-hosts",
                                            help="host slots (hosts share the data region, "
                                            "claimed in extents on demand); default 4"),
    max_objects: Optional[int] = typer.Option(None, "--max-objects", help="names per host"),
    group: Optional[str] = typer.Option(None, "--group", help="group that may open it (mode "
                                        "0660); an existing group-shared pool is opened"),
    numa_node: Optional[int] = typer.Option(None, "--numa-node", help="bind its memory here"),
    force: bool = typer.Option(False, "--force", help="devices: format over foreign data"),
    overcommit: bool = typer.Option(False, "--overcommit",
                                    help="files: skip the check against the free space"),
    host_id: Optional[str] = HOST_OPT,
    coherence: Optional[str] = COHERENCE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Create (format) a pool; an existing pool is opened when its geometry matches."""
    path = P.resolve(pool)
    try:
        nbytes = P.parse_size(size) if size is not None else (
            None if os.path.exists(path) or path.startswith("/dev/") else DEFAULT_SIZE)
    except (TypeError, ValueError) as e:
        _fail(f"--size {size}: {one_line(e)}; give bytes with a unit, e.g. 64M or 1G")
    _check_node(numa_node)
    _check_size(path, nbytes)
    with _open(pool, host_id, coherence, size=nbytes, max_hosts=max_hosts,
               max_objects=max_objects, group=group, numa_node=numa_node, force=force,
               create=True, overcommit=overcommit) as p:
        _print_stat(p.stat(), as_json)


@pool_app.command("ls")
def ls_cmd(pool: Optional[str] = POOL_ARG, host_id: Optional[str] = HOST_OPT,
           pools: bool = typer.Option(False, "--pools", help="list pool files in /dev/shm"),
           coherence: Optional[str] = COHERENCE_OPT, group: Optional[str] = GROUP_OPT,
           as_json: bool = JSON_OPT) -> None:
    """List the objects of a pool (every host's), or with --pools the embedded pool files."""
    if pools:
        files = [str(f) for f in P.embedded_pools()]
        if as_json:
            print(json.dumps(files))
        else:
            for f in files:
                print(f)
        return
    with _open(pool, host_id, coherence, group) as p:
        objs = p.list()
    if as_json:
        print(json.dumps([o.as_dict() for o in objs]))
        return
    t = T.table(f"{len(objs)} object(s)")
    T.text(t, "name")
    T.num(t, "bytes")
    T.num(t, "host")
    t.add_column("state", no_wrap=True)
    for col in ("gen", "offset"):
        T.num(t, col)
    for col in ("crc32c", "created"):
        t.add_column(col, no_wrap=True)
    for o in objs:
        t.add_row(o.name, str(o.nbytes), str(o.host), o.state, str(o.generation),
                  f"{o.offset:#x}", f"{o.checksum:08x}" if o.checksum is not None else "-",
                  time.strftime("%m-%d %H:%M:%S", time.localtime(o.created)))
    Console().print(t)


@pool_app.command("stat")
def stat_cmd(pool: Optional[str] = POOL_ARG, host_id: Optional[str] = HOST_OPT,
             coherence: Optional[str] = COHERENCE_OPT, group: Optional[str] = GROUP_OPT,
             as_json: bool = JSON_OPT) -> None:
    """Geometry and usage of a pool."""
    with _open(pool, host_id, coherence, group) as p:
        _print_stat(p.stat(), as_json)


@pool_app.command("rm")
def rm_cmd(pool: str = typer.Argument(..., help="pool name or path"),
           names: list[str] = typer.Argument(None, help="objects to destroy; none: delete "
                                             "the pool file itself"),
           force: bool = typer.Option(False, "--force", help="delete the pool file even while "
                                      "hosts use it, or when its superblock is damaged (the "
                                      "pool magic must still be there: other files are never "
                                      "deleted)"),
           host_id: Optional[str] = HOST_OPT, coherence: Optional[str] = COHERENCE_OPT,
           as_json: bool = JSON_OPT) -> None:
    """Destroy objects of this host, or delete a pool file: only a regular file whose
    superblock proves it a pool (magic, checksum, geometry; read without mapping it, a
    symbolic link is not followed), and only while no host uses it (a process of this
    machine holds it open, or another machine's host beat within the lease timeout).
    --force deletes it anyway while hosts use it (their mappings keep the memory until they
    close) and deletes a pool whose superblock is damaged or of an unknown version, which
    cannot be proven a pool. Prints the path, its size and its live / dead hosts."""
    if not names:
        try:
            r = P.remove(pool, force=force)
        except (OSError, ValueError) as e:
            _fail(pool_error(P.resolve(pool), e))
        if as_json:
            print(json.dumps({"removed": r.path, **dataclasses.asdict(r)}))
        else:
            note = f"; forced past: {r.damaged}" if r.damaged else ""
            print(f"removed {r.path}: {T.size(r.size)}, {r.hosts_live} live / "
                  f"{r.hosts_dead} dead hosts{note}")
        return
    if force:
        _fail("--force applies to deleting the pool file, not to destroying objects")
    done, errors = [], {}
    with _open(pool, host_id, coherence) as p:
        for n in names:
            try:
                p.destroy(n)
                done.append(n)
            except (KeyError, OSError, ValueError) as e:
                errors[n] = one_line(e)
    if as_json:
        print(json.dumps({"destroyed": done, "errors": errors}))
    else:
        for n, msg in errors.items():  # one line per object, in the CLI's one voice
            print(f"Error: object {n} in pool {p.path}: {msg}", file=sys.stderr)
    if errors:
        raise typer.Exit(2)


@pool_app.command("fsck")
def fsck_cmd(pool: Optional[str] = POOL_ARG, host_id: Optional[str] = HOST_OPT,
             repair: bool = typer.Option(True, "--repair/--no-repair",
                                         help="rebuild this host's part first"),
             coherence: Optional[str] = COHERENCE_OPT, group: Optional[str] = GROUP_OPT,
             as_json: bool = JSON_OPT) -> None:
    """Check every host's part of a pool (exit 1 if anything cannot be trusted)."""
    with _open(pool, host_id, coherence, group, repair=repair) as p:
        try:
            rep = p.fsck(repair=repair)
        except OSError as e:
            _fail(pool_error(p.path, e))
    if as_json:
        print(json.dumps({**rep.as_dict(), "clean": rep.clean}))
    else:
        t = Table(title="fsck: " + ("clean" if rep.clean else "PROBLEMS FOUND"),
                  show_header=False)
        for k, v in rep.as_dict().items():
            t.add_row(k.replace("_", " "), str(v))
        Console().print(t)
    if not rep.clean:
        raise typer.Exit(1)


# ---- host slots ------------------------------------------------------------------------------

@pool_app.command("hosts")
def hosts_cmd(pool: Optional[str] = POOL_ARG, host_id: Optional[str] = HOST_OPT,
              coherence: Optional[str] = COHERENCE_OPT, group: Optional[str] = GROUP_OPT,
              as_json: bool = JSON_OPT) -> None:
    """Every host slot: name, last process, heartbeat age, alive or dead (or exited: its
    process on this machine is gone though its heartbeat is young), the extents, bytes
    and objects it holds (a dead host is freed with `cxlkit pool release`). When no slot is
    free for this host, a pool file is read without attaching."""
    path = P.resolve(pool)
    try:
        gid = shared_gid(path, group)
        with P.Pool(path, host_id=_host(host_id), coherence=coherence, group=gid) as p:
            rows, me, st = p.hosts(), p.host_id, p.stat()
            rows = _exited(path, rows, me)
        title = (f"hosts of {st.path}: {st.extents_free} of {st.nextents} extents of "
                 f"{st.extent_bytes >> 10} KiB free ({_mib(st.extents_free * st.extent_bytes)})")
    except P.PoolError as e:
        if e.errno != errno.EBUSY or not os.path.isfile(path):
            _fail(pool_error(path, e))
        try:
            rows, me = _hosts_from_file(path), -1
        except (OSError, ValueError, struct_error) as e2:
            _fail(pool_error(path, e2))
        title = f"hosts of {path} (read without attaching: no slot is free for this host)"
    except (OSError, ValueError, TypeError) as e:
        _fail(pool_error(path, e))
    if as_json:
        print(json.dumps([h.as_dict() for h in rows]))
        return
    t = T.table()
    T.num(t, "slot")
    T.text(t, "name", max_width=24)
    t.add_column("state", no_wrap=True)
    for col in ("pid", "beat", "ext", "held", "used", "objs"):
        T.num(t, col)
    for h in rows:
        t.add_row(f"{h.slot}{'*' if h.slot == me else ''}", h.name or "-", h.state,
                  str(h.pid or "-"), _age(h.heartbeat_age_s), str(h.extents),
                  T.size(h.held_bytes), T.size(h.used_bytes), str(h.objects))
    con = Console()
    con.print(title, highlight=False)  # a line of its own: a title would wrap to the table
    con.print(t)
    Console().print("(* this host; beat: seconds since its last heartbeat; ext: extents it "
                    "holds; objs: its live objects)")


@pool_app.command("release")
def release_cmd(pool: str = typer.Argument(..., help="pool name or path"),
                host: str = typer.Argument(..., help="the dead host: its slot or its name"),
                drop: bool = typer.Option(False, "--drop", help="drop its published objects "
                                          "instead of adopting them"),
                host_id: Optional[str] = HOST_OPT, coherence: Optional[str] = COHERENCE_OPT,
                group: Optional[str] = GROUP_OPT, as_json: bool = JSON_OPT) -> None:
    """Free a dead host's slot: its published objects stay readable (adopted by this host)
    or are dropped with --drop; refused for a live host."""
    target = int(host) if host.isdigit() else host
    with _open(pool, host_id, coherence, group) as p:
        try:
            p.release(target, drop=drop)
        except (KeyError, OSError, ValueError) as e:
            _fail(pool_error(p.path, e))
        me = p.host_id
    if as_json:
        print(json.dumps({"released": target, "dropped": drop, "adopted_by": None if drop
                          else me}))
    else:
        Console().print(f"released host {target}: its objects "
                        + ("dropped" if drop else f"adopted by host {me}"))


@pool_app.command("upgrade")
def upgrade_cmd(pool: str = typer.Argument(..., help="pool name or path (a version 1 pool)"),
                group: bool = typer.Option(False, "--group", help="accept a pool shared with "
                                           "a group (another owner, group-writable); a "
                                           "group-shared pool of this user or of one of "
                                           "its groups is accepted without it"),
                as_json: bool = JSON_OPT) -> None:
    """Upgrade a version 1 pool (fixed per-host partitions) to version 2 in place: every
    object stays where it is and readable by name; refused while a v1 host is alive; safe
    to interrupt (a crash leaves version 1, run it again, or version 2)."""
    from ..pool.upgrade import upgrade
    try:
        shared = group or shared_gid(P.resolve(pool), None) is not None
        r = upgrade(pool, group=shared)
    except (OSError, ValueError) as e:
        fail(pool_error(P.resolve(pool), e))
    if as_json:
        print(json.dumps(dataclasses.asdict(r)))
    elif r.from_version == r.version:
        Console().print(f"{r.path}: already version {r.version}, nothing to do")
    else:
        Console().print(f"{r.path}: upgraded from version {r.from_version} to {r.version}: "
                        f"{r.objects} objects kept in place, {r.nextents} extents of "
                        f"{_mib(r.extent_bytes)}")


# ---- demo ----------------------------------------------------------------------------------

def _demo_reader(path: str, name: str, results, done) -> None:
    """The second process: another host id over the same pool file. Its reply is its own
    object (a host writes only its own), so it removes the reply once the first has read it."""
    import numpy as np

    try:
        with P.Pool(path, host_id="cxlkit-demo-reader") as pool:
            if name + ".reply" in pool:
                pool.destroy(name + ".reply")
            t0 = time.perf_counter()
            with pool.open(name) as obj:
                obj.verify()
                a = obj.numpy(np.float32)
                total = float(a.sum(dtype=np.float64))
                del a
            open_ms = (time.perf_counter() - t0) * 1e3
            pool.create(name + ".reply", data=np.float64([total]).tobytes()).close()
            results.put(("ok", pool.host_id, total, open_ms))
            done.wait(120)
            pool.destroy(name + ".reply")
    except BaseException as e:  # report rather than die silently
        results.put(("error", repr(e), 0.0, 0.0))


def run_demo(console: Console) -> None:
    """Create the embedded pool, publish an array from this process, read and verify it from a
    second process with another host id, read its reply, clean up and fsck. The pool stays
    (and the demo says so) unless the demo made it and was interrupted."""
    path = P.resolve(None)
    made = not os.path.exists(path)
    try:
        _pool_demo(console, path)
    except BaseException:
        if made and os.path.exists(path):
            P.remove(path)
        raise
    console.print(f"the pool {path} ({'made' if made else 'used'} by this demo) stays for the "
                  f"next run; remove it with `cxlkit pool rm {path}`")


def _pool_demo(console: Console, path: str) -> None:
    import numpy as np

    with P.Pool(path, size=64 << 20, create=True) as pool:
        name = f"demo/matrix.h{pool.host_id}"  # per host: demos of other hosts may run too
        if name in pool:
            pool.destroy(name)  # left by a run killed before it could clean up
        try:
            _share(console, pool, path, name)
        except BaseException:
            if name in pool:
                pool.destroy(name)
            raise


def _share(console: Console, pool: P.Pool, path: str, name: str) -> None:
    """Publish `name` here, read it in a second process (another host), show the result."""
    import numpy as np

    a = np.arange(256 * 1024, dtype=np.float32)  # [262144] f32 = 1 MiB
    obj = pool.create(name, a.nbytes)
    obj.numpy(np.float32)[:] = a
    obj.publish(checksum=True)
    ctx = mp.get_context("spawn")
    results, done = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_demo_reader, args=(path, name, results, done))
    child.start()
    status, host, total, open_ms = results.get(timeout=120)
    obj.close()
    if status != "ok":
        child.join(60)
        console.print(f"[red]pool demo: the reader failed: {host}[/red]")
        return
    with pool.open(name + ".reply") as r:
        echoed = float(np.frombuffer(r.read(), np.float64)[0])
    done.set()
    child.join(60)
    st = pool.stat()
    t = Table(title=f"pool demo: {path} ({st.kind}, {_mib(st.size)}, "
                    f"coherence {st.coherence})")
    for col in ("step", "host", "result"):
        t.add_column(col)
    t.add_row(f"publish {name} (1 MiB f32, crc32c)", str(pool.host_id), "published")
    t.add_row("open + verify + sum in a second process", str(host),
              f"sum {total:.0f} (expected {float(a.sum(dtype=np.float64)):.0f}), "
              f"open {open_ms:.2f} ms")
    t.add_row("reply read back", str(pool.host_id), f"{echoed:.0f}")
    pool.destroy(name)
    rep = pool.fsck()
    t.add_row("fsck", str(pool.host_id),
              ("clean" if rep.clean else "PROBLEMS") + f", {rep.objects_live} objects live, "
              f"{rep.leases_expired} expired leases")
    console.print(t)


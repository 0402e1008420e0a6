"""Run a function as every rank of a cxlkit.msg job, each rank a forked process on its own
pool host; used by tests/msg/test_msg*.py and tests/msg/test_rpc.py. coherence None: Pool's default
(CXLKIT_COHERENCE, which `pytest --coherence-sim` sets to "sim"), else "host"."""
from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from typing import Any, Callable

import cxlkit
from cxlkit import msg


def _rank_main(fn: Callable[..., Any], path: str, coherence: str | None, job: str, rank: int,
               size: int, conn: Any, kwargs: dict[str, Any]) -> None:
    try:
        with cxlkit.Pool(path, host_id=rank, coherence=coherence) as pool:
            comm = msg.Comm(pool, rank=rank, size=size, job=job, join_timeout=20, **kwargs)
            out = fn(comm)
            comm.close()
        conn.send(("ok", out))
    except BaseException as e:  # the parent reports it with the rank's traceback
        conn.send(("error", f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}"))


def coherences() -> list[str]:
    """The modes a cross-host test is parametrized with: host and none, or under
    `pytest --coherence-sim` the simulator alone (the plain suite ran host and none)."""
    return ["sim"] if os.environ.get("CXLKIT_COHERENCE") == "sim" else ["host", "none"]


def make_pool(path: str, nranks: int, coherence: str | None = None, size: str = "64M") -> None:
    with cxlkit.Pool(path, size=size, host_id=0, max_hosts=max(nranks, 2), coherence=coherence):
        pass


def run_ranks(path: str, size: int, fn: Callable[[msg.Comm], Any], *, job: str = "t",
              coherence: str | None = None, timeout: float = 60.0,
              per_rank: Callable[[int], dict[str, Any]] | None = None,
              **kwargs: Any) -> list[Any]:
    """fn(comm) on every rank; returns the values in rank order, raising if a rank failed.
    kwargs go to every rank's Comm, per_rank(rank)'s to that rank's."""
    ctx = mp.get_context("fork")
    procs, conns = [], []
    for r in range(size):
        a, b = ctx.Pipe(duplex=False)
        mine = {**kwargs, **(per_rank(r) if per_rank else {})}
        p = ctx.Process(target=_rank_main, args=(fn, path, coherence, job, r, size, b, mine))
        p.start()
        procs.append(p)
        conns.append(a)
    results, errors = [], []
    for r, (p, c) in enumerate(zip(procs, conns)):
        if c.poll(timeout):
            kind, val = c.recv()
        else:
            kind, val = "error", f"rank {r}: no answer in {timeout} s"
        p.join(5)
        if p.is_alive():
            p.kill()
        (errors if kind == "error" else results).append(val)
    if errors:
        raise AssertionError("\n".join(errors))
    return results

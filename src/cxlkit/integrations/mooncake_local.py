"""Mooncake Store on this machine: a master (with its HTTP metadata server) and, when asked, a
store node lending memory, both on loopback. Level 2 on one machine, to try it out before a
cluster has a master; the tests and benchmarks of the level use it too.

    from cxlkit.integrations.mooncake import open_level2
    from cxlkit.integrations.mooncake_local import local_mooncake

    with local_mooncake(node_bytes=512 << 20) as mc:
        level2 = open_level2(dict(mc.config, segment_bytes=0))

Needs the Mooncake wheel (mooncake-transfer-engine-non-cuda, `make mooncake-venv`).
"""
from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .mooncake import _MIN_BYTES, MooncakeError

# A store node: mounts node_bytes of its memory into the store, says "ready" once connected,
# and lends it until its stdin closes.
_NODE = """
import sys
from cxlkit.integrations.mooncake import open_level2
lv = open_level2({"master": sys.argv[1], "metadata": sys.argv[2], "segment_bytes": int(sys.argv[3]),
                  "timeout_s": 60})
print("ready" if lv.wait_connected(float(sys.argv[4])) else "down", flush=True)
sys.stdin.read()
lv.close()
"""


@dataclass(frozen=True)
class LocalMooncake:
    """What local_mooncake started: `config` is the level-2 config of its master (the keys
    open_level2 takes: master, metadata); `master` its process, which a test may kill."""

    config: dict
    master: subprocess.Popen
    node: subprocess.Popen | None


def master_binary() -> str:
    """The mooncake_master executable: on PATH, else the one the wheel ships."""
    found = shutil.which("mooncake_master")
    if found:
        return found
    try:
        import mooncake
    except ImportError as e:
        raise MooncakeError("mooncake_master: not on PATH and the mooncake package is not "
                            "installed; pip install mooncake-transfer-engine-non-cuda") from e
    return os.path.join(os.path.dirname(mooncake.__file__), "mooncake_master")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_line(proc: subprocess.Popen, what: str, until: float) -> str:
    """The process's first line of output, read before the monotonic deadline `until`."""
    while (left := until - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
        if ready:  # a line, or end of file from a process that ended saying nothing
            line = proc.stdout.readline()
            if line:
                return line.strip()
        if proc.poll() is not None:
            break
    if proc.poll() is not None:
        raise MooncakeError(f"{what}: ended with exit status {proc.returncode} before it "
                            "was ready")
    raise MooncakeError(f"{what}: no answer within the start bound; is this machine very "
                        "loaded?")


def _stop(proc: subprocess.Popen | None, grace_s: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextmanager
def local_mooncake(node_bytes: int = 0, *, start_s: float = 120) -> Iterator[LocalMooncake]:
    """Start a master on free loopback ports and, with node_bytes > 0, a store node lending
    that much memory; both stop when the block ends (the node first, given 60 s to close).
    MooncakeError when either does not come up within start_s seconds."""
    if node_bytes and node_bytes < _MIN_BYTES:
        raise ValueError(f"local_mooncake node_bytes: {node_bytes}; Mooncake needs at least "
                         f"{_MIN_BYTES} (or 0: no store node)")
    http, rpc, metrics = _free_port(), _free_port(), _free_port()
    exe = master_binary()
    try:
        master = subprocess.Popen([exe, "-enable_http_metadata_server=true",
                                   "-http_metadata_server_host=127.0.0.1",
                                   f"-http_metadata_server_port={http}",
                                   "-rpc_address=127.0.0.1", f"-rpc_port={rpc}",
                                   f"-metrics_port={metrics}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as e:
        raise MooncakeError(f"{exe}: cannot start it: {e.strerror}; reinstall "
                            "mooncake-transfer-engine-non-cuda") from e
    cfg = {"master": f"127.0.0.1:{rpc}", "metadata": f"http://127.0.0.1:{http}/metadata"}
    node = None
    try:
        if node_bytes > 0:
            node = subprocess.Popen([sys.executable, "-c", _NODE, cfg["master"],
                                     cfg["metadata"], str(node_bytes), str(start_s)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            said = _wait_line(node, f"Mooncake store node of master {cfg['master']}",
                              time.monotonic() + start_s + 30)
            if said != "ready":
                raise MooncakeError(f"Mooncake store node of master {cfg['master']}: could "
                                    f"not connect within {start_s} s (said {said!r})")
        yield LocalMooncake(cfg, master, node)
    finally:
        if node is not None:
            node.stdin.close()
            _stop(node, 60)
        if master.poll() is None:
            master.kill()
        master.wait(10)

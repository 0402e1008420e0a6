"""The pool on real devdax inside the rig's guests: a pool formatted on /dev/dax0.0 (an
NVDIMM namespace), and one devdax pool shared by two guests whose QEMUs map one backing file
(share=on): what one host publishes the other reads, validated, in both directions."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import cxlkit
from cxlkit import pool as P
from cxlkit import topology

pytestmark = pytest.mark.vm
DAX = "/dev/dax0.0"
WAIT_S = 240.0  # host b boots ~10 s after a, and python under TCG is slow to start


def _payload(tag: bytes, nbytes: int) -> bytes:
    return (tag * (nbytes // len(tag) + 1))[:nbytes]


def _until(what: str, fn):
    """Poll fn() until it returns a value; the other host is a different machine, so there is
    no futex or pipe to wait on, only the shared memory itself."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return fn()
        except (KeyError, cxlkit.ObjectNotPublishedError, cxlkit.PoolFormatError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: nothing after {WAIT_S:.0f} s") from None
            time.sleep(0.1)


@pytest.mark.topology("devdax")
def test_pool_on_devdax_takes_the_devices_size_and_alignment_and_keeps_objects():
    dax = topology.discover().dax("dax0.0")
    data = _payload(b"devdax!", 3 << 20)
    with cxlkit.Pool(DAX, create=True, host_id=0) as p:
        st = p.stat()
        assert st.kind == "devdax"
        assert st.size == dax.size_bytes
        assert st.align == dax.align == 2 << 20
        assert p.address % st.align == 0
        with p.create("weights", data=data) as obj:
            assert obj.offset % 64 == 0
    # another process maps the device afresh and reads the published object
    code = ("import cxlkit, sys; p = cxlkit.Pool('/dev/dax0.0', host_id=1); "
            "o = p.open('weights'); o.verify(); sys.stdout.buffer.write(o.read()[:64]); "
            "print(); print(o.nbytes, p.stat().objects)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    first, counts = out.rsplit(b"\n", 2)[:2]
    assert first == data[:64]
    assert counts.split() == [str(len(data)).encode(), b"1"]


def _host() -> str:
    return os.environ["CXLKIT_VM_HOST"]


@pytest.mark.topology("two-hosts")
def test_two_hosts_publish_and_read_each_others_objects_through_the_shared_devdax():
    me = _host()
    ping, pong = _payload(b"ping from a ", 1 << 20), _payload(b"pong from b ", 1 << 20)
    if me == "a":
        with cxlkit.Pool(DAX, create=True, host_id=0, coherence="none") as p:
            assert p.stat().kind == "devdax"
            p.create("ping", data=ping).close()
            reply = _until("host b's pong", lambda: p.open("pong"))
            with reply:
                assert reply.host == 1
                reply.verify()
                assert reply.read() == pong
            assert {o.name: o.host for o in p.list()} == {"ping": 0, "pong": 1}
    else:
        p = _until("host a's pool", lambda: cxlkit.Pool(DAX, host_id=1, coherence="none"))
        with p:
            with _until("host a's ping", lambda: p.open("ping")) as obj:
                assert obj.host == 0
                obj.verify()
                assert obj.read() == ping
            p.create("pong", data=pong).close()
            assert p.stat().objects == 2

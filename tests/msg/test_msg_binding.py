"""The messaging binding's own contracts: a call that fails holds nothing of the caller's."""
from __future__ import annotations

import pytest

import cxlkit
from cxlkit import msg


def test_a_nonblocking_call_on_a_closed_comm_keeps_no_view_of_its_buffer(pool_path):
    with cxlkit.Pool(pool_path, "16M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="closed")
        native = comm._c
        comm.close()
        buf = bytearray(64)
        with pytest.raises(ValueError, match="closed communicator"):
            native.isend(buf, 0, 0, False)
        with pytest.raises(ValueError, match="closed communicator"):
            native.irecv(buf, 0, 0)
        buf.extend(b"x")  # BufferError while a failed call still holds a view of it
        assert len(buf) == 65

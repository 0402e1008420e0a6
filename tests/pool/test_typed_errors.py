"""Every pool and KV call maps its errno through cxlkit/errors.py (list, stat, fsck,
info, destroy, write and the KV batch calls raised bare OSError, so ENOSPC never became
PoolFullError). The native failure is simulated by a handle whose one call fails as the
binding would (an OSError with the errno)."""
import errno

import numpy as np
import pytest

import cxlkit
from cxlkit import ObjectNotPublishedError, PoolCorruptError, PoolFullError, StaleObjectError
from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes

MiB = 1 << 20
LAYOUT = BlockLayout(num_layers=1, num_kv_heads=1, head_dim=8, dtype="float32")


class FailingHandle:
    """The pool's native handle with `call` raising OSError(err) as the binding raises it."""

    def __init__(self, h, call: str, err: int) -> None:
        self._inner, self._call, self._err = h, call, err

    def __getattr__(self, name):
        if name == self._call:
            def fail(*a, **k):
                raise OSError(self._err, "native error", self._inner.label)
            return fail
        return getattr(self._inner, name)


@pytest.mark.parametrize("call,run", [
    ("list", lambda p: p.list()), ("stat", lambda p: p.stat()),
    ("fsck", lambda p: p.fsck()), ("object_stat", lambda p: p.info("x")),
    ("destroy", lambda p: p.destroy("x")),
])
@pytest.mark.parametrize("err,cls", [(errno.ENOSPC, PoolFullError),
                                     (errno.EAGAIN, ObjectNotPublishedError),
                                     (errno.ESTALE, StaleObjectError),
                                     (errno.EBADMSG, PoolCorruptError)])
def test_pool_calls_raise_the_typed_error_of_their_errno(pool_path, call, run, err, cls):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0) as pool:
        real = pool._h
        pool._h = FailingHandle(real, call, err)
        try:
            with pytest.raises(cls) as e:
                run(pool)
            assert e.value.errno == err and e.value.filename == pool_path
        finally:
            pool._h = real


def test_an_errno_without_a_typed_class_stays_the_OSError_subclass(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0) as pool:
        real = pool._h
        pool._h = FailingHandle(real, "list", errno.EACCES)
        try:
            with pytest.raises(OSError) as e:
                pool.list()
            assert e.value.errno == errno.EACCES
        finally:
            pool._h = real


@pytest.mark.parametrize("fn", ["kv_put", "kv_get", "kv_lookup"])
def test_kv_batch_calls_raise_typed_errors(pool_path, monkeypatch, fn):
    from cxlkit import _native

    s = Store(pool_path, LAYOUT, create=True, size=8 * MiB, host_id=0)
    eng = EngineTensors.per_layer(LAYOUT, [np.zeros((2, 2, 16, 1, 8), np.float32)])
    keys = block_hashes(list(range(16)))

    def fail(*a, **k):
        raise OSError(errno.ENOSPC, "native error", pool_path)

    monkeypatch.setattr(_native, fn, fail)
    with pytest.raises(PoolFullError):
        if fn == "kv_put":
            s.put(keys, eng, [0])
        elif fn == "kv_get":
            s.get(keys, eng, [0])
        else:
            s.lookup(keys)
    monkeypatch.undo()
    s.close()


def test_a_write_past_a_full_partition_is_PoolFullError(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0, max_hosts=1) as pool:
        with pytest.raises(PoolFullError):
            pool.create("huge", 64 * MiB)

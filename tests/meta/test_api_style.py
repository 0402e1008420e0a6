"""One API style (docs/architecture.md, "One API style"): one error root with ...Error names,
old names and module paths kept for one release with a DeprecationWarning, sizes as ints or
unit strings, a constructor with size= that creates the same way everywhere, durations in
seconds in Python (the C ABI's milliseconds deprecated here)."""
import importlib
import os
import subprocess
import sys
import warnings

import pytest

import cxlkit
from cxlkit import errors, msg
from cxlkit.kv import BlockLayout, Store

MiB = 1 << 20
LAYOUT = BlockLayout(num_layers=1, num_kv_heads=1, head_dim=16, dtype="float32",
                     block_tokens=16)


def _exceptions():
    for name in cxlkit.__all__:
        obj = getattr(cxlkit, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            yield name, obj


# ---- errors: one root, ...Error names, the builtin each would be ---------------------------
def test_every_exported_exception_derives_from_CxlkitError_and_is_named_Error():
    names = dict(_exceptions())
    assert len(names) > 40
    assert [n for n in names if not n.endswith("Error")] == []
    assert [n for n, c in names.items() if not issubclass(c, cxlkit.CxlkitError)] == []


@pytest.mark.parametrize("cls,builtin", [
    (cxlkit.PoolError, OSError), (cxlkit.ObjectNotPublishedError, OSError),
    (cxlkit.MsgNotFoundError, FileNotFoundError), (cxlkit.RpcTimeoutError, TimeoutError),
    (cxlkit.WeightedInterleaveUnsupportedError, OSError), (cxlkit.WeightMismatchError, ValueError),
    (cxlkit.InsufficientMemoryError, MemoryError), (cxlkit.BudgetExceededError, MemoryError),
    (cxlkit.PlanError, ValueError), (cxlkit.SubgroupError, OSError),
    (cxlkit.RegistryError, ValueError),
])
def test_each_error_is_still_the_builtin_it_was(cls, builtin):
    assert issubclass(cls, builtin) and issubclass(cls, cxlkit.CxlkitError)


@pytest.mark.parametrize("module,old,new", [
    ("cxlkit", "ObjectNotPublished", "ObjectNotPublishedError"),
    ("cxlkit.errors", "ObjectNotPublished", "ObjectNotPublishedError"),
    ("cxlkit", "WeightedInterleaveUnsupported", "WeightedInterleaveUnsupportedError"),
    ("cxlkit.placement", "WeightedInterleaveUnsupported", "WeightedInterleaveUnsupportedError"),
    ("cxlkit", "BudgetExceeded", "BudgetExceededError"),
])
def test_an_old_error_name_warns_and_is_the_same_class(module, old, new):
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: use cxlkit.{new}"):
        cls = getattr(importlib.import_module(module), old)
    assert cls is getattr(cxlkit, new)


def test_the_training_errors_stay_importable_where_they_were():
    from cxlkit import train
    from cxlkit.train import plan

    assert plan.BudgetExceeded is cxlkit.BudgetExceededError and plan.PlanError is cxlkit.PlanError
    assert train.SubgroupError is cxlkit.SubgroupError
    assert train.PathFullError is cxlkit.PathFullError


def test_a_name_no_module_ever_had_is_an_AttributeError():
    with pytest.raises(AttributeError, match="NoSuchThing"):
        cxlkit.NoSuchThing  # noqa: B018


# ---- old module paths ------------------------------------------------------------------------
@pytest.mark.parametrize("old,name,new", [
    ("cxlkit.policy", "bind", "cxlkit.placement.policy"),
    ("cxlkit.policy", "Buffer", "cxlkit.placement.buffer"),
    ("cxlkit.policy", "weights_from", "cxlkit.placement.weights"),
    ("cxlkit.preload", "parse_stripe", "cxlkit.placement.preload"),
    ("cxlkit.preload_registry", "Registry", "cxlkit.placement.preload_registry"),
    ("cxlkit.tiering", "tiering_state", "cxlkit.placement.tiering"),
    ("cxlkit.audit", "audit_pid", "cxlkit.placement.audit"),
    ("cxlkit.plan", "vectordb", "cxlkit.sizing"),
    ("cxlkit.pool_upgrade", "upgrade", "cxlkit.pool.upgrade"),
    ("cxlkit.rpc", "Client", "cxlkit.msg.rpc"),
    ("cxlkit._waitpolicy", "WaitPolicy", "cxlkit.msg.wait"),
])
def test_an_old_module_path_forwards_each_name_with_a_DeprecationWarning(old, name, new):
    mod = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {name} from"):
        obj = getattr(mod, name)
    assert obj is getattr(importlib.import_module(new), name)


def test_paths_that_became_packages_import_without_a_warning():
    code = ("import cxlkit, cxlkit.pool, cxlkit.msg, cxlkit.topology, cxlkit.placement\n"
            "from cxlkit.pool import Pool, PoolObject, resolve, remove, embedded_pools\n"
            "from cxlkit.msg import Comm, Ring, WaitPolicy, ANY_SOURCE\n"
            "from cxlkit.topology import discover, memory_nodes, parse_cpulist, Node\n"
            "from cxlkit.placement import bind, alloc, weights_from\n")
    r = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


# ---- sizes, and a constructor with size= creates --------------------------------------------
def test_kv_store_with_a_size_creates_its_pool_as_Pool_does(pool_path):
    with cxlkit.Pool(pool_path + "-pool", size="64M") as p:
        pool_bytes = p.stat().size
    with Store(pool_path, LAYOUT, size="64M") as s:
        assert s.host_id >= 0
    assert os.path.getsize(pool_path) == os.path.getsize(pool_path + "-pool")
    with cxlkit.Pool(pool_path) as p:
        assert p.stat().size == pool_bytes == 64 * MiB


def test_create_False_with_a_size_refuses_a_missing_pool_everywhere(pool_path):
    with pytest.raises(FileNotFoundError):
        cxlkit.Pool(pool_path, size="8M", create=False)
    with pytest.raises(FileNotFoundError):
        Store(pool_path, LAYOUT, size="8M", create=False)
    assert not os.path.exists(pool_path)


# ---- durations: seconds in Python ------------------------------------------------------------
def test_pool_lease_timeout_is_in_seconds(pool_path):
    with cxlkit.Pool(pool_path, size="8M", host_id=0, lease_timeout=2.5) as p:
        assert p.stat().lease_timeout_s == 2.5
    with pytest.raises(ValueError, match="lease_timeout 0.001: expected"):
        cxlkit.Pool(pool_path, host_id=0, lease_timeout=0.001)


def test_kv_store_lease_timeout_is_in_seconds_and_the_ms_spelling_warns(pool_path):
    with Store(pool_path, LAYOUT, size="16M", lease_timeout=2.5) as s:
        assert s._pool.stat().lease_timeout_s == 2.5
    os.unlink(pool_path)
    with pytest.warns(DeprecationWarning, match="lease_timeout in seconds"):
        s = Store(pool_path, LAYOUT, size="16M", lease_timeout_ms=2500)
    with s:
        assert s._pool.stat().lease_timeout_s == 2.5
    with pytest.raises(ValueError, match="lease_timeout and lease_timeout_ms both given"):
        Store(pool_path, LAYOUT, lease_timeout=2.5, lease_timeout_ms=2500)


def test_pool_lease_timeout_ms_still_works_with_a_DeprecationWarning(pool_path):
    with pytest.warns(DeprecationWarning, match="lease_timeout in seconds"):
        p = cxlkit.Pool(pool_path, size="8M", host_id=0, lease_timeout_ms=2500)
    with p:
        assert p.stat().lease_timeout_s == 2.5
    with pytest.raises(ValueError, match="lease_timeout and lease_timeout_ms both given"):
        cxlkit.Pool(pool_path, host_id=0, lease_timeout=2.5, lease_timeout_ms=2500)


def test_comm_timeouts_are_in_seconds_and_the_ms_forms_are_deprecated(pool_path):
    with cxlkit.Pool(pool_path, size="32M", host_id=0) as pool:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            with msg.Comm(pool, rank=0, size=1, job="secs", timeout=2.5, dead_timeout=2.0,
                          join_timeout=5.0) as c:
                assert c.size == 1
        with pytest.warns(DeprecationWarning, match=r"Comm\(timeout_ms=\) is deprecated"):
            c = msg.Comm(pool, rank=0, size=1, job="millis", timeout_ms=2500)
        c.close()
        with pytest.raises(ValueError, match="timeout and timeout_ms both given"):
            msg.Comm(pool, rank=0, size=1, job="both", timeout=2.5, timeout_ms=2500)
        with pytest.raises(ValueError, match="join_timeout 0: expected seconds"):
            msg.Comm(pool, rank=0, size=1, job="zero", join_timeout=0)


def test_the_errors_module_names_its_deprecated_names():
    assert set(errors.DEPRECATED_NAMES) == {"ObjectNotPublished", "WeightedInterleaveUnsupported",
                                            "BudgetExceeded"}


def test_object_and_message_sizes_take_unit_strings(pool_path):
    with cxlkit.Pool(pool_path, size="32M", host_id=0) as pool:
        with pool.create("sized", "4K") as o:
            assert o.nbytes == 4096
        with pytest.raises(ValueError, match="nbytes '4Q'"):
            pool.create("bad", "4Q")
        with msg.Comm(pool, rank=0, size=1, job="sizes") as c:
            with c.alloc_mem("64K") as m:
                assert m.nbytes == 64 << 10
            with c.window("4K") as w:
                assert w.size_of(0) == 4096

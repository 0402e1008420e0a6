"""Placement: policies, allocation, residency, moving pages, validation and error paths."""
from __future__ import annotations

import errno
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cxlkit
from cxlkit import _native
from cxlkit import placement as P
from cxlkit.testing import inject_fault, syscall_count

from conftest import PYTHON, make_sysfs

PS = _native.page_size()


def every_policy(nodes: list[int]) -> list[P.Policy]:
    return [P.default(), P.bind(nodes[0]), P.bind(nodes), P.preferred(nodes[-1]),
            P.interleave(nodes), P.weighted(nodes), P.weighted({n: 1 for n in nodes}),
            P.stripe(nodes), P.stripe(nodes, [3] + [1] * (len(nodes) - 1), chunk=64 * PS)]


@pytest.mark.parametrize("i", range(9))
def test_every_policy_puts_every_page_where_intended(i, memory_nodes):
    pol = every_policy(memory_nodes)[i]
    with cxlkit.alloc(5 * (1 << 20) + 123, pol) as buf:
        audit = buf.audit()
        assert audit.ok, audit.problems
        assert audit.actual.not_present == 0
        assert audit.actual.total == (5 * (1 << 20) + 123 + PS - 1) // PS
        if len(memory_nodes) == 1:
            assert audit.actual.pages == {memory_nodes[0]: audit.actual.total}


@settings(max_examples=25, deadline=None)
@given(nbytes=st.integers(1, 3 << 20))
def test_alloc_any_size_is_page_aligned_and_fully_resident(nbytes):
    with cxlkit.alloc(nbytes, P.bind(0)) as buf:
        assert buf.address % PS == 0
        assert len(buf) == buf.nbytes == nbytes
        assert buf.residency().total == (nbytes + PS - 1) // PS
        assert buf.residency().not_present == 0


def test_numpy_and_torch_views_share_the_buffer():
    torch = pytest.importorskip("torch")
    with cxlkit.alloc(1 << 16, P.bind(0)) as buf:
        a = buf.numpy("float32", (128, 128))
        from cxlkit.integrations.views import tensor

        t = tensor(buf, torch.float32)
        a[1, 2] = 42.0
        assert t[130].item() == 42.0
        t[5] = 7.0
        assert memoryview(buf).cast("f")[5] == 7.0
        assert a.ctypes.data == buf.address == t.data_ptr()
        del a, t


def test_close_with_live_view_raises_BufferError_and_keeps_memory():
    buf = cxlkit.alloc(4096, P.bind(0))
    m = memoryview(buf)
    m[0] = 9
    with pytest.raises(BufferError, match="views"):
        buf.close()
    assert m[0] == 9
    m.release()
    buf.close()
    buf.close()  # twice is fine
    assert buf.closed
    with pytest.raises(ValueError, match="closed"):
        buf.residency()
    with pytest.raises(BufferError, match="closed"):
        memoryview(buf)


def test_unpopulated_buffer_reports_pages_not_present_until_touched():
    with cxlkit.alloc(64 * PS, P.bind(0), populate=False) as buf:
        r = buf.residency()
        assert r.not_present == 64 and r.pages == {}
        assert not buf.audit().ok
        assert (buf.node_of_pages() == -errno.ENOENT).all()
        buf.populate()
        assert buf.residency().pages == {0: 64}
        assert (buf.node_of_pages() == 0).all()


def test_place_moves_existing_numpy_pages(memory_nodes):
    arr = np.ones(1 << 20, dtype=np.float32)  # 4 MiB, already faulted in
    target = memory_nodes[-1]
    P.place(arr, P.bind(target), migrate=True, strict=True)
    r = P.residency(arr)
    assert r.pages.get(target, 0) >= (arr.nbytes // PS)
    assert r.not_present == 0
    assert float(arr.sum()) == float(1 << 20)  # data intact


def test_buffer_place_changes_policy_and_audits(memory_nodes):
    with cxlkit.alloc(1 << 20, P.interleave(memory_nodes)) as buf:
        buf.place(P.bind(memory_nodes[-1]))
        assert buf.policy == P.bind(memory_nodes[-1])
        assert buf.audit().ok
        assert P.residency(buf).pages == {memory_nodes[-1]: (1 << 20) // PS}


def test_alloc_bad_sizes_raise_typed_errors_naming_nbytes():
    for bad, exc in [(0, ValueError), (-5, ValueError), (1 << 60, ValueError),
                     (1.5, TypeError), (True, TypeError), ("4O96", ValueError)]:
        with pytest.raises(exc, match="nbytes"):
            cxlkit.alloc(bad, P.bind(0))


def test_unknown_node_raises_ValueError_naming_the_node():
    with pytest.raises(ValueError, match="node 1000 has no memory"):
        cxlkit.alloc(4096, P.bind(1000))
    with pytest.raises(ValueError, match="node 1000"):
        P.place(bytearray(4096), P.bind(1000))


@pytest.mark.parametrize("make, match", [
    (lambda: P.bind([]), "at least one node"),
    (lambda: P.bind([0, 0]), "repeats a node"),
    (lambda: P.bind(-1), "node -1"),
    (lambda: P.bind(5000), "node 5000"),
    (lambda: P.interleave(range(65)), "at most 64"),
    (lambda: P.stripe([0], [0]), "weight 0"),
    (lambda: P.stripe([0], [256]), "weight 256"),
    (lambda: P.stripe([0, 1], [1]), "do not match"),
    (lambda: P.stripe([0], chunk=1000), "chunk 1000"),
    (lambda: P.Policy("spread", (0,)), "mode 'spread'"),
    (lambda: P.Policy("default", (0,)), "no nodes"),
])
def test_malformed_policies_raise_ValueError_naming_the_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_node_must_be_int():
    with pytest.raises(TypeError, match="expected an int"):
        P.bind(["0"])


@pytest.mark.parametrize("spec", ["", "0", "a:1", "0:x", "0:3,0:1", "0:1,,1:2"])
def test_malformed_weights_raise_ValueError_naming_the_spec(spec):
    with pytest.raises(ValueError, match="weights"):
        P.parse_weights(spec)


@pytest.mark.parametrize("spec", ["bind", "bind:", "spread:0", "preferred:0,1", "bind:x",
                                  "stripe:0@huge", "interleave:3-1"])
def test_malformed_policy_specs_raise_ValueError(spec):
    with pytest.raises(ValueError):
        P.parse(spec)


@settings(max_examples=60)
@given(st.sampled_from(["bind", "interleave", "weighted", "stripe", "preferred"]),
       st.lists(st.integers(0, 63), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(1, 9), min_size=4, max_size=4), st.integers(1, 8))
def test_parse_round_trips_str(mode, nodes, weights, chunk_pages):
    if mode == "preferred":
        pol = P.preferred(nodes[0])
    elif mode == "stripe":
        pol = P.stripe(nodes, weights[:len(nodes)], chunk=chunk_pages * PS)
    elif mode == "weighted":
        pol = P.weighted(dict(zip(nodes, weights)))
    else:
        pol = getattr(P, mode)(nodes)
    assert P.parse(str(pol)) == pol


@settings(max_examples=200)
@given(st.lists(st.integers(0, 63), min_size=1, max_size=5, unique=True),
       st.lists(st.integers(1, 8), min_size=5, max_size=5),
       st.integers(0, 5000), st.sampled_from(["interleave", "weighted", "stripe", "bind"]))
def test_expected_pages_bounds_contain_the_total(nodes, weights, npages, mode):
    w = weights[:len(nodes)]
    pol = {"interleave": P.interleave(nodes), "weighted": P.weighted(nodes),
           "stripe": P.stripe(nodes, w, chunk=4 * PS), "bind": P.bind(nodes)}[mode]
    exp = pol.expected_pages(npages, dict(zip(nodes, w)))
    if npages == 0:
        assert exp == {}
        return
    assert set(exp) == set(nodes)
    assert sum(lo for lo, _ in exp.values()) <= npages <= sum(hi for _, hi in exp.values())
    if mode == "stripe":
        assert all(lo == hi for lo, hi in exp.values())
        # exact: equals counting chunk by chunk with the native rule
        counts = {n: 0 for n in nodes}
        for page in range(npages):
            counts[_native.intended_node(pol._native(), page)] += 1
        assert {n: lo for n, (lo, _) in exp.items()} == counts


def test_weighted_ratio_differing_from_kernel_raises_WeightMismatchError(tmp_path):
    root = make_sysfs(tmp_path, weights={0: 1, 1: 1})
    with pytest.raises(P.WeightMismatchError, match=r"0:3,1:1.*system-wide weights 0:1,1:1"):
        P.validate(P.weighted({0: 3, 1: 1}), sysfs_root=root)
    assert P.validate(P.weighted({0: 5, 1: 5}), sysfs_root=root) == {0: 1, 1: 1}
    assert P.validate(P.weighted([0, 1]), sysfs_root=root) == {0: 1, 1: 1}


def test_weighted_without_kernel_support_says_so_and_suggests_stripe(tmp_path):
    root = make_sysfs(tmp_path, weights=None)
    with pytest.raises(P.WeightedInterleaveUnsupportedError, match=r"6\.9.*stripe\(\[0, 1\], \[3, 1\]\)") as e:
        P.validate(P.weighted({0: 3, 1: 1}), sysfs_root=root)
    assert e.value.errno == errno.EOPNOTSUPP


def test_validate_rejects_non_policy():
    with pytest.raises(TypeError, match="Policy"):
        P.validate("bind:0")


def test_write_kernel_weights_writes_sysfs_files(tmp_path):
    root = make_sysfs(tmp_path, weights={0: 1, 1: 1})
    P.write_kernel_weights({0: 3, 1: 1}, sysfs_root=root)
    d = root / "kernel/mm/mempolicy/weighted_interleave"
    assert (d / "node0").read_text().strip() == "3"
    assert (d / "node1").read_text().strip() == "1"
    with pytest.raises(FileNotFoundError, match="node 7"):
        P.write_kernel_weights({7: 1}, sysfs_root=root)
    with pytest.raises(ValueError, match="node 0"):
        P.write_kernel_weights({0: 0}, sysfs_root=root)
    with pytest.raises(FileNotFoundError, match="no weighted interleave"):
        P.write_kernel_weights({0: 1}, sysfs_root=make_sysfs(tmp_path / "old"))


def _in_child(code: str) -> str:
    return subprocess.run([PYTHON, "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.parametrize("spec, mode", [("bind:0", "bind"), ("preferred:0", "preferred"),
                                        ("interleave:0", "interleave"),
                                        ("weighted:0", "weighted"), ("default", "default")])
def test_set_task_policy_is_what_the_kernel_reports(spec, mode):
    out = _in_child("from cxlkit import placement as P\n"
                    f"P.set_task_policy(P.parse({spec!r}))\nprint(P.task_policy())")
    assert out == str((mode, [] if mode == "default" else [0]))


def test_stripe_is_not_a_task_policy():
    with pytest.raises(ValueError, match="per-allocation"):
        P.set_task_policy(P.stripe([0]))


# ---- every native error path, through the fault-injection hook ----

@pytest.mark.parametrize("call, err, exc", [
    ("mmap", "ENOMEM", MemoryError), ("mbind", "EPERM", PermissionError),
    ("madvise", "EAGAIN", BlockingIOError),
])
def test_alloc_error_paths_raise_the_matching_OSError(call, err, exc):
    with inject_fault(call, 1, err):
        with pytest.raises((exc, OSError)) as e:
            cxlkit.alloc(1 << 20, P.bind(0))
    assert e.value.errno == getattr(errno, err)
    assert "alloc of 1048576 bytes" in str(e.value)


def test_residency_error_path_raises_OSError():
    with cxlkit.alloc(1 << 16, P.bind(0)) as buf:
        with inject_fault("move_pages", 1, "EFAULT"):
            with pytest.raises(OSError, match="residency") as e:
                buf.residency()
        assert e.value.errno == errno.EFAULT
        with inject_fault("move_pages", 1, "EPERM"):
            with pytest.raises(PermissionError):
                P.residency(bytearray(b"x" * 8192))


def test_place_and_populate_error_paths_raise_OSError():
    with cxlkit.alloc(1 << 16, P.bind(0), populate=False) as buf:
        with inject_fault("mbind", 1, "EIO"):
            with pytest.raises(OSError, match="policy") as e:
                buf.place(P.bind(0), strict=True)
        assert e.value.errno == errno.EIO
        with inject_fault("madvise", 1, "ENOMEM"):
            with pytest.raises(OSError, match="populate"):
                buf.populate()
    with inject_fault("set_mempolicy", 1, "EINVAL"):
        with pytest.raises(OSError, match="task policy"):
            P.set_task_policy(P.bind(0))
    with inject_fault("get_mempolicy", 1, "ENOSYS"):
        with pytest.raises(OSError, match="task policy"):
            P.task_policy()


def test_close_error_path_keeps_buffer_open():
    buf = cxlkit.alloc(4096, P.bind(0))
    with inject_fault("munmap", 1, "EINVAL"):
        with pytest.raises(OSError):
            buf.close()
    assert not buf.closed
    buf.close()


def test_fault_hook_counts_calls_and_rejects_unknown_names():
    before = syscall_count("mbind")
    cxlkit.alloc(4096, P.bind(0)).close()
    assert syscall_count("mbind") == before + 1
    with pytest.raises(OSError):
        _native.fault_inject("no_such_call", 1, 5)


def test_pin_reports_no_cuda_rather_than_pretending():
    if _native.pin_available():
        pytest.skip("a CUDA device is present; this test checks the no-CUDA path")
    with cxlkit.alloc(4096, P.bind(0)) as buf:
        with pytest.raises(OSError) as e:
            buf.pin()
        assert e.value.errno == errno.ENODEV
        with pytest.raises(OSError):
            buf.unpin()


def test_empty_buffer_is_refused():
    with pytest.raises(ValueError, match="empty"):
        P.place(bytearray(), P.bind(0))
    with pytest.raises(ValueError, match="empty"):
        P.residency(b"")


def _smaps_field(address: int, field: str) -> list[str]:
    """A field of the mapping that starts at `address` (/proc/self/smaps), split."""
    lines = open("/proc/self/smaps").read().splitlines()
    for i, line in enumerate(lines):
        if line.split("-", 1)[0] == f"{address:x}":
            for rest in lines[i + 1:]:
                if rest.startswith(field + ":"):
                    return rest.split()[1:]
    raise AssertionError(f"no mapping at 0x{address:x}")


def _vm_flags(address: int) -> list[str]:
    return _smaps_field(address, "VmFlags")


@pytest.mark.parametrize("make, huge", [
    (lambda n: P.interleave(n), False), (lambda n: P.weighted(n), False),
    (lambda n: P.bind(n[0]), True), (lambda n: P.stripe(n), True),
])
def test_interleaved_allocations_refuse_transparent_huge_pages_by_default(make, huge,
                                                                          memory_nodes):
    # With THP the kernel interleaves 2 MiB folios, one node each: a 4 MiB weighted 3:1
    # range would land 1024/0 pages. "nh" = VM_NOHUGEPAGE (MADV_NOHUGEPAGE).
    with cxlkit.alloc(4 << 20, make(memory_nodes)) as buf:
        assert buf.thp is (None if huge else False)  # None: the system's THP setting decides
        assert ("nh" in _vm_flags(buf.address)) is (not huge)
        assert "hg" not in _vm_flags(buf.address)
        assert buf.audit().ok


def test_thp_true_keeps_huge_pages_and_audits_with_folio_slack(memory_nodes):
    with cxlkit.alloc(4 << 20, P.interleave(memory_nodes), thp=True) as buf:
        assert buf.thp and "nh" not in _vm_flags(buf.address)
        assert buf.audit().ok
    exp = P.interleave([0, 1]).expected_pages(1024, unit_pages=512)
    assert exp == {0: (0, 1024), 1: (0, 1024)}  # two folios may land anywhere
    exp = P.weighted([0, 1]).expected_pages(100 * 512, {0: 3, 1: 1}, unit_pages=512)
    assert exp[0] == (100 * 384 - 1536, 100 * 384 + 1536)


def _thp_mode() -> str:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return "never"
    return text.split("[")[1].split("]")[0]


def _anon_huge_kib(address: int) -> int:
    return int(_smaps_field(address, "AnonHugePages")[0])


def test_thp_true_on_bind_asks_for_huge_pages_on_a_2MiB_boundary():
    with cxlkit.alloc(8 << 20, P.bind(0), thp=True) as buf:
        assert buf.thp is True
        assert buf.address % (2 << 20) == 0
        assert "hg" in _vm_flags(buf.address) and "nh" not in _vm_flags(buf.address)
        if _thp_mode() != "never":  # asked for, so granted while the kernel has them to give
            assert _anon_huge_kib(buf.address) > 0
        assert buf.audit().ok
        buf.numpy("uint8")[-1] = 1  # the whole requested length is mapped


def test_thp_false_refuses_huge_pages_even_for_bind():
    with cxlkit.alloc(4 << 20, P.bind(0), thp=False) as buf:
        assert buf.thp is False and "nh" in _vm_flags(buf.address)


def test_hugepage_error_path_raises_OSError_and_unmaps():
    with inject_fault("madvise", 1, "EINVAL"):
        with pytest.raises(OSError, match="alloc") as e:
            cxlkit.alloc(4 << 20, P.bind(0), thp=True)
    assert e.value.errno == errno.EINVAL
    with inject_fault("mmap", 1, "ENOMEM"):
        with pytest.raises(OSError, match="alloc"):
            cxlkit.alloc(4 << 20, P.bind(0), thp=True)


def test_nohugepage_error_path_raises_OSError():
    with inject_fault("madvise", 1, "EINVAL"):
        with pytest.raises(OSError, match="alloc") as e:
            cxlkit.alloc(1 << 20, P.interleave([0]))
    assert e.value.errno == errno.EINVAL


def _thp_disabled_in_child(code: str) -> str:
    return _in_child("from cxlkit import placement as P\n" + code +
                     "\nimport re\nprint(re.search(r'THP_enabled:\\s*(\\d)', "
                     "open('/proc/self/status').read()).group(1))")


def test_task_interleave_turns_thp_off_for_the_process_and_its_children():
    assert _thp_disabled_in_child("P.set_task_policy(P.interleave([0]))") == "0"
    assert _thp_disabled_in_child("P.set_task_policy(P.interleave([0]), thp=True)") == "1"
    assert _thp_disabled_in_child("P.set_task_policy(P.bind(0))") == "1"


def test_thp_prctl_error_path_raises_OSError():
    with inject_fault("prctl", 1, "EPERM"):
        with pytest.raises(PermissionError, match="prctl THP"):
            P.set_task_policy(P.default())


def test_page_granular_names_interleave_and_weighted_only():
    assert P.interleave([0]).page_granular and P.weighted([0]).page_granular
    assert not any(p.page_granular for p in (P.bind(0), P.preferred(0), P.stripe([0]),
                                             P.default()))

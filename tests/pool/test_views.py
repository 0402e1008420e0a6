"""Zero-copy views of cxlkit memory hold it: a close() while a numpy or torch view lives raises
BufferError and leaves the memory mapped (torch.frombuffer views did not
hold the buffer, close() unmapped it and the next use of the tensor was a SIGSEGV)."""
import gc

import pytest

import cxlkit
from cxlkit import placement as P

torch = pytest.importorskip("torch")
from cxlkit.integrations.views import tensor  # noqa: E402


def test_a_torch_view_of_a_buffer_refuses_its_close_until_dropped():
    buf = cxlkit.alloc(1 << 16, P.bind(0))
    t = tensor(buf, torch.float32)
    t.fill_(3.0)
    with pytest.raises(BufferError, match="views"):
        buf.close()
    assert float(t.sum()) == 3.0 * (1 << 14)  # still mapped
    del t
    gc.collect()
    buf.close()


def test_a_torch_view_of_a_pool_object_refuses_the_object_and_pool_close(tmp_path):
    path = f"/dev/shm/cxlkit-test-views-{id(tmp_path)}"
    try:
        pool = cxlkit.Pool(path, size=8 << 20, host_id=0)
        obj = pool.create("t", 256, publish=True)
        t = tensor(obj, torch.int64, (4, 8))
        t[3, 7] = 99
        with pytest.raises(BufferError, match="views"):
            obj.close()
        with pytest.raises(BufferError, match="views"):
            pool.close()
        assert int(t[3, 7]) == 99
        del t
        gc.collect()
        obj.close()
        pool.close()
    finally:
        cxlkit.pool.remove(path)


def test_tensor_views_are_zero_copy_with_any_dtype_and_check_the_shape():
    with cxlkit.alloc(4096, P.bind(0)) as buf:
        t = tensor(buf, torch.bfloat16, (16, 8))
        assert t.data_ptr() == buf.address and t.shape == (16, 8)
        u = tensor(buf)
        assert u.dtype == torch.uint8 and u.numel() == 4096
        with pytest.raises(ValueError, match="8192 bytes"):
            tensor(buf, torch.float64, (1024,))
        with pytest.raises(TypeError, match="torch.dtype"):
            tensor(buf, "float32")
        del t, u

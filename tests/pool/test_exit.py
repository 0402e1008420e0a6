"""Nothing prints at interpreter exit: module-level cxlkit objects, closed
or not, made nanobind print 'leaked N instances' on stderr."""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import torch
    import cxlkit
    from cxlkit import placement as P
    from cxlkit.kv import BlockLayout, Store
    from cxlkit.integrations.torch import ActivationOffload, TieredAdamW

    pool = cxlkit.Pool({path!r}, size=8 << 20, host_id=0)
    obj = pool.create("x", 64)
    buf = cxlkit.alloc(4096, P.bind(0))
    closed = cxlkit.alloc(4096, P.bind(0))
    closed.close()
    store = Store(pool, BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32"))
    model = torch.nn.Linear(8, 8)
    opt = TieredAdamW(model.parameters())
    model(torch.ones(2, 8)).sum().backward()
    opt.step()
    off = ActivationOffload(1 << 20)
    with off:
        y = model(torch.ones(2, 8)).sum()
    y.backward()
    print("done")
""")


@pytest.mark.slow
@pytest.mark.parametrize("close_pool", [False, True])
def test_module_level_objects_print_nothing_at_exit(tmp_path, close_pool):
    pytest.importorskip("torch")
    path = f"/dev/shm/cxlkit-test-exit-{os.getpid()}-{int(close_pool)}"
    script = SCRIPT.format(path=path) + ("store.close()\nobj.close()\npool.close()\n"
                                         if close_pool else "")
    try:
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    assert r.stderr == ""

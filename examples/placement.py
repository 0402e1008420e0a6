# Run: .venv/bin/python examples/placement.py
# Allocate a buffer under each placement policy this machine supports, fill it through a
# zero-copy numpy view, and prove where its pages landed.
import numpy as np

import cxlkit
from cxlkit import placement as P, topology

nodes = topology.memory_nodes()
policies = [P.bind(nodes[-1]), P.interleave(nodes), P.stripe(nodes, [2] + [1] * (len(nodes) - 1))]
if topology.weighted_interleave_weights() is not None:
    policies.append(P.weighted(nodes))  # the kernel's system-wide weights, as they are

for pol in policies:
    with cxlkit.alloc(16 << 20, pol) as buf:
        view = buf.numpy(np.float32)  # no copy: the pages are the buffer's
        view[:] = np.arange(view.size, dtype=np.float32)
        audit = buf.audit()
        print(f"{str(pol):24s} intended {audit.intended} actual {audit.actual.pages} "
              f"ok={audit.ok}")
        del view
        assert audit.ok, audit.problems

# Pages that already exist can be moved: a plain numpy array to the last node.
arr = np.zeros(4 << 20, dtype=np.uint8)
P.place(arr, P.bind(nodes[-1]), migrate=True)
print("numpy array now on", P.residency(arr).pages)

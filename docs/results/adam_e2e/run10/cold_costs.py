import sys, time, statistics
sys.path.insert(0,'bench')
import adam_gap as G
import torch, numpy as np
from cxlkit.train import adam as A
from cxlkit.integrations import torch as T
sys.argv=['x']
tasks, fb, keep = G.build(2_000_000, 1, 'bf16', False)
opt = keep[0]; p = keep[2]; g=opt.param_groups[0]
big = torch.empty(64_000_000)  # 256 MB
big.fill_(1)
def flush(): big.mul_(1.0)
st=opt.state[p]['step']; na=np.zeros(1, np.float32)
tests={
 'nothing': lambda: None,
 'config': lambda: opt._config(g),
 'kargs': lambda: opt._kernel_args(p),
 'foreach': lambda: torch._foreach_add_([st],1.0),
 'item': lambda: int(st.item()),
 'np_inc': lambda: na.__iadd__(1),
 'grad_attr': lambda: p.grad,
 'detach_np': lambda: T._np(p.grad.detach()),
 'data_ptr': lambda: (p.data_ptr(), p.grad.data_ptr()),
 'isc': lambda: (p.is_contiguous(), p.device.type, p.dtype),
 'team': lambda: opt._auto_team(),
 'nparams': lambda: opt._nparams(),
}
tt=time.perf_counter_ns
res={k:[] for k in tests}
for r in range(25):
    for k,f in tests.items():
        flush(); t0=tt(); f(); res[k].append(tt()-t0)
warm={k:[] for k in tests}
for r in range(25):
    for k,f in tests.items():
        f(); t0=tt(); f(); warm[k].append(tt()-t0)
for k in tests: print(f"{k:10s} cold {statistics.median(res[k])/1e3:8.1f} us   warm {statistics.median(warm[k])/1e3:6.1f} us")

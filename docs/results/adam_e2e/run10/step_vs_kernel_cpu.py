import sys, time, statistics, gc
sys.path.insert(0,'bench')
import adam_gap as G
import torch
from cxlkit.train import adam as A
from cxlkit.integrations import torch as T
n=int(float(sys.argv[1])); reps=int(sys.argv[2]); sys.argv=['x']
tasks, fb, keep = G.build(n, 1, 'bf16', False)
opt = keep[0]; p = keep[2]; g=opt.param_groups[0]
args=[opt._kernel_args(p)[0]]
cfg=opt._config(g); team=opt._auto_team()
unwrapped = T.TieredAdamW.step.__wrapped__ if hasattr(T.TieredAdamW.step,'__wrapped__') else None
print('wrapped?', unwrapped is not None, type(opt).step)
def nograd_group():
    with torch.no_grad(): opt._step_group(g,1.0)
fs={'raw': lambda: A.step_raw(args,cfg,5,team=team), 'group': lambda: opt._step_group(g,1.0),
    'nograd_group': nograd_group, 'step': opt.step}
if unwrapped: fs['unwrapped']=lambda: unwrapped(opt)
names=list(fs)
ts={k:[] for k in fs}
for r in range(reps):
    for k in names[r%len(names):]+names[:r%len(names)]:
        t0=time.thread_time(); fs[k](); ts[k].append(time.thread_time()-t0)
for k,v in ts.items(): print(k, round(statistics.median(v)*1e6,1),'us', round(min(v)*1e6,1), 'vs raw', round(statistics.median(a/b for a,b in zip(v, ts['raw'])),3), 'diff', round(statistics.median(a-b for a,b in zip(v, ts['raw']))*1e6,1))

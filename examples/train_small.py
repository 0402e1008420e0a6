# Run: .venv/bin/python examples/train_small.py
# Train a small bf16 model on the CPU with TieredAdamW: fp32 master params and Adam moments
# in memory placed by a training plan for this machine, bf16 grads upcast in the kernel,
# bf16 params written back in the same pass, saved activations offloaded to a tier.
import time

import torch

from cxlkit.integrations.torch import ActivationOffload, TieredAdamW, param_count
from cxlkit.train.plan import Footprint, plan_training

torch.manual_seed(0)
vocab, dim, seq, batch = 512, 128, 64, 8
model = torch.nn.Sequential(
    torch.nn.Embedding(vocab, dim),
    torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim),
    torch.nn.LayerNorm(dim), torch.nn.Linear(dim, vocab)).to(torch.bfloat16)

# The plan: every class of training state on a tier, with a budget it cannot exceed.
plan = plan_training(Footprint(param_count(model), layers=1, hidden=dim, context=seq,
                               batch=batch, fp32_grads=False))
for row in plan.rows():
    print(f"{row['class']:17} {row['bytes']:>10,} bytes  {row['policy']}")

opt = TieredAdamW(model.parameters(), lr=3e-3, plan=plan, team=1)
offload = ActivationOffload(16 << 20, tier=plan.policy("activations"))

x = torch.randint(0, vocab, (batch, seq))
y = (x + 1) % vocab  # learn to add one
for step in range(1, 11):
    t0 = time.perf_counter()
    with offload:
        logits = model(x).float()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step:2}  loss {loss.item():.4f}  {1e3 * (time.perf_counter() - t0):.1f} ms")

for cls, buf in opt.buffers():
    audit = buf.audit()
    print(f"{cls:17} {buf.policy}  pages {dict(audit.actual.pages)}  ok={audit.ok}")
assert loss.item() < 6.0, "the loss should fall below ln(512) = 6.24"
opt.close()
offload.close()
del opt, buf  # release the placed buffers before the interpreter tears the module down

"""Activation offload: ActivationOffload / offload_activations keep the tensors autograd saves
in a preallocated buffer on a chosen tier (tier_policy names it), bit-identical on the way
back; and the footprint model's activation estimate."""
from __future__ import annotations

import weakref
from typing import Any

import torch

from .. import placement as P
from .. import topology
from ..errors import BudgetExceededError
from ..train.plan import TrainPlan


class _Saved:
    """A saved activation living in the offload buffer: where, and how to rebuild it."""

    __slots__ = ("start", "nbytes", "shape", "stride", "dtype", "device", "__weakref__")

    def __init__(self, start: int, nbytes: int, t: torch.Tensor) -> None:
        self.start, self.nbytes = start, nbytes
        self.shape, self.stride = tuple(t.shape), tuple(t.stride())
        self.dtype, self.device = t.dtype, t.device


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: its elements fill exactly numel slots in some order."""
    want = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1):
        if stride != want:
            return False
        want *= size
    return True


def tier_policy(tier: str | int | P.Policy) -> P.Policy:
    """A tier name (dram, cxl, hbm, pmem: every node of that kind, striped), a node id, or a
    Policy as is."""
    if isinstance(tier, P.Policy):
        return tier
    if isinstance(tier, int) and not isinstance(tier, bool):
        return P.bind(tier)
    if not isinstance(tier, str) or tier not in topology.KINDS:
        raise ValueError(f"tier {tier!r}: expected one of {', '.join(topology.KINDS)}, a node "
                         "id or a cxlkit Policy")
    topo = topology.discover()
    nodes = [n.id for n in topo.nodes if n.has_memory and n.kind == tier]
    if not nodes:
        kinds = sorted({n.kind for n in topo.nodes if n.has_memory})
        raise ValueError(f"tier {tier!r}: this machine has no {tier} memory (it has: "
                         f"{', '.join(kinds)})")
    return P.bind(nodes[0]) if len(nodes) == 1 else P.stripe(nodes)


class ActivationOffload:
    """A preallocated host buffer on a tier for saved activations. Inside `with off:` every
    tensor autograd saves (at least min_bytes, not a parameter or a view of one, dense) is
    copied into the buffer and the original freed; backward copies it back (same shape,
    strides, dtype, device), so gradients are bit-identical to running without it. The buffer
    is reused from its start whenever every activation of earlier passes has been released.
    Past its capacity, packing raises BudgetExceededError."""

    def __init__(self, nbytes: int, *, tier: str | int | P.Policy = "dram",
                 plan: TrainPlan | None = None, min_bytes: int = 1024) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"nbytes {nbytes!r}: expected an int > 0")
        self.plan = plan
        if plan is not None:
            self._buf = plan.alloc("activations", nbytes)
        else:
            self._buf = P.alloc(nbytes, tier_policy(tier))
        self._raw = torch.frombuffer(self._buf, dtype=torch.uint8)
        self.capacity = nbytes
        self.min_bytes = min_bytes
        self._top = 0        # bump pointer (bytes)
        self._live = 0       # saved activations not yet released by autograd
        self.peak_bytes = 0
        self.saved_count = 0
        self.saved_bytes = 0
        self._hooks: Any = None

    @property
    def buffer(self) -> P.Buffer:
        return self._buf

    def __enter__(self) -> ActivationOffload:
        if self._live == 0:
            self._top = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None

    def _released(self) -> None:
        self._live -= 1

    def _keep(self, t: torch.Tensor) -> bool:
        base = t._base if t._base is not None else t
        if isinstance(base, torch.nn.Parameter) or (base.is_leaf and base.requires_grad):
            return True  # weights stay where they are; only activations move
        return t.numel() * t.element_size() < self.min_bytes or not _dense(t) \
            or t.layout != torch.strided

    def _pack(self, t: torch.Tensor) -> Any:
        if self._keep(t):
            return t
        nbytes = t.numel() * t.element_size()
        start = (self._top + 63) & ~63
        if start + nbytes > self.capacity:
            raise BudgetExceededError(f"activation offload buffer full: {nbytes} more bytes at offset "
                                 f"{start} of {self.capacity} ({self._live} activations live); "
                                 "make it larger or release the previous pass's graph")
        h = _Saved(start, nbytes, t)
        self._view(h).copy_(t.detach())
        self._top = start + nbytes
        self._live += 1
        self.saved_count += 1
        self.saved_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self._top)
        weakref.finalize(h, self._released)
        return h

    def _view(self, h: _Saved) -> torch.Tensor:
        # Same strides relative to the region's start: the copy is a straight memory copy.
        flat = self._raw[h.start:h.start + h.nbytes].view(h.dtype)
        return flat.as_strided(h.shape, h.stride)

    def _unpack(self, h: Any) -> torch.Tensor:
        if not isinstance(h, _Saved):
            return h
        out = torch.empty_strided(h.shape, h.stride, dtype=h.dtype, device=h.device)
        out.copy_(self._view(h))
        return out

    def close(self) -> None:
        del self._raw
        if self.plan is not None:
            self.plan.free("activations", self._buf)
        else:
            self._buf.close()


def offload_activations(nbytes: int, *, tier: str | int | P.Policy = "dram",
                        plan: TrainPlan | None = None,
                        min_bytes: int = 1024) -> ActivationOffload:
    """`with offload_activations(256 << 20, tier="cxl"): loss = model(x)`: a fresh
    ActivationOffload (keep one and re-enter it every step to reuse its buffer)."""
    return ActivationOffload(nbytes, tier=tier, plan=plan, min_bytes=min_bytes)


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def activation_bytes_estimate(batch: int, context: int, layers: int, hidden: int,
                              gpus: int = 1) -> int:
    """The footprint model's checkpointed activations, 2*Ng*B*C*L*H bytes."""
    return 2 * gpus * batch * context * layers * hidden


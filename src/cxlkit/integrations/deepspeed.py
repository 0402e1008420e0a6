"""DeepSpeed ZeRO-Offload with cxlkit (no fork of DeepSpeed): CxlkitCPUAdam, a DeepSpeedCPUAdam
that steps with cxlkit's kernel and keeps its moments and variances in placed buffers, and
place_offload(engine), which moves DeepSpeed's CPU buffers (master weights, master grads, and
on the CPU accelerator the compute weights and compute grads) into buffers placed by a
TrainPlan or a Policy; audit_offload(engine) says where every class's pages are.

    opt = CxlkitCPUAdam(model.parameters(), lr=1e-4, plan=plan)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)  # offload: cpu
    place_offload(engine, plan=plan)
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam
from deepspeed.runtime.zero import utils as _zero_utils
from deepspeed.runtime.zero.utils import get_mapping_to_flat_buffer

from .. import placement as P
from ..train import adam as A
from ..train.plan import TrainPlan
from .torch_common import _default_team, _np

_CODES = {torch.float32: A.DTYPES["float32"], torch.bfloat16: A.DTYPES["bfloat16"],
          torch.float16: A.DTYPES["float16"]}
AUTO_TEAM_PARAMS = 1 << 20

# The six classes of CPU-offloaded state (Liaw & Chen) and the plan class each is placed as.
CLASSES = {"master_weights": "fp32_params", "moments": "optimizer_states",
           "variances": "optimizer_states", "master_grads": "fp32_grads",
           "compute_weights": "bf16_params", "compute_grads": "bf16_grads"}


@dataclass
class _Placer:
    """Allocations under a plan's class policies or one policy, recorded per offload class."""

    plan: TrainPlan | None = None
    policy: P.Policy | None = None
    buffers: dict[str, list[P.Buffer]] = field(default_factory=dict)

    def alloc(self, what: str, nbytes: int) -> P.Buffer:
        cls = CLASSES[what]
        nbytes = max(int(nbytes), 1)
        if self.plan is not None:
            pol = self.plan.policy(cls)
            buf = self.plan.alloc(cls, nbytes, thp=None if pol.page_granular else True)
        else:
            pol = self.policy or P.default()
            buf = P.alloc(nbytes, pol, thp=None if pol.page_granular else True)
        self.buffers.setdefault(what, []).append(buf)
        return buf

    def tensor(self, what: str, like: torch.Tensor) -> torch.Tensor:
        buf = self.alloc(what, like.numel() * like.element_size())
        flat = torch.frombuffer(buf, dtype=like.dtype, count=like.numel())
        return flat.view(like.shape)


def _placer(plan: TrainPlan | None, policy: P.Policy | None) -> _Placer:
    if plan is not None and policy is not None:
        raise ValueError("give either plan= or policy=, not both")
    return _Placer(plan, policy)


class CxlkitCPUAdam(DeepSpeedCPUAdam):
    """DeepSpeedCPUAdam's constructor arguments and state layout (state['step'],
    state['exp_avg'], state['exp_avg_sq'], fp32), stepped by cxlkit's kernel: DeepSpeed's
    engine accepts it wherever ZeRO-Offload wants a DeepSpeedCPUAdam, and its cpu_adam op is
    never built. Moments and variances live in buffers placed by `plan` (optimizer_states)
    or `policy`. Params are DeepSpeed's fp32 master partitions; grads fp32, bf16 or fp16.
    team as in TieredAdamW ("auto": torch's OpenMP threads on one memory node from
    AUTO_TEAM_PARAMS params on)."""

    def __init__(self, model_params: Iterable[Any], lr: float = 1e-3,
                 bias_correction: bool = True, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False,
                 adamw_mode: bool = True, fp32_optimizer_states: bool = True, *,
                 plan: TrainPlan | None = None, policy: P.Policy | None = None,
                 team: A.AdamTeam | int | str | None = "auto") -> None:
        if amsgrad:
            raise ValueError("CxlkitCPUAdam has no AMSGrad (nor has DeepSpeedCPUAdam)")
        if not fp32_optimizer_states:
            raise ValueError("fp32_optimizer_states=False: cxlkit keeps fp32 moments")
        A.AdamConfig(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self._placer = _placer(plan, policy)
        # DeepSpeedCPUAdam.__init__ would build and load the cpu_adam op: torch's own
        # Optimizer constructor sets up the groups, the attributes below are DeepSpeed's
        torch.optim.Optimizer.__init__(self, model_params, dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
            bias_correction=bias_correction, amsgrad=False))
        self.opt_id = -1
        self.adam_w_mode = adamw_mode
        self.fp32_optimizer_states = True
        self.cpu_vendor = "any"
        self._team_spec = team
        self._team = team if isinstance(team, A.AdamTeam) else None
        if isinstance(team, int) and not isinstance(team, bool):
            self._team = A.AdamTeam(team)
        elif team not in (None, "auto", "openmp") and self._team is None:
            raise ValueError(f"team {team!r}: expected an AdamTeam, a thread count, 'openmp', "
                             "'auto' or None")

    def buffers(self) -> dict[str, list[P.Buffer]]:
        """Offload class -> the placed buffers this optimizer and place_offload made."""
        return {k: list(v) for k, v in self._placer.buffers.items()}

    def _state_of(self, p: torch.Tensor) -> dict[str, Any]:
        st = self.state[p]
        if "exp_avg" not in st:
            st["step"] = 0
            st["exp_avg"] = self._placer.tensor("moments", p.detach().float()).zero_()
            st["exp_avg_sq"] = self._placer.tensor("variances", p.detach().float()).zero_()
        return st

    def _team_for(self, nparams: int) -> A.AdamTeam | None:
        spec = self._team_spec
        if self._team is None and (spec == "openmp" or
                                   (spec == "auto" and nparams >= AUTO_TEAM_PARAMS)):
            self._team = _default_team(spec)
        return self._team

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            cfg = A.AdamConfig(lr=float(group["lr"]), betas=tuple(group["betas"]),
                               eps=float(group["eps"]),
                               weight_decay=float(group["weight_decay"]),
                               decoupled=bool(self.adam_w_mode),
                               bias_correction=bool(group.get("bias_correction", True)))
            by_step: dict[int, list[tuple]] = {}
            n = 0
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous():
                    raise TypeError(f"param of shape {tuple(p.shape)}: {p.dtype} on {p.device}; "
                                    "CxlkitCPUAdam steps DeepSpeed's fp32 CPU master params")
                g = p.grad
                if g.dtype not in _CODES or g.device.type != "cpu":
                    raise TypeError(f"grad of param of shape {tuple(p.shape)}: {g.dtype} on "
                                    f"{g.device}, expected a CPU fp32/bf16/fp16 grad")
                st = self._state_of(p)
                st["step"] += 1
                by_step.setdefault(int(st["step"]), []).append(
                    (_np(p.data), _np(st["exp_avg"]), _np(st["exp_avg_sq"]),
                     _np(g.detach().contiguous()), _CODES[g.dtype], None, A.DTYPES_NONE))
                n += p.numel()
            team = self._team_for(n)
            for s, args in by_step.items():
                A.step_raw(args, cfg, s, team=team)
        return loss

    def step_subgroup(self, subgroup_id: int, closure: Any = None) -> Any:
        raise NotImplementedError("CxlkitCPUAdam does not run DeepSpeed's SuperOffload "
                                  "(step_subgroup / rollback_subgroup): use DeepSpeedCPUAdam "
                                  "there")

    def rollback_subgroup(self, sub_group_id: int, closure: Any = None) -> Any:
        return self.step_subgroup(sub_group_id, closure)

    def close(self) -> None:
        if self._team is not None:
            self._team.close()
            self._team = None
            self._team_spec = None


# ZeRO refuses optimizer types outside its tested list unless the config says
# zero_allow_untested_optimizer; CxlkitCPUAdam is tested with ZeRO here (tests/engines/test_deepspeed.py)
if CxlkitCPUAdam not in _zero_utils.ZERO_SUPPORTED_OPTIMIZERS:
    _zero_utils.ZERO_SUPPORTED_OPTIMIZERS.append(CxlkitCPUAdam)


def _zero_optimizer(engine: Any) -> tuple[Any, int]:
    """The engine's ZeRO optimizer and its stage (2 for stage 1/2's optimizer, 3)."""
    zo = getattr(engine, "optimizer", None)
    if zo is not None and getattr(zo, "cpu_offload", False) \
            and hasattr(zo, "single_partition_of_fp32_groups"):
        return zo, 2
    if zo is not None and getattr(zo, "offload_optimizer", False) \
            and hasattr(zo, "fp32_partitioned_groups_flat"):
        return zo, 3
    raise ValueError("place_offload needs a DeepSpeed engine with ZeRO (stage 1, 2 or 3) and "
                     "zero_optimization.offload_optimizer.device: cpu")


def _place_compute_weights(zo: Any, i: int, placer: _Placer) -> None:
    """Stage 1/2 on the CPU accelerator: the flat bf16/fp16 buffer the model's params and
    the data-parallel partitions are views of moves, and both are rebuilt over it."""
    flat = zo.bit16_groups_flat[i]
    if flat.device.type != "cpu":
        return  # on the accelerator: not host memory, nothing to place
    fview = placer.tensor("compute_weights", flat)
    fview.copy_(flat)
    flat.data = fview
    zo.parallel_partitioned_bit16_groups[i] = zo.get_data_parallel_partitions(flat, i)
    zo._update_model_bit16_weights(i)


def _place_flat(placer: _Placer, what: str, flat: torch.Tensor) -> bool:
    """Copy a DeepSpeed flat CPU buffer into a placed one and re-point its .data (the tensor
    object DeepSpeed holds stays the same); False when there is nothing in host memory."""
    if flat is None or flat.device.type != "cpu" or flat.numel() == 0:
        return False
    view = placer.tensor(what, flat)
    view.copy_(flat)
    flat.data = view
    return True


def _place_stage3_compute(zo: Any, placer: _Placer) -> None:
    """Stage 3 on the CPU accelerator without offload_param: the flat buffer the parameter
    partitions are views of (lp_param_buffer) and the flat buffer of the reduced grad
    partitions (grad_partitions_flat_buffer). Both move, and the views over them are rebuilt
    as DeepSpeed's own reload_states rebuilds them."""
    lp = getattr(zo, "lp_param_buffer", None)
    if not getattr(zo, "offload_param", False) and _place_flat(placer, "compute_weights", lp):
        zo.fp16_partitioned_groups_flat.clear()
        zo._set_fp16_partitioned_groups_flat()
        for t, off, n in get_mapping_to_flat_buffer(zo._get_parameter_partitions()):
            t.data = lp.narrow(0, off, n)
    g = getattr(zo, "grad_partitions_flat_buffer", None)
    views = getattr(zo, "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition", None)
    if views is not None and _place_flat(placer, "compute_grads", g):
        off = 0
        for p in itertools.chain.from_iterable(zo.fp16_groups):
            views[p.ds_id] = g.narrow(0, off, p.partition_numel())
            off += p.partition_numel()


class _PlacedBuckets:
    """Stage 1/2's compute grads: DeepSpeed's setup_buckets allocates the IPG bucket buffers
    (reduce_bucket_size elements of the reduction dtype, two with overlap_comm) with
    torch.empty at the first gradient of every backward, and _release_ipg_buffers drops them
    after it. Wrapped on the optimizer instance (DeepSpeed's engine and its grad hooks call
    it through the instance), it lets DeepSpeed run as it is and then swaps in placed buffers
    of the same size and dtype, kept across backwards: DeepSpeed already reuses one bucket
    buffer for every bucket of a backward once its grads are reduced and copied out, so a
    buffer that outlives the backward holds nothing it still reads. The torch.empty it
    dropped was never touched (no page faults); the placed ones fault once, at the first
    backward, not at every one. A placed buffer holds min(reduce_bucket_size, the model's
    param count) elements: DeepSpeed reduces a bucket before a param would overflow it and
    reduces each param once per backward, so a bucket never holds more (the default 5e8
    elements would otherwise charge a small model's plan 1 GB of bf16_grads)."""

    def __init__(self, zo: Any, placer: _Placer) -> None:
        self._zo, self._placer = zo, placer
        self._inner = zo.setup_buckets  # the bound method DeepSpeed defined
        self._total = sum(p.numel() for g in zo.bit16_groups for p in g)
        self._mine: dict[tuple[torch.dtype, int, int], torch.Tensor] = {}

    def __call__(self) -> None:
        self._inner()
        for bucket in self._zo.ipg_buckets.values():
            for j, buf in enumerate(bucket.buffer):
                if buf.device.type != "cpu" or any(buf is t for t in self._mine.values()):
                    continue
                key = (buf.dtype, j, buf.numel())
                placed = self._mine.get(key)
                if placed is None:
                    n = min(buf.numel(), self._total)
                    raw = self._placer.alloc("compute_grads", n * buf.element_size())
                    placed = torch.frombuffer(raw, dtype=buf.dtype, count=n)
                    self._mine[key] = placed
                bucket.buffer[j] = placed


def _place_stage2_compute_grads(zo: Any, placer: _Placer) -> None:
    """Install _PlacedBuckets (once) when DeepSpeed keeps contiguous gradients (always with
    cpu_offload); a ZeRO optimizer of another shape raises, naming what is missing."""
    if not getattr(zo, "contiguous_gradients", False):
        return  # grads stay in autograd's own tensors: no bucket buffer to place
    missing = [a for a in ("setup_buckets", "ipg_buckets") if not hasattr(zo, a)]
    if missing:
        raise TypeError(f"{type(zo).__name__} has no {', '.join(missing)}: this DeepSpeed "
                        "version's ZeRO-1/2 keeps its gradient buckets elsewhere; place_offload "
                        "knows DeepSpeed 0.19's layout")
    if isinstance(getattr(zo, "setup_buckets"), _PlacedBuckets):
        return  # place_offload called twice: one wrapper
    zo.setup_buckets = _PlacedBuckets(zo, placer)


_PLACED = "_cxlkit_placement"  # set on the ZeRO optimizer by the first place_offload


@dataclass(frozen=True)
class _Placement:
    """What place_offload was given the first time, and the placer holding its buffers."""

    plan: TrainPlan | None
    policy: P.Policy | None
    placer: _Placer


def _placed_again(done: _Placement, plan: TrainPlan | None,
                  policy: P.Policy | None) -> dict[str, list[P.Buffer]]:
    """A second place_offload: the first placement when nothing new is asked, else ValueError
    (the buffers are in place; moving them again would hold two copies at once)."""
    if (plan is None and policy is None) or (plan is done.plan and policy is done.policy):
        return {k: list(v) for k, v in done.placer.buffers.items()}
    first = ("plan" if done.plan is not None else "policy" if done.policy is not None
             else "the optimizer's own plan")
    raise ValueError(f"place_offload: this engine's offload buffers are placed already (under "
                     f"{first}); build the engine again to place them under another plan or "
                     f"policy")


def place_offload(engine: Any, *, plan: TrainPlan | None = None,
                  policy: P.Policy | None = None) -> dict[str, list[P.Buffer]]:
    """Move the CPU buffers of a ZeRO engine with offload_optimizer: cpu into placed
    buffers: master weights (the fp32 partitions: stage 1/2's single_partition_of_fp32_groups,
    stage 3's fp32_partitioned_groups_flat) and master grads (their .grad, which DeepSpeed
    fills in place) and, for stage 1/2 on the CPU accelerator, the compute weights (the flat
    bf16/fp16 buffer the model's params are views of); for stage 3 (without offload_param)
    the compute weights (the flat buffer of the parameter partitions) and compute grads (the
    flat buffer of the reduced grad partitions). A CxlkitCPUAdam under the engine records
    them beside its own moments and variances (its plan/policy unless plan/policy are given).
    For stage 1/2 the compute grads are the IPG bucket buffers every gradient is copied into
    during backward (DeepSpeed allocates them per backward): placed buffers take their place
    from the next backward on (_PlacedBuckets), allocated at its first gradient. A param larger
    than reduce_bucket_size bypasses the buckets in DeepSpeed, and autograd's own grad of each
    param lives until the hook copies it: both stay in torch's CPU allocator (no hook to
    place them: c10::SetCPUAllocator is C++ and process-wide). Returns offload class ->
    placed buffers (compute grads appear after the first backward). Call after
    deepspeed.initialize. A second call on the same engine with no plan/policy or the same
    ones places nothing more and returns the placement the first made (compute grads
    included once placed); with another plan or policy it raises ValueError: the buffers
    are placed already, and moving them again would need twice their memory at once."""
    zo, stage = _zero_optimizer(engine)
    done = getattr(zo, _PLACED, None)
    if done is not None:
        return _placed_again(done, plan, policy)
    inner = getattr(zo, "optimizer", None)
    own = isinstance(inner, CxlkitCPUAdam)
    placer = inner._placer if own and plan is None and policy is None \
        else _placer(plan, policy)
    masters = zo.single_partition_of_fp32_groups if stage == 2 else zo.fp32_partitioned_groups_flat
    with torch.no_grad():
        for i, master in enumerate(masters):
            if master.numel() == 0:
                continue  # stage 3 keeps empty placeholders for groups it does not own
            view = placer.tensor("master_weights", master.data)
            view.copy_(master.data)
            master.data = view  # the optimizer's param groups hold this same tensor object
            if master.grad is not None:
                gview = placer.tensor("master_grads", master.grad)
                gview.copy_(master.grad)
                master.grad = gview
            if stage == 2:
                _place_compute_weights(zo, i, placer)
        if stage == 2:
            _place_stage2_compute_grads(zo, placer)
        if stage == 3:
            _place_stage3_compute(zo, placer)
    if own and placer is not inner._placer:  # audit_offload finds them all in one place
        for k, v in placer.buffers.items():
            inner._placer.buffers.setdefault(k, []).extend(v)
    setattr(zo, _PLACED, _Placement(plan, policy, placer))
    return {k: list(v) for k, v in placer.buffers.items()}


@dataclass(frozen=True)
class ClassAudit:
    """Where one offload class's pages are. placed: cxlkit buffers, ok when their pages match
    the intended policy; not placed: DeepSpeed's own tensors of that class as they are now
    (ok False: nothing to check them against), nbytes 0 when none exists at the moment
    (DeepSpeed's own stage 1/2 compute grads live only during backward; placed ones from the
    first backward after place_offload on)."""

    name: str
    placed: bool
    nbytes: int
    ok: bool
    pages: dict[int, int]


def _own_tensors(zo: Any, stage: int) -> dict[str, list[torch.Tensor]]:
    """DeepSpeed's CPU tensors per offload class, as the engine holds them now."""
    masters = [m for m in (zo.single_partition_of_fp32_groups if stage == 2
                           else zo.fp32_partitioned_groups_flat) if m.numel()]
    inner = getattr(zo, "optimizer", None)
    states = [inner.state.get(m, {}) for m in masters] if inner is not None else []
    if stage == 2:
        compute_w = list(zo.bit16_groups_flat)
        compute_g = [b for k in getattr(zo, "ipg_buckets", {}).values()
                     for b in (k.buffer or [])]
    else:
        compute_w = [getattr(zo, "lp_param_buffer", None)]
        compute_g = [getattr(zo, "grad_partitions_flat_buffer", None)]
    found = {"master_weights": masters, "master_grads": [m.grad for m in masters],
             "moments": [st.get("exp_avg") for st in states],
             "variances": [st.get("exp_avg_sq") for st in states],
             "compute_weights": compute_w, "compute_grads": compute_g}
    return {k: [t for t in v if isinstance(t, torch.Tensor) and t.device.type == "cpu"
                and t.numel()] for k, v in found.items()}


def _pages_of(t: torch.Tensor) -> dict[int, int]:
    flat = t.detach().reshape(-1).view(torch.uint8)
    return dict(P.residency(flat.numpy()).pages)


def audit_offload(engine: Any) -> dict[str, ClassAudit]:
    """Per offload class: the bytes, whether cxlkit placed them, and the pages per node
    (move_pages): against the intended policy for the classes cxlkit placed, as they are for
    those DeepSpeed allocated itself (any engine: DeepSpeedCPUAdam's too)."""
    zo, stage = _zero_optimizer(engine)
    inner = getattr(zo, "optimizer", None)
    placed = inner._placer.buffers if isinstance(inner, CxlkitCPUAdam) else {}
    own = _own_tensors(zo, stage)
    out: dict[str, ClassAudit] = {}
    for name in CLASSES:
        bufs = placed.get(name, [])
        pages: dict[int, int] = {}
        if bufs:
            ok = True
            for b in bufs:
                a = b.audit()
                ok &= a.ok
                for node, k in a.actual.pages.items():
                    pages[node] = pages.get(node, 0) + k
            out[name] = ClassAudit(name, True, sum(b.nbytes for b in bufs), ok, pages)
            continue
        for t in own[name]:
            for node, k in _pages_of(t).items():
                pages[node] = pages.get(node, 0) + k
        out[name] = ClassAudit(name, False, sum(t.numel() * t.element_size()
                                                 for t in own[name]), False, pages)
    return out


__all__ = ["CxlkitCPUAdam", "place_offload", "audit_offload", "ClassAudit", "CLASSES"]

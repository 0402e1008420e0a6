"""DeepSpeed ZeRO-Offload with cxlkit (no fork of DeepSpeed): CxlkitCPUAdam, a DeepSpeedCPUAdam
that steps with cxlkit's kernel and keeps its moments and variances in placed buffers, and
place_offload(engine), which moves DeepSpeed's CPU buffers (master weights, master grads, and
for ZeRO-1/2 on the CPU accelerator the compute weights) into buffers placed by a TrainPlan or
a Policy; audit_offload(engine) says
where every class's pages are.

    opt = CxlkitCPUAdam(model.parameters(), lr=1e-4, plan=plan)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)  # offload: cpu
    place_offload(engine, plan=plan)
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam
from deepspeed.runtime.zero import utils as _zero_utils

from .. import policy as P
from ..train import adam as A
from ..train.plan import TrainPlan
from .torch import _default_team, _np

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
# zero_allow_untested_optimizer; CxlkitCPUAdam is tested with ZeRO here (tests/test_deepspeed.py)
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


def place_offload(engine: Any, *, plan: TrainPlan | None = None,
                  policy: P.Policy | None = None) -> dict[str, list[P.Buffer]]:
    """Move the CPU buffers of a ZeRO engine with offload_optimizer: cpu into placed
    buffers: master weights (the fp32 partitions: stage 1/2's single_partition_of_fp32_groups,
    stage 3's fp32_partitioned_groups_flat) and master grads (their .grad, which DeepSpeed
    fills in place) and, for stage 1/2 on the CPU accelerator, the compute weights (the flat
    bf16/fp16 buffer the model's params are views of). A CxlkitCPUAdam under the engine records
    them beside its own moments and variances (its plan/policy unless plan/policy are given).
    Compute grads stay DeepSpeed's (per bucket), and so do stage 3's compute weights (its
    parameter partitions). Returns offload class -> placed buffers. Call once, after
    deepspeed.initialize."""
    zo, stage = _zero_optimizer(engine)
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
    if own and placer is not inner._placer:  # audit_offload finds them all in one place
        for k, v in placer.buffers.items():
            inner._placer.buffers.setdefault(k, []).extend(v)
    return {k: list(v) for k, v in placer.buffers.items()}


@dataclass(frozen=True)
class ClassAudit:
    """Where one offload class's pages are: placed (cxlkit buffers, intended vs actual) or
    DeepSpeed's own allocation (not placed)."""

    name: str
    placed: bool
    nbytes: int
    ok: bool
    pages: dict[int, int]


def audit_offload(engine: Any) -> dict[str, ClassAudit]:
    """Per offload class: the bytes, whether cxlkit placed them, and the pages per node
    (move_pages) against the intended policy."""
    zo, _ = _zero_optimizer(engine)
    inner = getattr(zo, "optimizer", None)
    placed = inner._placer.buffers if isinstance(inner, CxlkitCPUAdam) else {}
    out: dict[str, ClassAudit] = {}
    for name in CLASSES:
        bufs = placed.get(name, [])
        if bufs:
            pages: dict[int, int] = {}
            ok = True
            for b in bufs:
                a = b.audit()
                ok &= a.ok
                for node, k in a.actual.pages.items():
                    pages[node] = pages.get(node, 0) + k
            out[name] = ClassAudit(name, True, sum(b.nbytes for b in bufs), ok, pages)
        else:
            out[name] = ClassAudit(name, False, 0, False, {})
    return out


__all__ = ["CxlkitCPUAdam", "place_offload", "audit_offload", "ClassAudit", "CLASSES"]

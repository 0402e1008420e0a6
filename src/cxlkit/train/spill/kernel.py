"""The AdamW kernel's arguments for one subgroup: its pieces (param slices) grouped by step
count, each with its master / exp_avg / exp_avg_sq views, grad and param copy (every update
route takes them from here)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import adam as A


@dataclass(frozen=True)
class StepInputs:
    """What one step updates with. configs: per param group; grads[pid]: (flat array in host
    memory, kernel dtype code) or None (param skipped, as torch does); copies[pid]: (flat
    array the updated params are written to, code) or None; steps[pid]: the param's step
    count (from 1)."""

    configs: Sequence[A.AdamConfig]
    grads: Sequence[Any]
    copies: Sequence[Any]
    steps: Sequence[int]
    grad_scale: float = 1.0
    team: A.AdamTeam | None = None

    def with_copies(self, copies: Sequence[Any]) -> StepInputs:
        return StepInputs(self.configs, self.grads, copies, self.steps, self.grad_scale,
                          self.team)


def kernel_args(sg: Any, ins: tuple, outs: tuple | None, grads: Sequence[Any],
                copies: Sequence[Any], steps: Sequence[int], gf: Any = None,
                with_offs: bool = False) -> list[tuple]:
    """The kernel's tensors of subgroup sg, per step count: (step, tensors, outputs),
    master / exp_avg / exp_avg_sq read from ins (flat fp32 views) and written to outs
    (None: in place); with_offs: and each tensor's 3 byte offsets in the payload. gf: the
    subgroup's fp32 grads (the eager baseline) in place of grads."""
    master, m, v = ins
    n = sg.nparams
    by_step: dict[int, tuple[list[tuple], list[tuple], list[int]]] = {}
    for pc in sg.pieces:
        g = grads[pc.pid]
        if g is None:
            continue
        a, b = pc.at, pc.at + pc.hi - pc.lo
        garr, gcode = (gf[a:b], A.DTYPES["float32"]) if gf is not None \
            else (g[0][pc.lo:pc.hi], g[1])
        c = copies[pc.pid]
        carr, ccode = (c[0][pc.lo:pc.hi], c[1]) if c is not None else (None, -1)
        t, o, offs = by_step.setdefault(int(steps[pc.pid]), ([], [], []))
        t.append((master[a:b], m[a:b], v[a:b], garr, gcode, carr, ccode))
        offs += [4 * a, 4 * (n + a), 4 * (2 * n + a)]
        if outs is not None:
            o.append((outs[0][a:b], outs[1][a:b], outs[2][a:b]))
    return [(s, t, o, offs) if with_offs else (s, t, o)
            for s, (t, o, offs) in by_step.items()]

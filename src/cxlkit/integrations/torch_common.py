"""What the torch modules share: dtype codes, numpy views of tensors, the default thread team
and the start of every step (closure, grad_scale), and the checks of a saved state dict's
param groups. Imports torch; nothing in it imports another cxlkit.integrations module."""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from .. import placement as P
from .. import topology
from ..train import adam as A

log = logging.getLogger("cxlkit")

_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)
_CODES = {torch.float32: A.DTYPES["float32"], torch.bfloat16: A.DTYPES["bfloat16"],
          torch.float16: A.DTYPES["float16"]}


def _np(t: torch.Tensor) -> Any:
    """A numpy view of a contiguous CPU tensor's bits (16-bit kinds as uint16-sized int16)."""
    return t.numpy() if t.dtype == torch.float32 else t.view(torch.int16).numpy()


def _flat_f32(buf: P.Buffer) -> torch.Tensor:
    return torch.frombuffer(buf, dtype=torch.float32)


def _default_team(spec: str) -> A.AdamTeam:
    """'openmp': torch's OpenMP threads. 'auto': those on a machine with one memory node,
    where following memory needs no pinning and they are the threads torch keeps warm; pinned
    teams on every memory node otherwise (or when no OpenMP runtime is loaded)."""
    if spec == "openmp" or len(topology.memory_nodes()) == 1:
        try:
            return A.AdamTeam.openmp()
        except FileNotFoundError:
            if spec == "openmp":
                raise
            log.info("TieredAdamW: no OpenMP runtime loaded, using a pinned team")
    return A.AdamTeam()




def _closure_loss(closure: Any, grad_scale: float) -> Any:
    """The start of every step: the closure's loss (run with grad) or None, then grad_scale
    checked."""
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    if isinstance(grad_scale, bool) or not isinstance(grad_scale, (int, float)) \
            or not math.isfinite(grad_scale):
        raise ValueError(f"grad_scale {grad_scale!r}: expected a finite number")
    return loss


def check_saved_groups(saved: Sequence[dict[str, Any]], groups: Sequence[dict[str, Any]]) -> None:
    """A state dict's param groups match these: as many groups, as many params in each, and
    none of an amsgrad optimizer (torch's amsgrad keeps a fourth state, max_exp_avg_sq, this
    kernel has no use for: dropping it would change the update silently)."""
    if len(saved) != len(groups):
        raise ValueError(f"state dict has {len(saved)} param groups, this optimizer "
                         f"{len(groups)}")
    for i, (g, sg) in enumerate(zip(groups, saved)):
        if sg.get("amsgrad"):
            raise ValueError(f"param group {i}: the state dict is of an amsgrad optimizer; "
                             "TieredAdamW has no amsgrad")
        if len(g["params"]) != len(sg["params"]):
            raise ValueError(f"param group {i}: state dict has {len(sg['params'])} params, "
                             f"this optimizer {len(g['params'])}")


def take_saved_hyperparams(saved: Sequence[dict[str, Any]],
                           groups: Sequence[dict[str, Any]]) -> None:
    """The saved hyperparameters into the groups (torch names decoupled
    decoupled_weight_decay: Adam False, AdamW True)."""
    for g, sg in zip(groups, saved):
        for key, val in sg.items():
            if key != "params":
                g[key] = tuple(val) if key == "betas" else val
        if "decoupled" not in sg and "decoupled_weight_decay" in sg:
            g["decoupled"] = bool(sg["decoupled_weight_decay"])

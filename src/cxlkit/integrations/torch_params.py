"""TieredAdamW's per-param bookkeeping. StepCounts: each param's step count, a slot of its
group's count array. ParamCopies: for the params that are not their own master, where the kernel
writes the updated param (a cached numpy view of a CPU param, or a staged CPU copy of a param
off the CPU that step copies back) and whether the param changed outside the optimizer since
the master last matched it (its storage or version counter)."""
from __future__ import annotations

from typing import Any

import torch

from .torch_common import _np


class ParamCopies:
    def __init__(self) -> None:
        # id(param) -> (alias of the param's storage, its version) when last synced: a
        # staged copy is refilled, and with resync=False the master re-read, when either
        # changed
        self.seen: dict[int, tuple[torch.Tensor, int]] = {}
        self.stage: dict[int, torch.Tensor] = {}  # id(param) -> its staged CPU copy
        self.views: dict[int, tuple[int, Any]] = {}  # id(param) -> (data_ptr, numpy view)
        self.reread = 0  # elements re-read by reread_if_changed, for this step's warning

    def mark(self, p: torch.Tensor) -> None:
        """The master holds p as of now."""
        self.seen[id(p)] = (p.detach(), p._version)

    def _changed(self, p: torch.Tensor) -> bool:
        seen = self.seen.get(id(p))
        return seen is None or seen[0].data_ptr() != p.data_ptr() or seen[1] != p._version

    def reread_if_changed(self, p: torch.Tensor, master: torch.Tensor) -> None:
        """resync=False: the whole master from the param when the param's version counter or
        storage changed since the last step (or since construction)."""
        if not self._changed(p):
            return
        with torch.no_grad():
            master.copy_(p.detach().float())
        self.reread += p.numel()

    def staged(self, p: torch.Tensor) -> torch.Tensor:
        """The CPU copy of a param off the CPU (or not contiguous) that the kernel writes and
        step copies back; refilled from the param when the param changed since (its version
        counter or its storage), so the kernel's re-read sees what the user wrote."""
        staged = self.stage.get(id(p))  # not in the optimizer's state: no checkpoint holds it
        if staged is None or staged.dtype != p.dtype or staged.shape != p.shape:
            staged = self.stage[id(p)] = torch.empty(p.shape, dtype=p.dtype)
            self.seen.pop(id(p), None)
        if self._changed(p):
            staged.copy_(p.detach())
        return staged

    def view(self, p: torch.Tensor) -> Any:
        # numpy views cross into the kernel four times faster than DLPack; cached per param
        # and rebuilt when the param's storage moved (p.data = ...).
        ptr = p.data_ptr()
        hit = self.views.get(id(p))
        if hit is None or hit[0] != ptr:
            hit = (ptr, _np(p.detach()))
            self.views[id(p)] = hit
        return hit[1]


class StepCounts:
    def __init__(self) -> None:
        # id(param) -> (its state["step"], a 0-d view of slot i of its group's count array,
        # that array as numpy, i): step() advances counts with numpy, not a torch op
        self.slots: dict[int, tuple[torch.Tensor, Any, int]] = {}

    def add_group(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """A count array for the group (zeros); per param, its slot (its state["step"])."""
        counts = torch.zeros(len(params))  # every param's step count, one slot each
        counts_np = counts.numpy()
        out = []
        for i, p in enumerate(params):
            out.append(counts[i])
            self.slots[id(p)] = (out[-1], counts_np, i)
        return out

    def load(self, p: torch.Tensor, step: float) -> torch.Tensor:
        """p's count set to step (back into its slot of the group's count array); the
        tensor its state["step"] becomes."""
        c = self.slots.get(id(p))
        if c is None:
            return torch.tensor(step)
        c[0].fill_(step)
        return c[0]

    def advance(self, params: list[torch.Tensor], state: Any) -> list[int]:
        """Each param's step count plus one, returned as ints. A group's counts live in one
        float32 array (state["step"] is a 0-d view of its slot, so in-place writes to it are
        seen) advanced with one numpy op: torch ops (_foreach_add_, then .item() per count)
        cost about 150 us with the caches cold after forward/backward, 2 % of a 10M-param
        bf16 step. A step tensor replaced from outside advances the torch way."""
        arrays: dict[int, tuple[Any, list[int]]] = {}
        where: list[tuple[Any, int] | int] = []
        for p in params:
            st = state[p]["step"]
            c = self.slots.get(id(p))
            if c is not None and c[0] is st:
                arrays.setdefault(id(c[1]), (c[1], []))[1].append(c[2])
                where.append((c[1], c[2]))
            else:
                st.add_(1)
                where.append(int(st.item()))
        values = {}
        for key, (arr, idx) in arrays.items():
            if len(idx) == len(arr):
                arr += 1
            else:
                arr[idx] += 1
            values[key] = arr.tolist()
        return [w if isinstance(w, int) else int(values[id(w[0])][w[1]]) for w in where]

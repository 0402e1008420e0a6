"""SpilledAdamW(params, spill=SubgroupStore(...)): the fp32 master params and Adam moments live in
subgroups on the store's paths instead of host buffers; grads stay where the model left them
(bf16/fp16 upcast in the kernel) and the updated params are written back in the same pass.
state_dict / load_state_dict stream subgroup by subgroup from the paths."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..train.spill import OffloadConfig, SubgroupStore, from_config
from .torch_adamw import TieredAdamW
from .torch_common import (_CODES, _SUPPORTED, _closure_loss, _np, check_saved_groups,
                           take_saved_hyperparams)


def _flat(t: torch.Tensor) -> Any:
    return _np(t).reshape(-1)


class SpilledAdamW(TieredAdamW):
    """TieredAdamW whose state lives on a SubgroupStore. Takes TieredAdamW's arguments except plan,
    policy, place_grads and place_params (the state is on the store's paths). Every param
    group must be given at construction (the store cuts them into subgroups once).
    last_metrics: the store's metrics of the last step."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, *, spill: SubgroupStore, **kwargs: Any) -> None:
        if not isinstance(spill, SubgroupStore):
            raise TypeError(f"spill: expected a cxlkit SubgroupStore, got {type(spill).__name__}")
        for k in ("plan", "policy", "place_grads", "place_params"):
            if kwargs.get(k):
                raise ValueError(f"{k}= does not apply with spill= (the optimizer state lives "
                                 "on the store's paths)")
        self._spill = spill
        self._spill_ready = False
        self.last_metrics: dict[str, Any] | None = None
        super().__init__(params, lr, betas, eps, weight_decay, **kwargs)
        plist = self._flat_params()
        spill.bind([[p.numel() for p in g["params"]] for g in self.param_groups])
        spill.init_params(lambda pid: plist[pid].detach().to("cpu", torch.float32).reshape(-1)
                          .numpy())
        self._spill_ready = True

    def _flat_params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "_spill_ready", False):
            raise ValueError("add_param_group after construction: with spill= every param "
                             "group must be given to the constructor")
        torch.optim.Optimizer.add_param_group(self, param_group)
        for p in self.param_groups[-1]["params"]:
            if p.dtype not in _SUPPORTED:
                raise TypeError(f"param of shape {tuple(p.shape)}: {p.dtype}, expected float32, "
                                "bfloat16 or float16")
            if p.is_sparse:
                raise TypeError("TieredAdamW does not take sparse params")
            self.state[p] = {"step": torch.tensor(0.0)}

    @torch.no_grad()
    def step(self, closure: Any = None, *, grad_scale: float = 1.0) -> Any:
        loss = _closure_loss(closure, grad_scale)
        retry = self._spill.retrying  # the last step raised: finish it, count nothing twice
        grads, copies, steps, back = [], [], [], []
        for p in self._flat_params():
            g = p.grad
            if g is None:
                grads.append(None)
                copies.append(None)
                steps.append(0)
                continue
            if g.is_sparse:
                raise TypeError("TieredAdamW does not take sparse gradients")
            if g.dtype not in _CODES:
                raise TypeError(f"grad of param of shape {tuple(p.shape)}: {g.dtype}")
            if g.device.type != "cpu" or not g.is_contiguous():
                g = g.to("cpu").contiguous()
            st = self.state[p]
            if not retry:
                st["step"] += 1
            if p.device.type == "cpu" and p.is_contiguous():
                copy = _flat(p.detach())
            else:
                staged = torch.empty(p.shape, dtype=p.dtype)
                back.append((p, staged))
                copy = _flat(staged)
            grads.append((_flat(g.detach()), _CODES[g.dtype]))
            copies.append((copy, _CODES[p.dtype]))
            steps.append(int(st["step"].item()))
        cfgs = [self._config(g) for g in self.param_groups]
        self.last_metrics = self._spill.step(cfgs, grads, copies, steps, grad_scale=grad_scale,
                                             team=self._auto_team())
        for p, staged in back:
            p.copy_(staged)
        return loss

    def state_dict(self) -> dict[str, Any]:
        """torch's layout (state per param index: step, exp_avg, exp_avg_sq, and master, the
        fp32 master params), read subgroup by subgroup from the store's paths."""
        sd = torch.optim.Optimizer.state_dict(self)
        plist = self._flat_params()
        got = self._spill.read_state()
        for pid, p in enumerate(plist):
            master, m, v = got[pid]
            ent = sd["state"].setdefault(pid, {"step": self.state[p]["step"].clone()})
            ent["master"] = torch.from_numpy(master).view(p.shape)
            ent["exp_avg"] = torch.from_numpy(m).view(p.shape)
            ent["exp_avg_sq"] = torch.from_numpy(v).view(p.shape)
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Writes the saved moments (and master params; from the params when absent, as for
        a torch.optim.AdamW state dict) into the store's subgroups, and the saved
        hyperparameters into the groups."""
        saved = state_dict["param_groups"]
        check_saved_groups(saved, self.param_groups)
        ids: dict[Any, int] = {}
        plist = self._flat_params()
        base = 0
        for g, sg in zip(self.param_groups, saved):
            ids.update({k: base + j for j, k in enumerate(sg["params"])})
            base += len(g["params"])
        new: dict[int, tuple[Any, Any, Any]] = {}
        for k, v in state_dict["state"].items():
            if k not in ids:
                raise KeyError(f"state dict names param {k!r}, which no group holds")
            pid = ids[k]
            p = plist[pid]
            arrs = []
            for key in ("master", "exp_avg", "exp_avg_sq"):
                src = v.get(key) if key != "master" else v.get("master", p.detach())
                if src is None:
                    raise KeyError(f"param {k}: saved state has no {key}")
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"param {k}: saved {key} has shape {tuple(src.shape)}, "
                                     f"expected {tuple(p.shape)}")
                arrs.append(src.detach().to("cpu", torch.float32).reshape(-1).numpy())
            new[pid] = tuple(arrs)
            self.state[p]["step"] = torch.tensor(float(v["step"]))
        self._spill.write_state(new)
        take_saved_hyperparams(saved, self.param_groups)

    def close(self) -> None:
        """Release the team's threads and the store (commit() it first to keep the state)."""
        super().close()
        self._spill.close()


def optimizer_from_config(params: Iterable[Any], config: dict[str, Any] | OffloadConfig,
                          **kwargs: Any) -> TieredAdamW:
    """TieredAdamW from a DeepSpeed-style config (cxlkit.train.from_config): with spill over
    the offload_optimizer's paths when its device is nvme, without otherwise. The
    optimizer block's lr, betas, eps and weight_decay are the defaults kwargs override."""
    cfg = config if isinstance(config, OffloadConfig) else from_config(config)
    kw = {**cfg.optimizer_kwargs(), **kwargs}
    store = cfg.make_store()
    if store is None:
        return TieredAdamW(params, **kw)
    return SpilledAdamW(params, spill=store, **kw)


TieredAdamW._spilled_class = SpilledAdamW  # the deprecated TieredAdamW(..., spill=store)

__all__ = ["SpilledAdamW", "optimizer_from_config"]

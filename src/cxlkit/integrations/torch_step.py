"""The plain step of TieredAdamW and torch's hooked wrapper of it, and the checks that pick
one: the plain one runs while no global step hook is registered and no profiler records."""
from __future__ import annotations

from typing import Any

import torch
from torch.autograd import profiler as _torch_profiler
from torch.optim import optimizer as _torch_optimizer

from .torch_common import _closure_loss

# torch's registries of global step hooks (dicts registration fills in place) and the
# profiler's state, bound once: each attribute walk costs tens of us with the caches cold
_GLOBAL_PRE_HOOKS = _torch_optimizer._global_optimizer_pre_hooks
_GLOBAL_POST_HOOKS = _torch_optimizer._global_optimizer_post_hooks
_profiler_on = torch._C._autograd._profiler_enabled
_set_grad = torch._C._set_grad_enabled
_grad_on = torch.is_grad_enabled


def _global_step_hooks() -> bool:
    return bool(_GLOBAL_PRE_HOOKS or _GLOBAL_POST_HOOKS)


def _profiling() -> bool:
    """A torch profiler (autograd's or kineto's) is recording: step keeps its label."""
    return _torch_profiler._is_profiler_enabled or _profiler_on()


def _plain_step(opt: Any, closure: Any = None, *, grad_scale: float = 1.0) -> Any:
    loss = _closure_loss(closure, grad_scale)
    was = _grad_on()  # torch.no_grad() as two C calls (the context manager: ~60 us cold)
    _set_grad(False)
    try:
        for group in opt.param_groups:
            opt._step_group(group, grad_scale)
    finally:
        _set_grad(was)
    return loss


# torch's own wrapper around the plain step (hooks, record_function), for when hooks are
# registered or a profiler runs: the same behaviour as any torch optimizer's step then
_HOOKED_STEP = torch.optim.Optimizer.profile_hook_step(_plain_step)

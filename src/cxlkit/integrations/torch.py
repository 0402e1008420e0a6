"""PyTorch integration, the public face: TieredAdamW (torch_adamw), SpilledAdamW and
optimizer_from_config (torch_spill), ActivationOffload / offload_activations (torch_activations).
The torch_* modules import torch; torch_spill builds on torch_adamw, never the other way."""
from ..errors import BudgetExceededError
from ..train.plan import BudgetExceeded  # the old name, for one release
from .torch_activations import (ActivationOffload, activation_bytes_estimate,
                                offload_activations, param_count, tier_policy)
from .torch_adamw import AUTO_TEAM_PARAMS, THP_MOVE_BYTES, TieredAdamW  # noqa: F401 (read only:
# the knobs are read from cxlkit.integrations.torch_adamw, where a test or a benchmark sets them)
from .torch_spill import SpilledAdamW, optimizer_from_config

__all__ = ["TieredAdamW", "SpilledAdamW", "optimizer_from_config", "ActivationOffload",
           "offload_activations", "tier_policy", "param_count", "activation_bytes_estimate",
           "BudgetExceededError", "BudgetExceeded"]

"""Training offload: the CPU Adam kernel (adam) and the placement of training state (plan).
torch lives in cxlkit.integrations.torch; nothing here imports it."""
from .adam import AdamConfig, AdamTeam, AdamTensor, adam_step, simd_level, step_tensors
from .plan import (BudgetExceeded, ClassPlacement, Footprint, PlanError, Tier, TrainPlan,
                   machine_tiers, plan_training)

__all__ = [
    "AdamConfig", "AdamTeam", "AdamTensor", "adam_step", "simd_level", "step_tensors",
    "BudgetExceeded", "ClassPlacement", "Footprint", "PlanError", "Tier", "TrainPlan",
    "machine_tiers", "plan_training",
]

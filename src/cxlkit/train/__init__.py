"""Training offload: the CPU Adam kernel (adam) and the placement of training state (plan).
torch lives in cxlkit.integrations.torch; nothing here imports it."""
from .adam import AdamConfig, AdamTeam, AdamTensor, adam_step, simd_level, step_tensors
from .plan import (BudgetExceeded, ClassPlacement, Footprint, PlanError, Tier, TrainPlan,
                   machine_tiers, plan_training)

# ---- spilled optimizer subgroups (train/spill) ----
from .aio import AioConfig, AioEngine
from .spill import (DirPath, MemoryPath, OffloadConfig, PathFullError, PathIOError,
                    PathVanishedError, PoolPath, SpillConfig, SpillPath, SubgroupCorruptError,
                    SubgroupError, SubgroupStore, from_config)

__all__ = [
    "AdamConfig", "AdamTeam", "AdamTensor", "adam_step", "simd_level", "step_tensors",
    "BudgetExceeded", "ClassPlacement", "Footprint", "PlanError", "Tier", "TrainPlan",
    "machine_tiers", "plan_training",
    "AioConfig", "AioEngine", "DirPath", "MemoryPath", "PathFullError", "PathIOError",
    "PathVanishedError", "PoolPath", "SpillPath", "SubgroupCorruptError", "SubgroupError",
    "SubgroupStore", "SpillConfig", "OffloadConfig", "from_config",
]

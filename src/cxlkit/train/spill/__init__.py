"""Optimizer state spilled over several paths: SubgroupStore (store) cuts fp32 master params
and Adam moments into subgroups, assigns them to paths (assignment: Eq. 1 or the CPU-aware
split), moves them through a host cache (cache, pipeline) and updates them by copy, in place
or with the checksums folded into the kernel (update_*); checkpoint and metrics on the side.
Path kinds: path_dir, path_copy (memory tiers, pool areas), path_mapped; paths parses specs."""
from .config import SpillConfig
from .offload_config import OffloadConfig, from_config
from .paths import (CapacityError, DirPath, MemoryPath, PathFullError, PathIOError,
                    PathVanishedError, PoolPath, SpillPath, SubgroupCorruptError, SubgroupError,
                    parse_path)
from .store import SubgroupStore

__all__ = ["SpillConfig", "SubgroupStore", "OffloadConfig", "from_config", "parse_path",
           "SpillPath", "DirPath", "MemoryPath", "PoolPath", "CapacityError", "PathFullError",
           "PathIOError", "PathVanishedError", "SubgroupCorruptError", "SubgroupError"]

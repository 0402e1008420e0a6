"""from_config: a DeepSpeed-style JSON block (zero_optimization.offload_optimizer, aio,
sub_group_size, optimizer) read into an OffloadConfig that builds a SubgroupStore. nvme_path
may be a list (several paths, each a directory, 'mem[:NODE]' or 'pool:NAME', each with an
optional ':cap=SIZE' suffix); cxlkit's own keys sit in an optional "cxlkit" block, whose
"capacities" is a list beside nvme_path (bytes, "64G" or null per path). Unknown keys are
refused, so a typo never runs silently with defaults."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .. import aio
from . import paths as S
from .config import DEFAULT_SUBGROUP_PARAMS
from .store import SubgroupStore

_OFFLOAD_KEYS = {"device", "nvme_path", "buffer_count", "buffer_size", "pipeline_read",
                 "pipeline_write", "pin_memory", "fast_init", "ratio"}
_AIO_KEYS = {"block_size", "queue_depth", "thread_count", "intra_op_parallelism",
             "single_submit", "overlap_events", "use_gds"}
_CXLKIT_KEYS = {"order", "lock", "upcast", "verify", "bandwidths", "cache_subgroups",
                "reestimate", "namespace", "backend", "direct", "split", "zero_copy",
                "sum_in_kernel", "capacities"}
_DEVICES = ("nvme", "cpu", "none")


def _int(where: str, v: Any, lo: int = 0) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)  # DeepSpeed configs write 1e9
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{where}: {v!r}, expected an int >= {lo}")
    return v


def _bool(where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{where}: {v!r}, expected true or false")
    return v


def _unknown(where: str, d: dict, known: set[str]) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(extra)} (known: "
                         f"{', '.join(sorted(known))})")


@dataclass(frozen=True)
class OffloadConfig:
    device: str = "none"
    paths: tuple[str, ...] = ()
    sub_group_size: int = DEFAULT_SUBGROUP_PARAMS
    buffer_count: int = 4
    pipeline_read: bool = True
    pipeline_write: bool = True
    aio: aio.AioConfig = field(default_factory=aio.AioConfig)
    cxlkit: dict[str, Any] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=dict)

    def make_store(self) -> SubgroupStore | None:
        """The SubgroupStore this config describes (None unless the device is nvme)."""
        if self.device != "nvme":
            return None
        c = dict(self.cxlkit)
        c.pop("backend", None)
        c.pop("direct", None)
        cache = c.pop("cache_subgroups", max(3, self.buffer_count))
        return SubgroupStore(list(self.paths), subgroup_params=self.sub_group_size,
                             cache_subgroups=cache, aio_config=self.aio,
                             pipeline_read=self.pipeline_read,
                             pipeline_write=self.pipeline_write, **c)

    def optimizer_kwargs(self) -> dict[str, Any]:
        """lr, betas, eps, weight_decay of the optimizer block (AdamW / Adam types)."""
        p = dict(self.optimizer.get("params", {}))
        out: dict[str, Any] = {}
        for k in ("lr", "eps", "weight_decay"):
            if k in p:
                out[k] = float(p[k])
        if "betas" in p:
            out["betas"] = tuple(float(b) for b in p["betas"])
        t = str(self.optimizer.get("type", "AdamW")).lower()
        if t not in ("adamw", "adam"):
            raise ValueError(f"optimizer.type {self.optimizer.get('type')!r}: expected AdamW "
                             "or Adam")
        if t == "adam":
            out["decoupled"] = bool(p.get("adam_w_mode", False))
        return out


def from_config(config: dict[str, Any] | str | os.PathLike[str]) -> OffloadConfig:
    """Read a DeepSpeed-style config (a dict, JSON text or a JSON file): offload_optimizer
    and sub_group_size at the top level or under zero_optimization, aio, optimizer, and
    cxlkit's own block {"order", "lock", "upcast", "verify", "bandwidths", "cache_subgroups",
    "reestimate", "namespace", "backend", "direct", "split", "zero_copy", "sum_in_kernel",
    "capacities"}."""
    if isinstance(config, (str, os.PathLike)):
        text = str(config)
        if not text.lstrip().startswith("{"):
            with open(text) as f:
                text = f.read()
        config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"config: expected a JSON object, got {type(config).__name__}")
    zero = config.get("zero_optimization", {})
    off = config.get("offload_optimizer", zero.get("offload_optimizer", {})) or {}
    _unknown("offload_optimizer", off, _OFFLOAD_KEYS)
    device = off.get("device", "none")
    if device not in _DEVICES:
        raise ValueError(f"offload_optimizer.device {device!r}: expected one of "
                         f"{', '.join(_DEVICES)}")
    raw = off.get("nvme_path", [])
    paths = (raw,) if isinstance(raw, str) else tuple(raw)
    if not all(isinstance(p, str) and p for p in paths):
        raise ValueError(f"offload_optimizer.nvme_path {raw!r}: expected a path or a list")
    if device == "nvme" and not paths:
        raise ValueError("offload_optimizer.device nvme needs nvme_path (a path or a list)")
    sgs = config.get("sub_group_size", zero.get("sub_group_size", DEFAULT_SUBGROUP_PARAMS))
    a = config.get("aio", {}) or {}
    _unknown("aio", a, _AIO_KEYS)
    ck = config.get("cxlkit", {}) or {}
    _unknown("cxlkit", ck, _CXLKIT_KEYS)
    caps = ck.get("capacities")
    if caps is not None:
        if not isinstance(caps, list) or len(caps) != len(paths):
            raise ValueError(f"cxlkit.capacities {caps!r}: expected a list beside nvme_path "
                             f"({len(paths)} entries: bytes, '64G' or null)")
        for p, c in zip(paths, caps):
            if c is not None:
                S.split_capacity({"path": p, "capacity": c})  # validates it, naming the path
    aio_cfg = aio.AioConfig(
        block_size=_int("aio.block_size", a.get("block_size", 1 << 20), 4096),
        queue_depth=_int("aio.queue_depth", a.get("queue_depth", 32), 1),
        threads=_int("aio.thread_count", a.get("thread_count", 0)),
        backend=ck.get("backend", "auto"), direct=bool(ck.get("direct", True)))
    return OffloadConfig(
        device=device, paths=paths, sub_group_size=_int("sub_group_size", sgs, 1),
        buffer_count=_int("offload_optimizer.buffer_count", off.get("buffer_count", 4), 1),
        pipeline_read=_bool("offload_optimizer.pipeline_read", off.get("pipeline_read", True)),
        pipeline_write=_bool("offload_optimizer.pipeline_write",
                             off.get("pipeline_write", True)),
        aio=aio_cfg, cxlkit=dict(ck), optimizer=dict(config.get("optimizer", {}) or {}))

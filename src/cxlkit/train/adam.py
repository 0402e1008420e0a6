"""The CPU Adam / AdamW step over numpy-level arrays (no torch needed): fp32 master params and
moments, fp32/bf16/fp16 gradients upcast in the kernel, an optional bf16/fp16/fp32 copy of the
updated params written in the same pass, SIMD level and per-node thread teams (AdamTeam)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _native, topology

# dtype names -> kernel codes; numpy and torch dtypes are recognised by their names.
DTYPES = {"float32": _native.DTYPE_F32, "bfloat16": _native.DTYPE_BF16,
          "float16": _native.DTYPE_F16}
DTYPES_NONE = _native.DTYPE_NONE  # no param copy
SIMD_LEVELS = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3, "avx512bf16": 4}


def dtype_name(x: Any) -> str:
    """'float32', 'bfloat16', 'float16' or another name, from a numpy/torch array or dtype."""
    dt = getattr(x, "dtype", x)
    name = getattr(dt, "name", None) or str(dt)
    return name.removeprefix("torch.")


def _dtype_code(arr: Any, given: str | None, what: str) -> int:
    name = given if given is not None else dtype_name(arr)
    if given is not None and given not in DTYPES:
        raise ValueError(f"{what} dtype {given!r}: expected one of {', '.join(DTYPES)}")
    if name not in DTYPES:
        hint = " (pass its dtype name, e.g. 'bfloat16' for a uint16 view)" \
            if name in ("uint16", "int16") else ""
        raise TypeError(f"{what}: {name} elements, expected float32, bfloat16 or float16{hint}")
    return DTYPES[name]


@dataclass(frozen=True)
class AdamConfig:
    """Hyperparameters of one step (torch.optim.AdamW's meaning). decoupled=False is Adam
    with L2 weight decay; simd None = CXLKIT_SIMD or the best level; nt_state / nt_copy use
    non-temporal stores for the state / the param copy. resync: the param copy is what the
    params' owner sees, so a copy element that is not the master rounded to the copy's dtype
    was written by someone else since the last step and replaces the master (widened) before
    the update; the step functions return how many elements that happened to.
    traffic_only (benchmarks): the step's memory traffic without its arithmetic, the bound a
    step is judged against: every array is read and param, exp_avg, exp_avg_sq and the param
    copy are written back unchanged, bit for bit, through the step's own loop, prefetch and
    threads, in the same order (fp32: 28 bytes per element)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-2
    decoupled: bool = True
    maximize: bool = False
    bias_correction: bool = True
    simd: str | None = None
    nt_state: bool = False
    nt_copy: bool = False
    resync: bool = False
    traffic_only: bool = False

    def __post_init__(self) -> None:
        for name in ("lr", "eps", "weight_decay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ValueError(f"{name} {v!r}: expected a finite number >= 0")
        if len(self.betas) != 2:
            raise ValueError(f"betas {self.betas!r}: expected two numbers")
        for i, b in enumerate(self.betas):
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0.0 <= b < 1.0:
                raise ValueError(f"betas[{i}] {b!r}: expected a number in [0, 1)")
        if self.simd is not None and self.simd not in SIMD_LEVELS:
            raise ValueError(f"simd {self.simd!r}: expected one of {', '.join(SIMD_LEVELS)}")

    def _native(self, step: int, grad_scale: float) -> tuple:
        flags = ((_native.ADAM_DECOUPLED if self.decoupled else 0)
                 | (_native.ADAM_MAXIMIZE if self.maximize else 0)
                 | (_native.ADAM_BIAS_CORRECTION if self.bias_correction else 0)
                 | (_native.ADAM_NT_STATE if self.nt_state else 0)
                 | (_native.ADAM_NT_COPY if self.nt_copy else 0)
                 | (_native.ADAM_RESYNC if self.resync else 0)
                 | (_native.ADAM_TRAFFIC if self.traffic_only else 0))
        return (float(self.lr), float(self.betas[0]), float(self.betas[1]), float(self.eps),
                float(self.weight_decay), float(grad_scale), int(step), flags,
                SIMD_LEVELS[self.simd or "auto"])


@dataclass(frozen=True)
class AdamTensor:
    """One tensor's arrays (equal element counts, C-contiguous, CPU). grad_dtype /
    copy_dtype name the 16-bit kind of a uint16 array; they default to the arrays' dtypes."""

    param: Any
    exp_avg: Any
    exp_avg_sq: Any
    grad: Any
    param_copy: Any = None
    grad_dtype: str | None = None
    copy_dtype: str | None = None

    def _native(self) -> tuple:
        g = _dtype_code(self.grad, self.grad_dtype, "grad")
        if self.param_copy is None:
            if self.copy_dtype is not None:
                raise ValueError("copy_dtype given without a param_copy")
            c = _native.DTYPE_NONE
        else:
            c = _dtype_code(self.param_copy, self.copy_dtype, "param_copy")
        for what in ("param", "exp_avg", "exp_avg_sq"):
            name = dtype_name(getattr(self, what))
            if name != "float32":
                raise TypeError(f"{what}: {name} elements, expected float32")
        return (self.param, self.exp_avg, self.exp_avg_sq, self.grad, g, self.param_copy, c)


def _check_chunk(chunk_bytes: Any) -> None:
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) \
            or chunk_bytes <= 0 or chunk_bytes % 64:
        raise ValueError(f"chunk_bytes {chunk_bytes!r}: expected a positive multiple of 64")


class AdamTeam:
    """Threads that follow memory: one team per NUMA node, pinned to the node's CPUs (a
    CPU-less node borrows its nearest node's), each updating the chunks whose params live on
    its node. threads: one count for every node, or {node: count} (0 = the default: the
    node's CPUs, half of the borrowed ones for a CPU-less node)."""

    def __init__(self, threads: int | Mapping[int, int] | None = None, *,
                 nodes: Sequence[int] | None = None, chunk_bytes: int = 1 << 20,
                 pin: bool = True) -> None:
        if isinstance(threads, Mapping):
            if nodes is not None and list(nodes) != list(threads):
                raise ValueError("give the nodes either in threads={node: count} or in nodes")
            node_list, counts = list(threads), list(threads.values())
        else:
            node_list = list(nodes) if nodes is not None else topology.memory_nodes()
            counts = [threads or 0] * len(node_list)
        for n, c in zip(node_list, counts):
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 1024:
                raise ValueError(f"threads of node {n}: {c!r}, expected an int in 0..1024")
        _check_chunk(chunk_bytes)
        self._team = _native.AdamTeam(node_list, counts, chunk_bytes, pin)
        self.kind = "pinned"

    @classmethod
    def openmp(cls, threads: int = 0, *, runtime: str | None = None,
               chunk_bytes: int = 1 << 20) -> AdamTeam:
        """A team on the OpenMP runtime already loaded in this process (PyTorch's libgomp,
        say): each step is one parallel region of `threads` threads (0 = the calling
        thread's OpenMP default, which torch.set_num_threads sets), run by the threads the
        process's other OpenMP work keeps warm instead of competing with them. runtime: a
        substring of the library's path (None: libgomp, libiomp5, libomp). It never loads
        a runtime: FileNotFoundError when none is loaded. Chunks are not placed by node."""
        if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= 1024:
            raise ValueError(f"threads {threads!r}: expected an int in 0..1024")
        _check_chunk(chunk_bytes)
        self = cls.__new__(cls)
        self._team = _native.AdamTeam.openmp(runtime, threads, chunk_bytes)
        self.kind = "openmp"
        return self

    def info(self) -> list[dict[str, int]]:
        """Per team: node, threads, first CPU it may run on (-1 unpinned), chunks it updated
        in the last step."""
        return [dict(node=n, threads=t, cpu=c, chunks=k) for n, t, c, k in self._team.info()]

    @property
    def threads(self) -> int:
        return sum(t["threads"] for t in self.info())

    def close(self) -> None:
        self._team.close()

    def __enter__(self) -> AdamTeam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def step_tensors(tensors: Sequence[AdamTensor], config: AdamConfig, step: int, *,
         grad_scale: float = 1.0, team: AdamTeam | None = None) -> int:
    """One Adam(W) step over every tensor, in place; `step` counts from 1. On the calling
    thread, or by `team`'s threads. Returns the elements re-read from the copies
    (config.resync), else 0."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step {step!r}: expected an int >= 1")
    if isinstance(grad_scale, bool) or not isinstance(grad_scale, (int, float)) \
            or not math.isfinite(grad_scale):
        raise ValueError(f"grad_scale {grad_scale!r}: expected a finite number")
    args = [t._native() for t in tensors]
    return _native.adam_step(config._native(step, grad_scale), args,
                      team._team if team is not None else None)


def step_raw(tensors: Sequence[tuple], config: AdamConfig, step: int, *,
             grad_scale: float = 1.0, team: AdamTeam | None = None) -> int:
    """step_tensors for callers that keep the kernel's tuples themselves, (param, exp_avg,
    exp_avg_sq, grad, grad code, copy or None, copy code) with codes from DTYPES (-1: no
    copy), to spare the per-tensor checks of AdamTensor on every step. The native layer
    still checks sizes, element widths and contiguity."""
    return _native.adam_step(config._native(step, grad_scale), list(tensors),
                      team._team if team is not None else None)


def adam_step(param: Any, exp_avg: Any, exp_avg_sq: Any, grad: Any, *, step: int,
              lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 1e-2, decoupled: bool = True, maximize: bool = False,
              grad_scale: float = 1.0, param_copy: Any = None, grad_dtype: str | None = None,
              copy_dtype: str | None = None, simd: str | None = None,
              team: AdamTeam | None = None) -> None:
    """One AdamW (decoupled=True) or Adam step on one tensor's arrays, in place."""
    cfg = AdamConfig(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                     decoupled=decoupled, maximize=maximize, simd=simd)
    t = AdamTensor(param, exp_avg, exp_avg_sq, grad, param_copy, grad_dtype, copy_dtype)
    step_tensors([t], cfg, step, grad_scale=grad_scale, team=team)


def simd_level() -> str:
    """The level the kernel uses here: CXLKIT_SIMD if set, else the best the CPU offers.
    OSError(EINVAL) for an unknown CXLKIT_SIMD, OSError(ENOTSUP) for one this CPU lacks."""
    return _native.simd_name(_native.adam_simd())


def bytes_per_element(grad_dtype: str = "float32", copy_dtype: str | None = None) -> int:
    """Bytes one element's update moves: p, m, v read and written, the grad read, the copy
    written."""
    size = {"float32": 4, "bfloat16": 2, "float16": 2}
    for d in (grad_dtype, copy_dtype):
        if d is not None and d not in size:
            raise ValueError(f"dtype {d!r}: expected one of {', '.join(size)}")
    return 24 + size[grad_dtype] + (size[copy_dtype] if copy_dtype else 0)


def step_raw_into(tensors: Sequence[tuple], outs: Sequence[tuple], config: AdamConfig,
                  step: int, *, grad_scale: float = 1.0, team: AdamTeam | None = None) -> int:
    """step_raw reading each tensor's (param, exp_avg, exp_avg_sq) and writing the updated
    values to outs[i] = (param, exp_avg, exp_avg_sq), float32 arrays of the same length; the
    inputs are left as they were (cxk_adam_step_into). An output that is its input array
    itself updates that array in place (the bits of step_raw); one that overlaps any other
    array of its tensor or another output is a ValueError naming it."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step {step!r}: expected an int >= 1")
    return _native.adam_step_into(config._native(step, grad_scale), list(tensors), list(outs),
                                  team._team if team is not None else None)


def step_raw_into_sum(tensors: Sequence[tuple], outs: Sequence[tuple], img_offs: Sequence[int],
                      config: AdamConfig, step: int, *, in_parts: Any = None,
                      out_parts: Any = None, grad_scale: float = 1.0,
                      team: AdamTeam | None = None) -> int:
    """step_raw_into with the payload checksum folded into the kernel's pass
    (cxk_adam_step_into_sum): img_offs holds 3 byte offsets per tensor (its param, exp_avg,
    exp_avg_sq in the image they belong to); in_parts / out_parts (uint64 arrays of 8 from
    sum_parts(), or None) gain the sums of the bytes read / written. sum_parts_finish turns
    the parts of a whole image into cxlkit._native.kv_checksum of it."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step {step!r}: expected an int >= 1")
    return _native.adam_step_into_sum(config._native(step, grad_scale), list(tensors),
                                      list(outs), [int(o) for o in img_offs], in_parts,
                                      out_parts, team._team if team is not None else None)

"""TieredAdamW: an optimizer whose fp32 master params and Adam moments live in host memory
placed by a training plan (or a policy) and are updated by cxlkit's CPU kernel; grads in the
model's dtype are upcast in the kernel and the params written back in the same pass."""
from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .. import placement as P
from ..train import adam as A
from ..train.plan import TrainPlan
from .torch_params import ParamCopies, StepCounts
from .torch_step import (_HOOKED_STEP, _global_step_hooks, _grad_on, _plain_step, _profiling,
                         _set_grad)
from .torch_common import (_CODES, _SUPPORTED, _closure_loss, _default_team, _flat_f32, _np,
                           check_saved_groups, take_saved_hyperparams)

log = logging.getLogger("cxlkit")

AUTO_TEAM_PARAMS = 1 << 20  # team="auto" starts threads from this many params on
THP_MOVE_BYTES = 8 << 20  # huge_pages moves own-master fp32 params from 8 MiB (2M params) on


class TieredAdamW(torch.optim.Optimizer):
    """AdamW (decoupled=True) or Adam with L2 decay (decoupled=False), stepping on the CPU.
    Per param group, one buffer of exp_avg + exp_avg_sq is allocated under `plan`'s policy for
    optimizer_states (budgets enforced: BudgetExceeded) or, without a plan, under `policy`
    (default: the task's). The fp32 master params: an fp32 param on the CPU is its own master
    (no copy, no second buffer; moved into the fp32_params buffer when a plan or policy
    places that class); bf16/fp16 params, params on another device, and master="copy" get a
    master in an fp32_params buffer (a copy costs 4 bytes per param of memory and, for an fp32
    CPU param, 4 more bytes per param of traffic per step: 32 instead of 28). Gradients may be
    fp32, bf16 or fp16 (the model's dtype); the kernel upcasts them and writes the updated
    params back in the model's dtype in the same pass. Weights changed between steps
    (load_state_dict, copy_, torch.nn.init, to() round trips, writes through .data) are what
    the next step starts from: the kernel re-reads every master element whose param is no
    longer the master rounded to the param's dtype (exact for fp32; for bf16/fp16 an upcast,
    and the old master's low bits are gone: logged once). resync=False trusts the version
    counter instead: a param whose counter or storage changed is re-read whole before the step
    (in-place ops, load_state_dict, init, to()), but writes through .data go unseen; it spares
    the read of a 16-bit copy (28 instead of 30 bytes per param, with nt_copy).
    place_grads / place_params also put the
    model's grads (bf16_grads) and CPU params (bf16_params) in placed buffers. team: an
    AdamTeam, a thread count, {node: threads} (pinned threads per node), "openmp" (the
    OpenMP threads torch itself runs on: AdamTeam.openmp()), None (the calling thread only)
    or "auto": once the params reach AUTO_TEAM_PARAMS (the calling thread below that, where
    waking threads costs more than they save), torch's OpenMP threads on a machine with one
    memory node (they are warm after forward/backward and nothing competes with them; as many
    as torch.get_num_threads()), pinned teams on every memory node otherwise.
    step(grad_scale=s) multiplies every gradient by s first (unscaling, clipping).
    nt_copy: write the params back with non-temporal stores (no read-for-ownership of lines
    the step would only overwrite: about 13 % faster on a bandwidth-bound step here);
    "auto" does so from AUTO_TEAM_PARAMS params on, where the params are not in cache
    anyway. The kernel's re-read (resync=True) brings those lines in already, so the copy is
    then stored normally and nt_copy only matters with resync=False. nt_state streams p, m, v too (slower on the machines measured so far).
    huge_pages: ask for transparent huge pages for every buffer whose policy is not
    page-granular interleave (fp32 state streamed as 3-4 arrays per thread misses the TLB
    once per 4 KiB without them), and move every fp32 CPU param that is its own master, of
    THP_MOVE_BYTES or more and its storage whole, into such a buffer at construction (one
    copy; p.data becomes a view of it; torch's allocator gives it 4 KiB pages unless
    THP_MEM_ALLOC_ENABLE=1), as a plan placing fp32_params does. With pinned teams
    (several memory nodes, or team=int), run with OMP_WAIT_POLICY=PASSIVE where torch does
    CPU work on the same cores: libgomp's
    threads otherwise spin for milliseconds after each op and take the CPUs the team is
    pinned to (docs/train.md)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, *, maximize: bool = False, decoupled: bool = True,
                 plan: TrainPlan | None = None, policy: P.Policy | None = None,
                 team: A.AdamTeam | int | Mapping[int, int] | str | None = "auto",
                 place_grads: bool = False, place_params: bool = False,
                 simd: str | None = None, nt_state: bool = False,
                 nt_copy: bool | str = "auto", huge_pages: bool = True,
                 master: str = "auto", resync: bool = True) -> None:
        A.AdamConfig(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, simd=simd)
        if master not in ("auto", "copy"):
            raise ValueError(f"master {master!r}: expected 'auto' or 'copy'")
        if plan is not None and policy is not None:
            raise ValueError("give either plan= or policy=, not both")
        if (place_grads or place_params) and plan is None and policy is None:
            raise ValueError("place_grads / place_params need a plan= or policy= to place by")
        self._plan = plan
        self._policy = policy
        self._simd = simd
        self._nt = (nt_state, nt_copy)
        self._huge_pages = bool(huge_pages)
        self._place_grads = place_grads
        self._place_params = place_params
        self._master_mode = master
        self._resync = bool(resync)
        self._buffers: list[tuple[str, P.Buffer]] = []
        self._views: dict[int, tuple[Any, Any, Any]] = {}  # id(param) -> numpy (master, m, v)
        self._grad_views: dict[int, torch.Tensor] = {}
        # id(param) -> the placed fp32 view a param that is its own master lives in, or None
        self._own: dict[int, torch.Tensor | None] = {}
        self._copies = ParamCopies()  # what the kernel writes params that are not masters to
        self._warned_grads = False
        self._warned_resync = False
        self._cfgs: dict[int, tuple[tuple, A.AdamConfig]] = {}  # id(group) -> (key, config)
        self._ncount = (-1, 0)  # (len(param_groups), params in them) for _nparams
        self._counts = StepCounts()
        if nt_copy != "auto" and not isinstance(nt_copy, bool):
            raise ValueError(f"nt_copy {nt_copy!r}: expected True, False or 'auto'")
        if isinstance(team, str) and team not in ("auto", "openmp"):
            raise ValueError(f"team {team!r}: expected an AdamTeam, a thread count, "
                             "{node: threads}, 'openmp', 'auto' or None")
        self._team_spec = team
        self._team: A.AdamTeam | None = team if isinstance(team, A.AdamTeam) else None
        if team is not None and not isinstance(team, (A.AdamTeam, str)):
            self._team = A.AdamTeam(team)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        maximize=maximize, decoupled=decoupled)
        super().__init__(params, defaults)

    # ---- placement ----

    def _alloc(self, cls: str, nbytes: int) -> P.Buffer:
        nbytes = max(nbytes, 1)
        pol = self._plan.policy(cls) if self._plan is not None else (self._policy or P.default())
        thp = True if self._huge_pages and not pol.page_granular else None
        if self._plan is not None:
            buf = self._plan.alloc(cls, nbytes, thp=thp)
        else:
            buf = P.alloc(nbytes, self._policy, thp=thp)
        self._buffers.append((cls, buf))
        return buf

    def buffers(self) -> list[tuple[str, P.Buffer]]:
        """(data class, buffer) of every allocation this optimizer made, for audits."""
        return list(self._buffers)

    def _check_group(self, params: list[torch.Tensor]) -> None:
        for p in params:
            if p.dtype not in _SUPPORTED:
                raise TypeError(f"param of shape {tuple(p.shape)}: {p.dtype}, expected float32, "
                                "bfloat16 or float16")
            if p.is_sparse:
                raise TypeError("TieredAdamW does not take sparse params")
        copied = sum(p.numel() for p in params if self._master_mode == "copy"
                     and p.dtype == torch.float32 and p.device.type == "cpu")
        if copied:
            log.info("TieredAdamW: master='copy' keeps a second fp32 copy of %d fp32 params: "
                     "%d more bytes of memory and 4 more bytes per param per step (32 instead "
                     "of 28 bytes per param)", copied, 4 * copied)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        # long: one pass lays out the group's three buffers (masters, moments, placed grads and
        # params) by running offsets: split, the offsets would be shared state between parts
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        params = group["params"]
        self._check_group(params)
        own = [self._own_master(p) for p in params]
        n = sum(p.numel() for p in params)
        n_own = sum(p.numel() for p, o in zip(params, own) if o)
        place_own = self._plan is not None or self._policy is not None
        # an own-master param moves into the fp32_params buffer when a plan or policy places
        # that class, or (huge_pages) when it is large and owns its storage whole: torch's
        # allocator gives it 4 KiB pages (THP is madvise-only on most distributions)
        moved = [o and (place_own or self._thp_move(p)) for p, o in zip(params, own)]
        # a param moved for huge pages alone gets a buffer of its own: a view into the group's
        # shared buffer would make torch.save of one param (or of a model's state_dict) write
        # that whole buffer, the bf16 params' masters included
        alone = [mo and not place_own for mo in moved]
        n_master = n - n_own + sum(p.numel() for p, mo, a in zip(params, moved, alone)
                                   if mo and not a)
        master = _flat_f32(self._alloc("fp32_params", 4 * n_master)) if n_master else None
        moments = _flat_f32(self._alloc("optimizer_states", 8 * n))
        moments.zero_()
        m_all, v_all = moments[:n], moments[n:2 * n]
        if self._place_grads:
            gbuf = self._alloc("bf16_grads", sum(p.numel() * p.element_size() for p in params))
            graw = torch.frombuffer(gbuf, dtype=torch.uint8)
        if self._place_params:  # a param that is its own master lives in fp32_params
            pbuf = self._alloc("bf16_params", sum(p.numel() * p.element_size()
                                                  for p, o in zip(params, own) if not o))
            praw = torch.frombuffer(pbuf, dtype=torch.uint8)
        off = moff = boff = poff = 0
        counts = self._counts.add_group(params)
        for i, (p, is_own) in enumerate(zip(params, own)):
            k = p.numel()
            if is_own and not moved[i]:
                mv = p.detach()  # the param is its own master: nothing copied, ever
                self._own[id(p)] = None
            elif alone[i]:
                mv = _flat_f32(self._alloc("fp32_params", 4 * k)).view(p.shape)
            else:
                mv = master[moff:moff + k].view(p.shape)
                moff += k
            if not is_own or moved[i]:
                with torch.no_grad():
                    mv.copy_(p.detach().to("cpu", torch.float32))
                if is_own:  # the param moves into the placed master buffer (one copy, now)
                    p.data = mv
                    self._own[id(p)] = mv
            self.state[p] = {"step": counts[i], "exp_avg": m_all[off:off + k].view(p.shape),
                             "exp_avg_sq": v_all[off:off + k].view(p.shape), "master": mv}
            self._views[id(p)] = (mv.numpy(), m_all[off:off + k].numpy(),
                                  v_all[off:off + k].numpy())
            nb = k * p.element_size()
            if self._place_params and p.device.type == "cpu" and not is_own:
                view = praw[poff:poff + nb].view(p.dtype).view(p.shape)
                view.copy_(p.detach())
                p.data = view
                poff += nb
            if self._place_grads and p.device.type == "cpu":
                g = graw[boff:boff + nb].view(p.dtype).view(p.shape)
                g.zero_()
                self._grad_views[id(p)] = g
                p.grad = g
            if not is_own:  # the master holds the param as of now (resync=False compares)
                self._copies.mark(p)
            off += k
            boff += nb

    def _thp_move(self, p: torch.Tensor) -> bool:
        """huge_pages: move this own-master param into a huge-page buffer? From THP_MOVE_BYTES
        on, and only a param that is its storage whole and its storage's only user: a view
        into a flat buffer, or a storage another tensor shares (a view, a detached alias),
        stays where its owner put it, so no alias silently stops aliasing."""
        nbytes = p.numel() * 4
        if not (self._huge_pages and nbytes >= THP_MOVE_BYTES and p.storage_offset() == 0
                and p.untyped_storage().nbytes() == nbytes):
            return False
        use_count = getattr(torch._C, "_storage_Use_Count", None)
        if use_count is None:  # no way to tell whether another tensor shares it: leave it
            return False
        st = p.untyped_storage()
        return use_count(st._cdata) <= 2  # p's own reference and `st`'s

    def _own_master(self, p: torch.Tensor) -> bool:
        return self._master_mode == "auto" and p.dtype == torch.float32 \
            and p.device.type == "cpu" and p.is_contiguous()

    # ---- the step ----

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Grads in placed buffers are zeroed in place (they must stay where the plan put
        them); other grads follow torch (None by default)."""
        if not self._grad_views:
            super().zero_grad(set_to_none=set_to_none)
            return
        for group in self.param_groups:
            for p in group["params"]:
                g = self._grad_views.get(id(p))
                if g is not None:
                    g.zero_()
                    p.grad = g
                elif p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.detach_().zero_()

    def _nparams(self) -> int:
        # params join only through add_param_group: one sum per group count (the sum walks
        # every param: 35 us a step with the caches cold after forward/backward)
        k = len(self.param_groups)
        if self._ncount[0] != k:
            self._ncount = (k, sum(p.numel() for g in self.param_groups for p in g["params"]))
        return self._ncount[1]

    def _config(self, group: dict[str, Any]) -> A.AdamConfig:
        nt_copy = self._nt[1]
        if nt_copy == "auto":
            nt_copy = self._nparams() >= AUTO_TEAM_PARAMS
        key = (float(group["lr"]), tuple(group["betas"]), float(group["eps"]),
               float(group["weight_decay"]), group["decoupled"], group["maximize"],
               bool(nt_copy))
        hit = self._cfgs.get(id(group))
        if hit is not None and hit[0] == key:
            return hit[1]  # validated once per change: AdamConfig's checks cost ~10 us a step
        cfg = A.AdamConfig(lr=key[0], betas=key[1], eps=key[2], weight_decay=key[3],
                           decoupled=key[4], maximize=key[5], simd=self._simd,
                           nt_state=self._nt[0], nt_copy=key[6], resync=self._resync)
        self._cfgs[id(group)] = (key, cfg)  # one per group: a scheduler's lr replaces it
        return cfg

    def step(self, closure: Any = None, *, grad_scale: float = 1.0) -> Any:
        """One step of every group. torch's step pre/post hooks run as torch's own wrapper
        runs them, and the profiler sees "Optimizer.step#TieredAdamW.step" while it runs;
        without either, the step skips that wrapper: right after forward/backward (or the
        previous step) streamed the caches out, its record_function, hook lookups and
        _optimizer_step_code cost about 0.2 ms cold, 3 % of a 10M-param bf16 step
        (bench/adam_phases.py measures it)."""
        if (_global_step_hooks() or self._optimizer_step_pre_hooks
                or self._optimizer_step_post_hooks or _profiling()) \
                and type(self).step is TieredAdamW.step:  # a subclass's own step: torch
            return _HOOKED_STEP(self, closure, grad_scale=grad_scale)  # wrapped that one
        return _plain_step(self, closure, grad_scale=grad_scale)

    step.hooked = True  # torch's _patch_step_function: do not wrap it again

    def _step_group(self, group: dict[str, Any], grad_scale: float) -> None:
        """One group: the kernel's arguments per step count, one kernel call per count,
        staged params copied back, one warning the first time a 16-bit master is re-read."""
        cfg = self._config(group)
        by_step: dict[int, list[tuple]] = {}
        back: list[tuple[torch.Tensor, torch.Tensor]] = []  # (param, staged copy)
        low = False  # a 16-bit param's master may be re-read (an upcast, not exact)
        todo: list[tuple] = []  # kernel args
        stepped: list[torch.Tensor] = []
        for p in group["params"]:
            if p.grad is None:
                continue
            args, staged = self._kernel_args(p)
            if staged is not None:
                back.append((p, staged))
            low |= args[5] is not None and p.dtype != torch.float32
            todo.append(args)
            stepped.append(p)
        for args, s in zip(todo, self._counts.advance(stepped, self.state)):
            by_step.setdefault(s, []).append(args)
        team = self._auto_team()
        changed, self._copies.reread = self._copies.reread, 0
        for s, args in by_step.items():
            changed += A.step_raw(args, cfg, s, grad_scale=grad_scale, team=team)
        for p, staged in back:
            p.copy_(staged)
            self._copies.mark(p)
        if not self._resync:  # our own writes went through numpy: no version bump to forget
            for p in group["params"]:
                if id(p) not in self._own and id(p) not in self._copies.stage:
                    self._copies.mark(p)
        if changed and low and not self._warned_resync:
            dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in group["params"]
                             if p.dtype != torch.float32})
            log.warning("TieredAdamW: %d param elements were changed outside the optimizer "
                        "since its last step (a load, an init, a copy_, a .data write); their "
                        "fp32 masters were re-read from the %s params, so the low bits the old "
                        "masters held are gone (logged once)", changed, "/".join(dtypes))
            self._warned_resync = True

    def traffic_step(self) -> None:
        """Benchmarks: the memory traffic of step() without its arithmetic, on this
        optimizer's own buffers and threads, the bandwidth bound its step is judged against:
        per param with a grad, the master, exp_avg, exp_avg_sq and the param's 16-bit copy
        read and written back unchanged and the grad read, in the kernel's loop and order
        (AdamConfig.traffic_only). No value, step count or state changes; staged params (off
        the CPU) are not copied back. Grad mode is switched off as step() does it."""
        was = _grad_on()
        _set_grad(False)
        try:
            for group in self.param_groups:
                args = [self._kernel_args(p)[0] for p in group["params"] if p.grad is not None]
                if args:
                    cfg = dataclasses.replace(self._config(group), traffic_only=True)
                    A.step_raw(args, cfg, 1, team=self._auto_team())
        finally:
            _set_grad(was)

    def _kernel_args(self, p: torch.Tensor) -> tuple[tuple, torch.Tensor | None]:
        """The kernel's tuple for one param with a grad, and the staged CPU copy to write
        back when the param is off the CPU (_step_group advances the step counts)."""
        g = p.grad
        if g.is_sparse:
            raise TypeError("TieredAdamW does not take sparse gradients")
        if g.dtype not in _CODES:
            raise TypeError(f"grad of param of shape {tuple(p.shape)}: {g.dtype}")
        placed = self._grad_views.get(id(p))
        if placed is not None and g.data_ptr() != placed.data_ptr():
            # something replaced the placed grad (model.zero_grad() sets None, then autograd
            # allocates anew): put it back where the plan wants it, loudly
            if not self._warned_grads:
                log.warning("TieredAdamW: grads were moved out of their placed buffer "
                            "(model.zero_grad()?); copying them back each step. Call the "
                            "optimizer's zero_grad instead.")
                self._warned_grads = True
            placed.copy_(g)
            p.grad = g = placed
        if g.device.type != "cpu" or not g.is_contiguous():
            g = g.to("cpu").contiguous()
        mst, m, v = self._views[id(p)]
        staged = None
        if id(p) in self._own:
            mst, copy = self._own_view(p), None
        elif p.device.type == "cpu" and p.is_contiguous():
            copy = self._copies.view(p)
            if not self._resync:
                self._copies.reread_if_changed(p, self.state[p]["master"])
        else:
            staged = self._copies.staged(p)
            copy = _np(staged)
        code = _CODES[p.dtype] if copy is not None else A.DTYPES_NONE
        return (mst, m, v, _np(g.detach()), _CODES[g.dtype], copy, code), staged

    def _auto_team(self) -> A.AdamTeam | None:
        spec = self._team_spec
        if self._team is None and (spec == "openmp" or
                                   (spec == "auto" and self._nparams() >= AUTO_TEAM_PARAMS)):
            self._team = _default_team(spec)
        return self._team

    def _own_view(self, p: torch.Tensor) -> Any:
        """The numpy master of a param that is its own master, following the param when its
        storage was replaced (to() round trips, p.data = ...)."""
        if not (p.dtype == torch.float32 and p.device.type == "cpu" and p.is_contiguous()):
            raise TypeError(f"param of shape {tuple(p.shape)} is now {p.dtype} on {p.device} "
                            "(it was a contiguous float32 CPU param, its own master): build "
                            "the optimizer again for a model that changed dtype or device")
        placed = self._own[id(p)]
        if placed is not None:
            if p.data_ptr() != placed.data_ptr():  # back into the buffer the plan placed
                placed.copy_(p.detach())
                p.data = placed
            return self._views[id(p)][0]
        if p.data_ptr() != self.state[p]["master"].data_ptr():
            self.state[p]["master"] = p.detach()
            m, v = self._views[id(p)][1:]
            self._views[id(p)] = (p.detach().numpy(), m, v)
        return self._views[id(p)][0]

    # ---- state ----

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copies the saved moments (and fp32 master params, when saved; from the params
        otherwise, as for a torch.optim.AdamW state dict) into the placed buffers, bit for
        bit, and takes the saved hyperparameters. A param that is its own master (fp32 on
        the CPU) keeps its value: the model's state dict holds it."""
        saved = state_dict["param_groups"]
        check_saved_groups(saved, self.param_groups)
        ids: dict[int, torch.Tensor] = {}
        for g, sg in zip(self.param_groups, saved):
            ids.update(zip(sg["params"], g["params"]))
        for k, v in state_dict["state"].items():
            if k not in ids:
                raise KeyError(f"state dict names param {k!r}, which no group holds")
            p = ids[k]
            st = self.state[p]
            for key in ("exp_avg", "exp_avg_sq"):
                src = v[key]
                if tuple(src.shape) != tuple(st[key].shape):
                    raise ValueError(f"param {k}: saved {key} has shape {tuple(src.shape)}, "
                                     f"expected {tuple(st[key].shape)}")
                st[key].copy_(src.to(torch.float32))
            if id(p) in self._own:
                pass  # the param is its own master: the model's state dict holds it
            elif "master" in v:
                st["master"].copy_(v["master"].to(torch.float32))
            else:
                st["master"].copy_(p.detach().to("cpu", torch.float32))
            if id(p) not in self._own and id(p) not in self._copies.stage:
                self._copies.mark(p)
            st["step"] = self._counts.load(p, float(v["step"]))
        take_saved_hyperparams(saved, self.param_groups)

    def close(self) -> None:
        """Release the team's threads (buffers go with the optimizer)."""
        if self._team is not None:
            self._team.close()
            self._team = None
            self._team_spec = None

    # the spilled optimizer (state on a SubgroupStore's paths) is SpilledAdamW, chosen by
    # its caller; the old spelling TieredAdamW(..., spill=store) is kept for one release:
    # cxlkit.integrations.torch_spill registers the class it builds (no import back from here)
    _spilled_class: type | None = None

    def __new__(cls, *args: Any, spill: Any = None, **kwargs: Any) -> TieredAdamW:
        if spill is None or cls is not TieredAdamW:
            return super().__new__(cls)
        if TieredAdamW._spilled_class is None:
            raise TypeError("TieredAdamW(spill=...): spill does not apply to TieredAdamW; use "
                            "SpilledAdamW(params, spill=store) from "
                            "cxlkit.integrations.torch_spill")
        warnings.warn("TieredAdamW(..., spill=store) is deprecated: use SpilledAdamW(params, "
                      "spill=store) from cxlkit.integrations.torch_spill (it refuses plan=, "
                      "policy=, place_grads= and place_params=)", DeprecationWarning,
                      stacklevel=2)
        return super().__new__(TieredAdamW._spilled_class)

"""WaitPolicy: how the blocking calls of cxlkit.msg (comm, rpc) (and Ring.wait) poll the
pool — the Python face of the C library's cxk_wait_opts. docs/msg.md, "Waiting", has the
measurements behind the defaults."""
from __future__ import annotations

from dataclasses import dataclass

from .. import _native

_FOREVER = _native.WAIT_FOREVER  # the C ABI's "never leave this phase"
_SLEEP_MAX_US = 1_000_000
_WAIT_VARS = ("CXLKIT_MSG_SPIN_US", "CXLKIT_MSG_YIELD_US", "CXLKIT_MSG_SLEEP_US")


def _us(label: str, v: int | None, *, none_ok: bool, limit: int) -> None:
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= limit:
        raise ValueError(f"{label} {v!r}: expected microseconds 0..{limit}"
                         f"{' or None (forever)' if none_ok else ''}")


@dataclass(frozen=True)
class WaitPolicy:
    """While a poll finds nothing, spin (poll back to back, keeping the CPU) for spin_us,
    then yield the CPU between polls for yield_us more, then sleep between polls, each sleep
    1/16 of the time waited so far, at least 2 us and at most sleep_us (0: keep yielding).
    None for spin_us or yield_us: never leave that phase. Spinning answers fastest when
    every process has a core; sleeping lets a peer that shares the core run, and keeps an
    idle server off the CPU. On a loaded machine a yield hands the CPU to another task for
    its whole time slice, hence no yields by default."""

    spin_us: int | None = 200
    yield_us: int | None = 0
    sleep_us: int = 50

    def __post_init__(self) -> None:
        _us("spin_us", self.spin_us, none_ok=True, limit=_FOREVER - 1)
        _us("yield_us", self.yield_us, none_ok=True, limit=_FOREVER - 1)
        _us("sleep_us", self.sleep_us, none_ok=False, limit=_SLEEP_MAX_US)

    @classmethod
    def default(cls) -> WaitPolicy:
        """The process default: CXLKIT_MSG_SPIN_US / _YIELD_US / _SLEEP_US as the library's
        CXLKIT_* table parses them, the class defaults for those unset. ValueError, the
        table's one-line refusal naming the variable, for one that holds something else."""
        for e in _native.config_table():
            if e.name in _WAIT_VARS and not e.valid:
                raise ValueError(e.why)
        return cls._from_native(_native.wait_defaults())

    def _to_native(self) -> tuple[int, int, int]:
        return (_FOREVER if self.spin_us is None else self.spin_us,
                _FOREVER if self.yield_us is None else self.yield_us, self.sleep_us)

    @classmethod
    def _from_native(cls, t: tuple[int, int, int]) -> WaitPolicy:
        spin, yld, sleep = t
        return cls(None if spin == _FOREVER else spin, None if yld == _FOREVER else yld, sleep)


def policy_arg(wait: WaitPolicy | None) -> tuple[int, int, int]:
    """What the native set_wait takes for a `wait=` argument (None: the process default)."""
    if wait is None:
        wait = WaitPolicy.default()
    if not isinstance(wait, WaitPolicy):
        raise TypeError(f"wait {wait!r}: expected a cxlkit.msg.WaitPolicy or None")
    return wait._to_native()

"""The one parser of sizes and counts on every option and argument (docs/units.md).

Bytes and tokens count in powers of two: K = 1024 (64M = 64 MiB, as numactl and the kernel
say it; 32k tokens = 32768, as context lengths are quoted: a "128k" model has 131072).
Other counts (vectors, parameters) are decimal: 100M vectors = 10**8, 7B = 7 * 10**9.
Ki/Mi/Gi/Ti are always powers of two; a trailing B / iB on a byte size is accepted."""
from __future__ import annotations

import re

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*"


def _whole(what: str, text: object, value: float) -> int:
    if value != int(value):
        raise ValueError(f"{what} {text!r}: not a whole number")
    return int(value)


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes from an int or "4096", "64M", "1.5G", "2MiB", "64KB" (K/M/G/T = 1024**n).
    TypeError for a bool or another type; ValueError naming `what` for anything else."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise TypeError(f"{what} {text!r}: expected an int or a string such as '64M'")
    if isinstance(text, int):
        return text
    m = re.fullmatch(_NUMBER + r"([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"{what} {text!r}: expected a number of bytes with an optional "
                         "K/M/G/T suffix (powers of 1024)")
    return _whole(what, text, float(m.group(1)) * _BINARY[m.group(2).lower()])


def parse_count(text: str | int, what: str = "count", *, tokens: bool = False) -> int:
    """A positive count from an int or "100M", "7B", "1.5k", "64Ki". K/M/G/T are decimal,
    except for tokens (tokens=True: K = 1024, so "32k" = 32768); Ki/Mi/Gi/Ti are binary."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise TypeError(f"{what} {text!r}: expected an int or a string like 100M")
    if isinstance(text, int):
        n = text
    else:
        m = re.fullmatch(_NUMBER + r"(?:([kKmMgGbBtT])([iI]?))?\s*", text)
        if not m:
            raise ValueError(f"{what} {text!r}: expected a number with an optional K/M/G/T "
                             "or Ki/Mi/Gi/Ti suffix")
        unit, binary = (m.group(2) or "").lower(), bool(m.group(3)) or tokens
        if binary and unit == "b":
            raise ValueError(f"{what} {text!r}: B (billion) has no binary form")
        mult = _BINARY[unit] if binary else _DECIMAL[unit]
        n = _whole(what, text, float(m.group(1)) * mult)
    if n <= 0:
        raise ValueError(f"{what} {text!r}: expected > 0")
    return n
